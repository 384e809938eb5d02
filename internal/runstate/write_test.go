package runstate

import (
	"errors"
	"testing"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

func decided(seq uint64, proposalID string, approved bool) *reinv1.Event {
	e := envelope(seq)
	e.Payload = &reinv1.Event_ApprovalDecided{ApprovalDecided: &reinv1.ApprovalDecided{ProposalId: proposalID, Approved: approved}}
	return e
}

func dispatched(seq uint64, proposalID, op string) *reinv1.Event {
	e := envelope(seq)
	e.Payload = &reinv1.Event_WriteDispatched{WriteDispatched: &reinv1.WriteDispatched{ProposalId: proposalID, OperationId: op}}
	return e
}

func committed(seq uint64, proposalID, op string) *reinv1.Event {
	e := envelope(seq)
	e.Payload = &reinv1.Event_WriteCommitted{WriteCommitted: &reinv1.WriteCommitted{ProposalId: proposalID, OperationId: op}}
	return e
}

func unknown(seq uint64, proposalID, op string) *reinv1.Event {
	e := envelope(seq)
	e.Payload = &reinv1.Event_WriteOutcomeUnknown{WriteOutcomeUnknown: &reinv1.WriteOutcomeUnknown{ProposalId: proposalID, OperationId: op}}
	return e
}

// paused is a run waiting for approval of proposal "p1", at version 3.
func paused(t *testing.T) State {
	return mustApply(t, State{}, runStarted(1), approvalRequested(2, "p1"), statusChanged(3, running, needsApproval))
}

// TestWriteLifecycle: approved → dispatched → committed → running, and the
// unknown-outcome path that puts the proposal back for a person and keeps
// the idempotency key.
func TestWriteLifecycle(t *testing.T) {
	s := mustApply(t, paused(t), decided(4, "p1", true))
	if s.Pending != nil || s.ApprovedWrite.GetProposalId() != "p1" {
		t.Fatalf("after approval: pending %v, approved %v", s.Pending, s.ApprovedWrite)
	}
	s = mustApply(t, s, dispatched(5, "p1", "op1"))
	if s.WriteOperationID != "op1" {
		t.Fatalf("after dispatch: key %q", s.WriteOperationID)
	}
	// No status change while the write is in flight: its outcome comes first.
	for _, to := range []reinv1.RunStatus{running, reinv1.RunStatus_RUN_STATUS_CANCELLED, reinv1.RunStatus_RUN_STATUS_EXPIRED, reinv1.RunStatus_RUN_STATUS_BUDGET_EXHAUSTED} {
		if _, err := Apply(s, statusChanged(6, needsApproval, to)); !errors.Is(err, ErrIllegalTransition) {
			t.Fatalf("%s with a write in flight: %v, want ErrIllegalTransition", StatusName(to), err)
		}
	}
	done := mustApply(t, s, committed(6, "p1", "op1"), statusChanged(7, needsApproval, running))
	if done.ApprovedWrite != nil || done.WriteOperationID != "" || done.Status != running {
		t.Fatalf("after commit: %+v", done)
	}

	// Unknown: the proposal waits for a person again; a second dispatch must
	// reuse the key.
	u := mustApply(t, s, unknown(6, "p1", "op1"))
	if u.Pending.GetProposal().GetProposalId() != "p1" || u.WriteOperationID != "op1" {
		t.Fatalf("after unknown: pending %v key %q", u.Pending, u.WriteOperationID)
	}
	again := mustApply(t, u, decided(7, "p1", true))
	if _, err := Apply(again, dispatched(8, "p1", "op2")); !errors.Is(err, ErrIllegalTransition) {
		t.Fatalf("a second dispatch with a new key: %v, want ErrIllegalTransition", err)
	}
	mustApply(t, again, dispatched(8, "p1", "op1"), committed(9, "p1", "op1"), statusChanged(10, needsApproval, running))
	// A person may also reject after an unknown outcome: the run goes on.
	r := mustApply(t, u, decided(7, "p1", false), statusChanged(8, needsApproval, running))
	if r.ApprovedWrite != nil || r.WriteOperationID != "" {
		t.Fatalf("after rejection: %+v", r)
	}
}

func TestWriteEventsRefused(t *testing.T) {
	p := paused(t)
	approved := mustApply(t, p, decided(4, "p1", true))
	inFlight := mustApply(t, approved, dispatched(5, "p1", "op1"))
	for _, tc := range []struct {
		name string
		s    State
		ev   *reinv1.Event
	}{
		{"dispatch without approval", p, dispatched(4, "p1", "op1")},
		{"dispatch after rejection", mustApply(t, p, decided(4, "p1", false)), dispatched(5, "p1", "op1")},
		{"dispatch of another proposal", approved, dispatched(5, "p2", "op1")},
		{"commit before dispatch", approved, committed(5, "p1", "op1")},
		{"commit of another key", inFlight, committed(6, "p1", "op9")},
		{"unknown of another key", inFlight, unknown(6, "p1", "op9")},
		{"decide twice", approved, decided(5, "p1", true)},
		{"decide another proposal", p, decided(4, "p2", true)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Apply(tc.s, tc.ev)
			if !errors.Is(err, ErrIllegalTransition) {
				t.Fatalf("err = %v, want ErrIllegalTransition", err)
			}
			assertUnchanged(t, got, tc.s)
		})
	}
	if _, err := Apply(approved, dispatched(5, "p1", "")); !errors.Is(err, ErrInvalidEvent) {
		t.Fatalf("dispatch without a key: %v, want ErrInvalidEvent", err)
	}
}
