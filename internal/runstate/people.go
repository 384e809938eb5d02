package runstate

import (
	"fmt"
	"slices"

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
	if add.CostUSD < 0 {
		return s, fmt.Errorf("%w: budget_raised with a negative amount", ErrInvalidEvent)
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
	s.Raised = s.Raised.Add(add)
	if d := br.GetDeadline(); d != nil {
		s.Deadline = d.AsTime()
	}
	return s, nil
}

// Limits is the run's budget: the contract's limits plus what people
// raised them by. A limit the contract leaves at 0 (none) stays 0.
func (s State) Limits() Spend {
	l := BudgetSpend(s.Contract.GetBudget())
	if l.Steps > 0 {
		l.Steps += s.Raised.Steps
	}
	if l.Tokens > 0 {
		l.Tokens += s.Raised.Tokens
	}
	if l.CostUSD > 0 {
		l.CostUSD += s.Raised.CostUSD
	}
	if l.ToolCalls > 0 {
		l.ToolCalls += s.Raised.ToolCalls
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
	case next.GetTool() != old.GetTool():
		return s, fmt.Errorf("%w: proposal_revised changes the tool from %q to %q", ErrInvalidEvent, old.GetTool(), next.GetTool())
	}
	s.Pending = &reinv1.PendingAction{Action: &reinv1.PendingAction_Proposal{Proposal: next}}
	return s, nil
}
