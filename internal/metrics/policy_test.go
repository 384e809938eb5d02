package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// TestPolicyDecisions: each policy decision is counted by effect, source
// and whether it failed closed, and a write a policy approved leaves the
// approvals waiting without a decision time; its twin, a person's
// approval, observes one.
func TestPolicyDecisions(t *testing.T) {
	m := New()
	decided := func(effect reinv1.PolicyEffect, source reinv1.PolicySource, failed string) *reinv1.Event {
		return &reinv1.Event{Payload: &reinv1.Event_PolicyDecided{PolicyDecided: &reinv1.PolicyDecided{
			CallId: "c", Tool: "refund", Effect: effect, Source: source, Rule: "r", Error: failed}}}
	}
	asked := func() []*reinv1.Event {
		return []*reinv1.Event{
			{RecordedAt: timestamppb.New(t0), Payload: &reinv1.Event_ApprovalRequested{ApprovalRequested: &reinv1.ApprovalRequested{}}},
			changed(running, approval, 0),
		}
	}
	approved := func(actor string) *reinv1.Event {
		return &reinv1.Event{Actor: actor, RecordedAt: timestamppb.New(t0.Add(60e9)), Payload: &reinv1.Event_ApprovalDecided{ApprovalDecided: &reinv1.ApprovalDecided{Approved: true}}}
	}
	m.Observe("run_a", []*reinv1.Event{started("gpt-test")})
	m.Observe("run_a", append(append([]*reinv1.Event{decided(reinv1.PolicyEffect_POLICY_EFFECT_ALLOW, reinv1.PolicySource_POLICY_SOURCE_CONTRACT, "")}, asked()...),
		approved("policy:r"), changed(approval, running, 0)))
	m.Observe("run_a", []*reinv1.Event{decided(reinv1.PolicyEffect_POLICY_EFFECT_ASK, reinv1.PolicySource_POLICY_SOURCE_SERVICE, "did not answer")})
	m.Observe("run_a", asked())
	if got := testutil.ToFloat64(m.approvalsWaiting); got != 1 {
		t.Fatalf("approvals waiting = %v, want the one a person must decide", got)
	}
	if n := testutil.CollectAndCount(m.approvalWait); n != 1 || testutil.ToFloat64(m.policyDecisions.WithLabelValues("allow", "contract", "false")) != 1 {
		t.Fatalf("after a policy's approval: %d decision-time series, %v allow decisions", n, testutil.ToFloat64(m.policyDecisions.WithLabelValues("allow", "contract", "false")))
	}
	m.Observe("run_a", []*reinv1.Event{approved("principal:bob")})
	for name, c := range map[string]struct{ got, want float64 }{
		"allow":          {testutil.ToFloat64(m.policyDecisions.WithLabelValues("allow", "contract", "false")), 1},
		"ask, failed":    {testutil.ToFloat64(m.policyDecisions.WithLabelValues("ask", "service", "true")), 1},
		"waiting":        {testutil.ToFloat64(m.approvalsWaiting), 0},
		"people's waits": {float64(histogramCount(t, m)), 1},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", name, c.got, c.want)
		}
	}
}

// histogramCount is how many waits rein_approval_decision_seconds saw.
func histogramCount(t *testing.T, m *Metrics) uint64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "rein_approval_decision_seconds" {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	return 0
}
