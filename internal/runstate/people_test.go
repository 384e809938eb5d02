package runstate

import (
	"errors"
	"math"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

func steered(seq uint64, id string) *reinv1.Event {
	e := envelope(seq)
	e.Actor = "principal:alice"
	e.Payload = &reinv1.Event_RunSteered{RunSteered: &reinv1.RunSteered{Text: "use the staging account", RequestId: id}}
	return e
}

// A message to a running run waits for the next model call, which takes
// every message waiting; its request ID is kept through a snapshot.
func TestSteerWaitsForTheNextCall(t *testing.T) {
	s := mustApply(t, stateAt(t, running), steered(2, "s-1"), steered(3, "s-2"))
	if s.SteersWaiting != 2 || !s.HasSteer("s-1") || !s.HasSteer("s-2") || s.HasSteer("s-3") {
		t.Fatalf("after two messages: waiting %d, ids %v", s.SteersWaiting, s.Steers)
	}
	back := FromProto(s.Proto(false), s.Contract)
	if back.SteersWaiting != 2 || !back.HasSteer("s-2") {
		t.Errorf("a snapshot lost the messages: waiting %d, ids %v", back.SteersWaiting, back.Steers)
	}
	s = mustApply(t, s, modelRequested(4))
	if s.SteersWaiting != 0 || len(s.Steers) != 2 {
		t.Errorf("after the model call: waiting %d, ids %v; want 0 waiting and both ids kept", s.SteersWaiting, s.Steers)
	}
}

// A message is refused on a paused or ended run, twice with one request
// ID, and without text or ID; a refusal leaves the state as it was.
func TestSteerRefused(t *testing.T) {
	for name, c := range map[string]struct {
		s    State
		ev   func(seq uint64) *reinv1.Event
		want error
	}{
		"paused":        {stateAt(t, needsInput), func(q uint64) *reinv1.Event { return steered(q, "s-1") }, ErrIllegalTransition},
		"ended":         {stateAt(t, completed), func(q uint64) *reinv1.Event { return steered(q, "s-1") }, ErrTerminal},
		"same id twice": {mustApply(t, stateAt(t, running), steered(2, "s-1")), func(q uint64) *reinv1.Event { return steered(q, "s-1") }, ErrIllegalTransition},
		"no id":         {stateAt(t, running), func(q uint64) *reinv1.Event { return steered(q, "") }, ErrInvalidEvent},
		"no text": {stateAt(t, running), func(q uint64) *reinv1.Event {
			e := steered(q, "s-1")
			e.GetRunSteered().Text = ""
			return e
		}, ErrInvalidEvent},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := Apply(c.s, c.ev(c.s.Version+1))
			if !errors.Is(err, c.want) {
				t.Fatalf("Apply = %v, want %v", err, c.want)
			}
			if got.Version != c.s.Version || len(got.Steers) != len(c.s.Steers) {
				t.Errorf("a refused message changed the state: %+v", got)
			}
		})
	}
}

func raised(seq uint64, steps uint32, usd float64, extend time.Duration) *reinv1.Event {
	e := envelope(seq)
	e.Actor = "principal:bob"
	br := &reinv1.BudgetRaised{AddSteps: steps, AddCostUsd: usd}
	if extend > 0 {
		br.ExtendDeadline = durationpb.New(extend)
		br.Deadline = timestamppb.New(epoch.Add(time.Hour + extend))
	}
	e.Payload = &reinv1.Event_BudgetRaised{BudgetRaised: br}
	return e
}

// A raise on a run paused on its budget adds to its limits and moves its
// deadline; the run goes on with the status change that follows.
func TestBudgetRaised(t *testing.T) {
	s := stateAt(t, needsBudget)
	s.Contract = &reinv1.TaskContract{Goal: "g", Budget: &reinv1.Budget{MaxSteps: 3, MaxTokens: 1000}}
	if got := s.Limits(); got != (Spend{Steps: 3, Tokens: 1000}) {
		t.Fatalf("limits %+v before a raise, want the contract's", got)
	}
	s = mustApply(t, s, raised(4, 5, 0, 30*time.Minute), statusChanged(5, needsBudget, running))
	if got := s.Limits(); got != (Spend{Steps: 8, Tokens: 1000}) {
		t.Errorf("limits %+v after a raise of 5 steps, want 8 steps and 1000 tokens", got)
	}
	if !s.Deadline.Equal(epoch.Add(90 * time.Minute)) {
		t.Errorf("deadline %v, want it moved by 30 minutes", s.Deadline)
	}
	if s.Status != running || s.Pending != nil {
		t.Errorf("status %s, pending %v; want running with nothing pending", StatusName(s.Status), s.Pending)
	}
	if back := FromProto(s.Proto(false), s.Contract); back.Raised != s.Raised {
		t.Errorf("a snapshot lost the raise: %+v, want %+v", back.Raised, s.Raised)
	}
	// A limit the contract leaves unset stays unset.
	s = mustApply(t, s, budgetPaused(6), statusChanged(7, running, needsBudget), raised(8, 0, 2.5, 0))
	if got := s.Limits(); got.CostUSD != 0 || s.Raised.CostUSD != 2.5 {
		t.Errorf("limits %+v, raised %+v: a raise of a limit the contract leaves unset must leave it unset", got, s.Raised)
	}
}

// A raise is refused on a run that is not paused on its budget, and when
// it adds nothing; needs_budget needs a pausing budget_reached.
func TestBudgetRaiseRefused(t *testing.T) {
	if _, err := Apply(stateAt(t, running), raised(2, 5, 0, 0)); !errors.Is(err, ErrIllegalTransition) {
		t.Errorf("raise on a running run: %v, want ErrIllegalTransition", err)
	}
	if _, err := Apply(stateAt(t, needsBudget), raised(4, 0, 0, 0)); !errors.Is(err, ErrInvalidEvent) {
		t.Errorf("raise of nothing: %v, want ErrInvalidEvent", err)
	}
	nan := raised(4, 0, math.NaN(), 0)
	if _, err := Apply(stateAt(t, needsBudget), nan); !errors.Is(err, ErrInvalidEvent) {
		t.Errorf("a raise of NaN dollars: %v, want ErrInvalidEvent", err)
	}
	if _, err := Apply(stateAt(t, needsBudget), raised(4, 0, 0, 2*366*24*time.Hour)); !errors.Is(err, ErrInvalidEvent) {
		t.Errorf("a raise of two years: %v, want ErrInvalidEvent", err)
	}
	// A raise cannot wrap a limit round to 0, which is none.
	huge := stateAt(t, needsBudget)
	huge.Contract = &reinv1.TaskContract{Goal: "g", Budget: &reinv1.Budget{MaxSteps: 3, MaxTokens: 1000}}
	wrap := raised(4, 0, 0, 0)
	wrap.GetBudgetRaised().AddTokens = math.MaxUint64 - 10
	if got := mustApply(t, huge, wrap).Limits().Tokens; got != math.MaxUint64 {
		t.Errorf("tokens limit %d after a raise past the largest, want it held at the largest", got)
	}
	s := mustApply(t, stateAt(t, running), budgetReached(2))
	if _, err := Apply(s, statusChanged(3, running, needsBudget)); !errors.Is(err, ErrIllegalTransition) {
		t.Errorf("needs_budget after a budget_reached that ends the run: %v, want ErrIllegalTransition", err)
	}
}

func revised(seq uint64, superseded, id, tool string) *reinv1.Event {
	e := envelope(seq)
	e.Actor = "principal:bob"
	e.Payload = &reinv1.Event_ProposalRevised{ProposalRevised: &reinv1.ProposalRevised{
		SupersededProposalId: superseded,
		Proposal:             &reinv1.Proposal{ProposalId: id, Tool: tool, Hash: "h2", RunVersion: seq - 1, RevisedBy: "bob"},
		Changes:              []*reinv1.ArgumentChange{{Path: "/amount", Before: structpb.NewNumberValue(120), After: structpb.NewNumberValue(100)}},
	}}
	return e
}

// A revision replaces the pending proposal; the superseded one can no
// longer be decided on, and a revision of another proposal, of another
// tool or with the same ID is refused.
func TestProposalRevised(t *testing.T) {
	s := mustApply(t, stateAt(t, needsApproval), revised(4, "p-1", "p-2", "write_file"))
	if s.Pending.GetProposal().GetProposalId() != "p-2" || s.Status != needsApproval {
		t.Fatalf("pending %v, status %s; want p-2 waiting for approval", s.Pending, StatusName(s.Status))
	}
	decided := envelope(5)
	decided.Payload = &reinv1.Event_ApprovalDecided{ApprovalDecided: &reinv1.ApprovalDecided{ProposalId: "p-1", Approved: true}}
	if _, err := Apply(s, decided); !errors.Is(err, ErrIllegalTransition) {
		t.Errorf("approving the superseded proposal: %v, want ErrIllegalTransition", err)
	}
	otherCall := revised(5, "p-2", "p-3", "write_file")
	otherCall.GetProposalRevised().GetProposal().CallId = "c-9"
	notTheActor := revised(5, "p-2", "p-3", "write_file")
	notTheActor.GetProposalRevised().GetProposal().RevisedBy = "carol"
	for name, ev := range map[string]*reinv1.Event{
		"another proposal":         revised(5, "p-1", "p-3", "write_file"),
		"another tool":             revised(5, "p-2", "p-3", "delete_file"),
		"same id":                  revised(5, "p-2", "p-2", "write_file"),
		"another call":             otherCall,
		"revised_by not its actor": notTheActor,
	} {
		if _, err := Apply(s, ev); err == nil {
			t.Errorf("%s: applied, want a refusal", name)
		}
	}
	if _, err := Apply(stateAt(t, running), revised(2, "p-1", "p-2", "write_file")); !errors.Is(err, ErrIllegalTransition) {
		t.Errorf("revision on a running run: %v, want ErrIllegalTransition", err)
	}
}

// A parent paused for a child (budget_reached naming it) lends a raise on
// to that child: the child's loan and the parent's limits grow alike, so
// what the parent has left is unchanged. A raise lent to another run, and
// a pause naming a run that is not an open child, are refused.
func TestBudgetRaiseLentToAChild(t *testing.T) {
	s := mustApply(t, State{}, runStarted(1), modelRequested(2), modelReturned(3, 10, 5), delegationStarted(4, "run-a", "run-b"))
	s.Contract = &reinv1.TaskContract{Goal: "g", Budget: &reinv1.Budget{MaxSteps: 20}}
	paused := func(seq uint64, child string) *reinv1.Event {
		e := budgetPaused(seq)
		e.GetBudgetReached().ChildRunId = child
		return e
	}
	if _, err := Apply(s, paused(5, "run-z")); !errors.Is(err, ErrInvalidEvent) {
		t.Errorf("a pause for a run that is not an open child: %v, want ErrInvalidEvent", err)
	}
	s = mustApply(t, s, paused(5, "run-b"), statusChanged(6, running, needsBudget))
	if s.Pending.GetBudget().GetChildRunId() != "run-b" {
		t.Fatalf("pending %v, want the pause for run-b", s.Pending)
	}
	leftBefore := s.Limits().Sub(s.Committed())
	other := raised(7, 3, 0, 0)
	other.GetBudgetRaised().ChildRunId = "run-a"
	if _, err := Apply(s, other); !errors.Is(err, ErrIllegalTransition) {
		t.Errorf("a raise lent to another child: %v, want ErrIllegalTransition", err)
	}
	lend := raised(7, 3, 0, 0)
	lend.GetBudgetRaised().ChildRunId = "run-b"
	s = mustApply(t, s, lend, statusChanged(8, needsBudget, running))
	if s.Children[1].Lent.Steps != 8 || s.Children[0].Lent.Steps != 5 || s.Lent.Steps != 13 || s.Limits().Steps != 23 {
		t.Errorf("loans %+v, lent %+v, limits %+v; want run-b lent 3 more steps, and the limits 3 more", s.Children, s.Lent, s.Limits())
	}
	if left := s.Limits().Sub(s.Committed()); left.Steps != leftBefore.Steps {
		t.Errorf("the parent has %d steps left, %d before: a raise lent on leaves it as it was", left.Steps, leftBefore.Steps)
	}
	if !s.Waiting() || s.Status != running {
		t.Errorf("after the raise: %s, waiting %v; want running, waiting for its children", StatusName(s.Status), s.Waiting())
	}
}

// A run pauses on its budget with a model call in flight only when the
// run's deadline cut the call; the call stays in flight through the pause
// and its raise, to be sent again marked resumed. Any other pause with a
// call in flight is refused.
func TestDeadlinePauseWithACallInFlight(t *testing.T) {
	cut := budgetPaused(3)
	cut.GetBudgetReached().Limit = "deadline"
	s := mustApply(t, mustApply(t, State{}, runStarted(1)), modelRequested(2), cut, statusChanged(4, running, needsBudget))
	if !s.ModelInFlight || s.Status != needsBudget {
		t.Fatalf("in flight %v, status %s; want the cut call in flight, paused", s.ModelInFlight, StatusName(s.Status))
	}
	resumed := modelRequested(7)
	resumed.GetModelRequested().Resumed = true
	s = mustApply(t, s, raised(5, 0, 0, time.Hour), statusChanged(6, needsBudget, running), resumed)
	if !s.ModelInFlight || s.Steps != 1 {
		t.Fatalf("after the raise and the resent call: in flight %v, steps %d; want 1 step in flight", s.ModelInFlight, s.Steps)
	}

	other := mustApply(t, mustApply(t, State{}, runStarted(1)), modelRequested(2), budgetPaused(3))
	if _, err := Apply(other, statusChanged(4, running, needsBudget)); !errors.Is(err, ErrIllegalTransition) {
		t.Fatalf("a pause on max_steps with a call in flight: %v, want ErrIllegalTransition", err)
	}
}
