package runstate

import (
	"fmt"
	"math"
	"slices"
	"time"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// applySteered folds a person's message to a running run: it waits for
// the next model_requested, and its request ID is kept so that a second
// SteerRun with it records nothing.
func applySteered(s State, ev *reinv1.Event, rs *reinv1.RunSteered) (State, error) {
	if err := need(s, ev, reinv1.RunStatus_RUN_STATUS_RUNNING); err != nil {
		return s, err
	}
	id := rs.GetRequestId()
	switch {
	case rs.GetText() == "":
		return s, fmt.Errorf("%w: run_steered without a message", ErrInvalidEvent)
	case id == "":
		return s, fmt.Errorf("%w: run_steered without a request id", ErrInvalidEvent)
	case slices.Contains(s.Steers, id):
		return s, fmt.Errorf("%w: run_steered with request id %q, which run %q already recorded", ErrIllegalTransition, id, s.RunID)
	}
	s.Steers = append(slices.Clip(s.Steers), id)
	s.SteersWaiting++
	return s, nil
}

// HasSteer reports whether the run recorded a message with request ID id.
func (s State) HasSteer(id string) bool { return slices.Contains(s.Steers, id) }

// applyBudgetRaised folds a person's raise of a run paused on its budget:
// the additions count towards Limits, and a deadline moved is the run's.
// A run paused for a child lends the raise on to that child: its loan
// grows by it, so what the run has left is unchanged.
func applyBudgetRaised(s State, ev *reinv1.Event, br *reinv1.BudgetRaised) (State, error) {
	if err := need(s, ev, reinv1.RunStatus_RUN_STATUS_NEEDS_BUDGET); err != nil {
		return s, err
	}
	add := Spend{Steps: br.GetAddSteps(), Tokens: br.GetAddTokens(), CostUSD: br.GetAddCostUsd(), ToolCalls: br.GetAddToolCalls()}
	if add.IsZero() && br.GetExtendDeadline().AsDuration() <= 0 {
		return s, fmt.Errorf("%w: budget_raised that adds nothing", ErrInvalidEvent)
	}
	if add.CostUSD < 0 || math.IsNaN(add.CostUSD) || math.IsInf(add.CostUSD, 0) {
		return s, fmt.Errorf("%w: budget_raised with a dollar amount that is not a finite, non-negative number", ErrInvalidEvent)
	}
	ext := br.GetExtendDeadline()
	if ext != nil && (ext.CheckValid() != nil || ext.AsDuration() < 0 || ext.AsDuration() > maxExtend) {
		return s, fmt.Errorf("%w: budget_raised extends the deadline by %v; at most %v", ErrInvalidEvent, ext.AsDuration(), maxExtend)
	}
	if id := br.GetChildRunId(); id != "" || s.Pending.GetBudget().GetChildRunId() != "" {
		// The raise is lent on to the child the run paused for.
		i := slices.IndexFunc(s.Children, func(c ChildLoan) bool { return c.RunID == id })
		if id != s.Pending.GetBudget().GetChildRunId() || i < 0 {
			return s, fmt.Errorf("%w: budget_raised lent to %q, but run %q paused for child %q", ErrIllegalTransition, id, s.RunID, s.Pending.GetBudget().GetChildRunId())
		}
		s.Children = slices.Clone(s.Children)
		s.Children[i].Lent = s.Children[i].Lent.Add(add)
		s.Lent = s.Lent.Add(add)
	}
	s.Raised = addSaturating(s.Raised, add)
	// The deadline moves by the extension, from wherever the run's is: a
	// fork carries the raise onto its own deadline. (budget_raised.deadline
	// says where it went, for a person.)
	if d := ext.AsDuration(); d > 0 && !s.Deadline.IsZero() {
		s.Deadline = s.Deadline.Add(d)
	}
	return s, nil
}

// maxExtend bounds one raise's extension of a deadline.
const maxExtend = 366 * 24 * time.Hour

// addSaturating is a + b, each count held at its type's largest value
// rather than wrapping past it.
func addSaturating(a, b Spend) Spend {
	sum := Spend{Steps: a.Steps + b.Steps, Tokens: a.Tokens + b.Tokens, CostUSD: a.CostUSD + b.CostUSD, ToolCalls: a.ToolCalls + b.ToolCalls}
	if sum.Steps < a.Steps {
		sum.Steps = math.MaxUint32
	}
	if sum.Tokens < a.Tokens {
		sum.Tokens = math.MaxUint64
	}
	if sum.ToolCalls < a.ToolCalls {
		sum.ToolCalls = math.MaxUint32
	}
	return sum
}

// Limits is the run's budget: the contract's limits plus what people
// raised them by. A limit the contract leaves at 0 (none) stays 0.
func (s State) Limits() Spend {
	l := BudgetSpend(s.Contract.GetBudget())
	r := addSaturating(l, s.Raised)
	// A limit the contract leaves unset stays unset.
	if l.Steps > 0 {
		l.Steps = r.Steps
	}
	if l.Tokens > 0 {
		l.Tokens = r.Tokens
	}
	if l.CostUSD > 0 {
		l.CostUSD = r.CostUSD
	}
	if l.ToolCalls > 0 {
		l.ToolCalls = r.ToolCalls
	}
	return l
}

// applyProposalRevised folds a person's revision of the pending proposal:
// the revised one is pending in its place, and the superseded one can no
// longer be decided on.
func applyProposalRevised(s State, ev *reinv1.Event, pr *reinv1.ProposalRevised) (State, error) {
	if err := need(s, ev, reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL); err != nil {
		return s, err
	}
	old, next := s.Pending.GetProposal(), pr.GetProposal()
	switch {
	case old == nil || pr.GetSupersededProposalId() != old.GetProposalId():
		return s, fmt.Errorf("%w: proposal_revised supersedes %q, but the pending proposal is %q",
			ErrIllegalTransition, pr.GetSupersededProposalId(), old.GetProposalId())
	case s.ApprovedWrite != nil:
		return s, fmt.Errorf("%w: proposal_revised while the approved write of proposal %q is in flight", ErrIllegalTransition, s.ApprovedWrite.GetProposalId())
	case next.GetProposalId() == "" || next.GetProposalId() == old.GetProposalId():
		return s, fmt.Errorf("%w: proposal_revised needs a revised proposal with a new id", ErrInvalidEvent)
	case next.GetTool() != old.GetTool() || next.GetCallId() != old.GetCallId():
		return s, fmt.Errorf("%w: proposal_revised changes the call (tool %q, call %q) the proposal answers (tool %q, call %q)",
			ErrInvalidEvent, next.GetTool(), next.GetCallId(), old.GetTool(), old.GetCallId())
	case next.GetRevisedBy() == "" && ev.GetActor() == "harness":
		// Previewed again by the harness on its tool's new definition.
		if next.GetToolDigest() == "" {
			return s, fmt.Errorf("%w: proposal_revised by the harness names no tool definition it was previewed on", ErrInvalidEvent)
		}
	case "principal:"+next.GetRevisedBy() != ev.GetActor():
		return s, fmt.Errorf("%w: proposal_revised by %q says it was revised by %q", ErrInvalidEvent, ev.GetActor(), next.GetRevisedBy())
	}
	s.Pending = &reinv1.PendingAction{Action: &reinv1.PendingAction_Proposal{Proposal: next}}
	return s, nil
}
