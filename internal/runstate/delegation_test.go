package runstate

import (
	"errors"
	"testing"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

func delegationStarted(seq uint64, ids ...string) *reinv1.Event {
	e := envelope(seq)
	ds := &reinv1.DelegationStarted{}
	for _, id := range ids {
		ds.Children = append(ds.Children, &reinv1.DelegatedChild{
			RunId: id, RequestId: "req-" + id, Contract: testContract(),
			Budget: &reinv1.Budget{MaxSteps: 5, MaxTokens: 100, MaxCostUsd: 0.25, MaxToolCalls: 2},
		})
	}
	e.Payload = &reinv1.Event_DelegationStarted{DelegationStarted: ds}
	return e
}

func delegationReturned(seq uint64, id string, status reinv1.RunStatus) *reinv1.Event {
	e := envelope(seq)
	e.Payload = &reinv1.Event_DelegationReturned{DelegationReturned: &reinv1.DelegationReturned{
		RunId: id, Status: status, Usage: &reinv1.Usage{InputTokens: 30, OutputTokens: 10}, CostUsd: 0.1, Steps: 2, ToolCalls: 1,
	}}
	return e
}

func TestApplyDelegationLendsAndReturns(t *testing.T) {
	s := mustApply(t, State{}, runStarted(1), modelRequested(2), modelReturned(3, 10, 5), delegationStarted(4, "run-a", "run-b"))
	lent := Spend{Steps: 10, Tokens: 200, CostUSD: 0.5, ToolCalls: 4}
	if !s.Waiting() || s.Lent != lent || s.ChildrenStarted != 2 {
		t.Fatalf("after delegation: waiting %v, lent %+v, started %d", s.Waiting(), s.Lent, s.ChildrenStarted)
	}
	if got := s.Committed(); got.Steps != 11 || got.Tokens != 215 {
		t.Fatalf("committed %+v, want the run's own spend plus the loans", got)
	}
	// The run may not call its model while it waits.
	if _, err := Apply(s, modelRequested(5)); !errors.Is(err, ErrIllegalTransition) {
		t.Fatalf("model_requested while waiting: %v, want ErrIllegalTransition", err)
	}
	// A report of a run that is not an open child is refused.
	if _, err := Apply(s, delegationReturned(5, "run-z", completed)); !errors.Is(err, ErrIllegalTransition) {
		t.Fatalf("delegation_returned of a stranger: %v", err)
	}
	// A child that has not ended does not return.
	if _, err := Apply(s, delegationReturned(5, "run-a", running)); !errors.Is(err, ErrInvalidEvent) {
		t.Fatalf("delegation_returned of a running child: %v", err)
	}
	s = mustApply(t, s, delegationReturned(5, "run-a", completed))
	if s.Lent != (Spend{Steps: 5, Tokens: 100, CostUSD: 0.25, ToolCalls: 2}) || s.Returned != (Spend{Steps: 2, Tokens: 40, CostUSD: 0.1, ToolCalls: 1}) {
		t.Fatalf("after one return: lent %+v returned %+v", s.Lent, s.Returned)
	}
	// A second report of the same child is refused.
	if _, err := Apply(s, delegationReturned(6, "run-a", completed)); !errors.Is(err, ErrIllegalTransition) {
		t.Fatalf("second delegation_returned: %v", err)
	}
	s = mustApply(t, s, delegationReturned(6, "run-b", failed), modelRequested(7))
	if s.Waiting() || !s.Lent.IsZero() || s.Spent().Steps != 2+4 {
		t.Fatalf("after both returns: waiting %v lent %+v spent %+v", s.Waiting(), s.Lent, s.Spent())
	}
	if got := FromProto(s.Proto(true), nil); !stateEqual(got, s) {
		t.Fatalf("round trip:\n got  %+v\n want %+v", got, s)
	}
}

func TestApplyDelegationRefusals(t *testing.T) {
	s := mustApply(t, State{}, runStarted(1))
	if _, err := Apply(s, delegationStarted(2)); !errors.Is(err, ErrInvalidEvent) {
		t.Fatalf("delegation without children: %v", err)
	}
	bad := delegationStarted(2, "run-a")
	bad.GetDelegationStarted().Children[0].RequestId = ""
	if _, err := Apply(s, bad); !errors.Is(err, ErrInvalidEvent) {
		t.Fatalf("child without a request id: %v", err)
	}
	s = mustApply(t, s, delegationStarted(2, "run-a"))
	if _, err := Apply(s, delegationStarted(3, "run-b")); !errors.Is(err, ErrIllegalTransition) {
		t.Fatalf("second delegation while waiting: %v", err)
	}
	inFlight := mustApply(t, State{}, runStarted(1), modelRequested(2))
	if _, err := Apply(inFlight, delegationStarted(3, "run-a")); !errors.Is(err, ErrIllegalTransition) {
		t.Fatalf("delegation during a model call: %v", err)
	}
}
