package runstate

// Tests of the status machine: the transition table against docs/design.md §2, Apply
// of every legal and illegal status change, what a pause needs first, and
// terminal statuses refusing every later event.

import (
	"errors"
	"testing"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"google.golang.org/protobuf/proto"
)

// allStatuses is every status a run can be in.
var allStatuses = []reinv1.RunStatus{
	running, needsInput, needsApproval, needsBudget,
	completed, exhausted, failed, denied, expired, cancelled,
}

// designTransitions is docs/design.md §2's table, written out independently of
// transitions.go so that a change to either is caught.
var designTransitions = map[[2]reinv1.RunStatus]bool{
	{running, completed}:       true,
	{running, needsInput}:      true,
	{running, needsApproval}:   true,
	{running, exhausted}:       true,
	{running, failed}:          true,
	{running, denied}:          true,
	{running, cancelled}:       true,
	{needsInput, running}:      true,
	{needsInput, exhausted}:    true,
	{needsInput, cancelled}:    true,
	{needsApproval, running}:   true,
	{needsApproval, denied}:    true,
	{needsApproval, expired}:   true,
	{needsApproval, failed}:    true,
	{needsApproval, exhausted}: true,
	{needsApproval, cancelled}: true,
	{running, needsBudget}:     true,
	{needsBudget, running}:     true,
	{needsBudget, expired}:     true,
	{needsBudget, cancelled}:   true,
}

func TestLegalMatchesDesign(t *testing.T) {
	for _, from := range append(allStatuses, unspecified) {
		for _, to := range append(allStatuses, unspecified) {
			want := designTransitions[[2]reinv1.RunStatus{from, to}]
			if got := Legal(from, to); got != want {
				t.Errorf("Legal(%s, %s) = %v, want %v", StatusName(from), StatusName(to), got, want)
			}
		}
	}
	for _, s := range allStatuses {
		_, hasExits := transitions[s]
		if Terminal(s) == hasExits {
			t.Errorf("Terminal(%s) = %v, but the table has exits: %v", StatusName(s), Terminal(s), hasExits)
		}
	}
}

func TestApplyLegalTransitions(t *testing.T) {
	n := 0
	for _, from := range allStatuses {
		for _, to := range transitions[from] {
			n++
			t.Run(StatusName(from)+"_to_"+StatusName(to), func(t *testing.T) {
				s := stateAt(t, from)
				switch to {
				case needsApproval:
					s = mustApply(t, s, approvalRequested(s.Version+1, "p-2"))
				case needsInput:
					s = mustApply(t, s, inputRequested(s.Version+1))
				case needsBudget:
					s = mustApply(t, s, budgetPaused(s.Version+1))
				}
				ev := statusChanged(s.Version+1, from, to)
				orig := proto.Clone(ev)
				got, err := Apply(s, ev)
				if err != nil {
					t.Fatalf("Apply: %v", err)
				}
				if !proto.Equal(ev, orig) {
					t.Errorf("Apply mutated the event: %v", ev)
				}
				if got.Status != to {
					t.Errorf("status = %s, want %s", StatusName(got.Status), StatusName(to))
				}
				if got.Version != s.Version+1 {
					t.Errorf("version = %d, want %d", got.Version, s.Version+1)
				}
				if got.StatusReason != "test "+StatusName(to) {
					t.Errorf("status reason = %q", got.StatusReason)
				}
				if !got.UpdatedAt.Equal(at(got.Version)) {
					t.Errorf("updated at = %v, want %v", got.UpdatedAt, at(got.Version))
				}
				switch {
				case to == needsApproval:
					if got.Pending.GetProposal().GetProposalId() != "p-2" {
						t.Errorf("pending = %v, want proposal p-2", got.Pending)
					}
				case to == needsInput:
					if got.Pending.GetQuestion() == nil {
						t.Errorf("pending = %v, want a question", got.Pending)
					}
				case to == needsBudget:
					if got.Pending.GetBudget().GetLimit() != "max_steps" {
						t.Errorf("pending = %v, want the budget pause on max_steps", got.Pending)
					}
				case got.Pending != nil:
					t.Errorf("pending = %v after %s, want none", got.Pending, StatusName(to))
				}
				switch to {
				case completed:
					if got.Result.GetText() != "done" {
						t.Errorf("result = %v, want done", got.Result)
					}
				case failed:
					if got.LastError != "model client: quota" {
						t.Errorf("last error = %q", got.LastError)
					}
				}
			})
		}
	}
	if n != len(designTransitions) {
		t.Errorf("the table has %d transitions, docs/design.md §2 has %d", n, len(designTransitions))
	}
}

func TestApplyIllegalTransitions(t *testing.T) {
	for _, from := range allStatuses {
		for _, to := range append(allStatuses, unspecified) {
			if designTransitions[[2]reinv1.RunStatus{from, to}] {
				continue
			}
			t.Run(StatusName(from)+"_to_"+StatusName(to), func(t *testing.T) {
				s := stateAt(t, from)
				want := ErrIllegalTransition
				if Terminal(from) {
					want = ErrTerminal
				}
				got, err := Apply(s, statusChanged(s.Version+1, from, to))
				if !errors.Is(err, want) {
					t.Fatalf("Apply: err = %v, want %v", err, want)
				}
				assertUnchanged(t, got, s)
			})
		}
	}
}

// TestApplyPauseNeedsPendingAction is the failure twin of the legal pauses:
// without the proposal or question first, the pause is refused.
func TestApplyPauseNeedsPendingAction(t *testing.T) {
	tests := []struct {
		name   string
		before []*reinv1.Event
		to     reinv1.RunStatus
	}{
		{"needs_approval_without_proposal", nil, needsApproval},
		{"needs_approval_after_question", []*reinv1.Event{inputRequested(2)}, needsApproval},
		{"needs_input_without_question", nil, needsInput},
		{"needs_input_after_proposal", []*reinv1.Event{approvalRequested(2, "p-1")}, needsInput},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := mustApply(t, stateAt(t, running), tc.before...)
			got, err := Apply(s, statusChanged(s.Version+1, running, tc.to))
			if !errors.Is(err, ErrIllegalTransition) {
				t.Fatalf("err = %v, want ErrIllegalTransition", err)
			}
			assertUnchanged(t, got, s)
		})
	}
}

func TestApplyStatusChangedFromMismatch(t *testing.T) {
	tests := []struct {
		name          string
		status        reinv1.RunStatus
		claimFrom, to reinv1.RunStatus
	}{
		{"running_claims_needs_input", running, needsInput, running},
		{"running_claims_needs_approval", running, needsApproval, denied},
		{"needs_input_claims_running", needsInput, running, cancelled},
		{"needs_approval_claims_needs_input", needsApproval, needsInput, running},
		{"needs_input_claims_unspecified", needsInput, unspecified, running},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := stateAt(t, tc.status)
			got, err := Apply(s, statusChanged(s.Version+1, tc.claimFrom, tc.to))
			if !errors.Is(err, ErrIllegalTransition) {
				t.Fatalf("err = %v, want ErrIllegalTransition", err)
			}
			assertUnchanged(t, got, s)
		})
	}
	// The twin: the same change with the right from is accepted.
	s := stateAt(t, needsInput)
	mustApply(t, s, statusChanged(s.Version+1, needsInput, cancelled))
}

func TestApplyAfterTerminal(t *testing.T) {
	next := map[string]func(seq uint64) *reinv1.Event{
		"run_started":     runStarted,
		"model_requested": modelRequested,
		"model_returned":  func(seq uint64) *reinv1.Event { return modelReturned(seq, 1, 1) },
		"tool_requested":  toolRequested,
		"input_requested": inputRequested,
		"budget_reached":  budgetReached,
		"no_payload":      envelope,
	}
	for _, status := range allStatuses {
		if !Terminal(status) {
			continue
		}
		for name, mk := range next {
			t.Run(StatusName(status)+"/"+name, func(t *testing.T) {
				s := stateAt(t, status)
				got, err := Apply(s, mk(s.Version+1))
				if !errors.Is(err, ErrTerminal) {
					t.Fatalf("err = %v, want ErrTerminal", err)
				}
				assertUnchanged(t, got, s)
			})
		}
	}
	// The twin: a paused run still takes a budget_reached.
	for _, status := range []reinv1.RunStatus{running, needsInput, needsApproval} {
		s := stateAt(t, status)
		mustApply(t, s, budgetReached(s.Version+1))
	}
}
