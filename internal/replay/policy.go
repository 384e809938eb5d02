package replay

import (
	"context"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/policy"
)

// recordedPolicy answers the policies a replay cannot ask from the
// recording: the server's rules as they decided when the run was recorded
// (unless the replay is given rules of its own: Options.Policy), and the
// policy services' answers, by call ID. A call the recording has no answer
// for is not decided by that source; a service asked about it fails
// closed, as one that does not answer does.
type recordedPolicy struct {
	server, service map[string]*reinv1.PolicyDecided
}

func newRecordedPolicy(events []*reinv1.Event) *recordedPolicy {
	r := &recordedPolicy{server: map[string]*reinv1.PolicyDecided{}, service: map[string]*reinv1.PolicyDecided{}}
	for _, ev := range events {
		pd := ev.GetPolicyDecided()
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
		c.Server = rules
	}
	return c
}
