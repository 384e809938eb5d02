package replay

import (
	"context"
	"time"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/policy"
	"github.com/reinhq/rein/internal/ratelimit"
)

// recordedPolicy answers the policies a replay cannot ask from the
// recording: the server's rules as they decided when the run was recorded
// (unless the replay is given rules of its own: Options.Policy), and the
// policy services' answers, by call ID. A call the recording has no answer
// for is not decided by that source; a service asked about it fails
// closed, as one that does not answer does.
//
// The digests of the server's rules are the recorded ones too: run_started's,
// and each decision's, so that a replay under other rules parts from the
// recording where the rules decide otherwise, not at every digest.
type recordedPolicy struct {
	server, service map[string]*reinv1.PolicyDecided
	// digests are the recorded decisions' policy digests by call ID, and
	// started run_started's.
	digests map[string]string
	started string
}

func newRecordedPolicy(events []*reinv1.Event) *recordedPolicy {
	r := &recordedPolicy{server: map[string]*reinv1.PolicyDecided{}, service: map[string]*reinv1.PolicyDecided{},
		digests: map[string]string{}, started: events[0].GetRunStarted().GetPolicyDigest()}
	for _, ev := range events {
		pd := ev.GetPolicyDecided()
		if pd != nil {
			r.digests[pd.GetCallId()] = pd.GetPolicyDigest()
		}
		switch pd.GetSource() {
		case reinv1.PolicySource_POLICY_SOURCE_SERVER:
			r.server[pd.GetCallId()] = pd
		case reinv1.PolicySource_POLICY_SOURCE_SERVICE:
			r.service[pd.GetCallId()] = pd
		}
	}
	return r
}

// serverRules is the recorded server decisions as a policy.Decider.
type serverRules struct{ *recordedPolicy }

func (r serverRules) Decide(_ context.Context, call policy.Call, _ *reinv1.PolicyRun) *reinv1.PolicyDecided {
	return r.server[call.ID]
}

// Digest implements policy.Digester: the digest run_started recorded.
func (r *recordedPolicy) Digest() string { return r.started }

// DigestFor implements policy.Digester: the digest the call's decision
// recorded.
func (r *recordedPolicy) DigestFor(call policy.Call) string {
	if d, ok := r.digests[call.ID]; ok {
		return d
	}
	return r.started
}

// givenRules are the rules a replay is given (Options.Policy), decided by,
// with the recorded digests.
type givenRules struct {
	*recordedPolicy
	rules *policy.Holder
}

func (g givenRules) Decide(ctx context.Context, call policy.Call, run *reinv1.PolicyRun) *reinv1.PolicyDecided {
	return g.rules.Decide(ctx, call, run)
}

// Has implements policy.Asker: every service a grant names answers from
// the recording.
func (r *recordedPolicy) Has(string) bool { return true }

// Ask implements policy.Asker with the recorded answer.
func (r *recordedPolicy) Ask(ctx context.Context, name string, call policy.Call, run *reinv1.PolicyRun) *reinv1.PolicyDecided {
	if pd, ok := r.service[call.ID]; ok && pd.GetRule() == name {
		return pd
	}
	// Not asked when recorded: as a service that does not answer.
	return (*policy.Services)(nil).Ask(ctx, name, call, run)
}

// checker is the policy.Checker a replay decides with: the given server
// rules, or the recorded ones.
func (r *recordedPolicy) checker(rules *policy.Holder) *policy.Checker {
	c := &policy.Checker{Server: serverRules{r}, Services: r}
	if rules != nil {
		c.Server = givenRules{r, rules}
	}
	return c
}

// Take implements step.Rates with the recording's waits: a call waits as
// long as its model_throttled says, for the same bucket; one the recording
// has none for does not wait.
func (r *recording) Take(context.Context, ratelimit.Key, uint64) (time.Duration, string, error) {
	for i := int(r.version); i < len(r.events); i++ {
		ev := r.events[i]
		if mt := ev.GetModelThrottled(); mt != nil {
			return mt.GetWait().AsDuration(), mt.GetBucket(), nil
		}
		if ev.GetModelRequested() != nil {
			break
		}
	}
	return 0, "", nil
}

// Settle implements step.Rates: a replay keeps no buckets.
func (r *recording) Settle(context.Context, ratelimit.Key, int64, bool) error { return nil }

// Hold implements step.Rates: a replay keeps no buckets.
func (r *recording) Hold(context.Context, ratelimit.Key, time.Time) error { return nil }
