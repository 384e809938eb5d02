package engine

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/step"
)

// RaiseBudget raises the budget of a run paused on it (needs_budget) by
// what req adds, records it (budget_raised, by principal) and carries the
// run on. A run not paused on its budget, a pause that expired, and a
// raise that leaves any limit of the run reached are refused
// (ErrNotWaiting) and record nothing; a raise of nothing is a FieldError.
func (e *Engine) RaiseBudget(ctx context.Context, req *reinv1.RaiseBudgetRequest, principal string) (runstate.State, error) {
	return e.againIfFenced(func() (runstate.State, error) { return e.raiseBudget(ctx, req, principal) })
}

func (e *Engine) raiseBudget(ctx context.Context, req *reinv1.RaiseBudgetRequest, principal string) (runstate.State, error) {
	add := runstate.Spend{Steps: req.GetAddSteps(), Tokens: req.GetAddTokens(), CostUSD: req.GetAddCostUsd(), ToolCalls: req.GetAddToolCalls()}
	extend := req.GetExtendDeadline().AsDuration()
	if add.IsZero() && extend <= 0 {
		return runstate.State{}, &step.FieldError{Field: "add_steps", Description: "a raise adds something: set at least one of add_steps, add_tokens, add_tool_calls, add_cost_usd, extend_deadline"}
	}
	st, err := e.cfg.Store.Load(ctx, req.GetRunId())
	if err != nil {
		return st, err
	}
	pause := st.Pending.GetBudget()
	if st.Status != reinv1.RunStatus_RUN_STATUS_NEEDS_BUDGET || pause == nil {
		return st, fmt.Errorf("%w: run %s is %s; only a run paused on its budget (needs_budget, which a contract with budget.on_exhausted BUDGET_ACTION_PAUSE reaches) takes a raise",
			ErrNotWaiting, st.RunID, runstate.StatusName(st.Status))
	}
	now := e.cfg.Clock()
	if !now.Before(pause.GetExpiresAt().AsTime()) {
		return st, fmt.Errorf("%w: run %s's pause for a raise ended at %s; it ends expired", ErrNotWaiting, st.RunID, pause.GetExpiresAt().AsTime().Format(time.RFC3339))
	}
	after := st
	after.Raised = st.Raised.Add(add)
	if !st.Deadline.IsZero() && extend > 0 {
		after.Deadline = st.Deadline.Add(extend)
	}
	if limit, detail := step.LimitReached(after, now); limit != "" {
		return st, fmt.Errorf("%w: after this raise run %s would still be at a limit (%s): %s; %s",
			ErrNotWaiting, st.RunID, limit, detail, raiseHint(limit))
	}
	br := &reinv1.BudgetRaised{
		AddSteps: add.Steps, AddTokens: add.Tokens, AddCostUsd: add.CostUSD, AddToolCalls: add.ToolCalls,
		ExtendDeadline: req.GetExtendDeadline(), Budget: raisedBudget(after), Reason: req.GetReason(),
	}
	if !after.Deadline.IsZero() {
		br.Deadline = timestamppb.New(after.Deadline)
	}
	next, err := e.commit(ctx, st, "principal:"+principal, []*reinv1.Event{
		{Payload: &reinv1.Event_BudgetRaised{BudgetRaised: br}},
		{Payload: &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{
			From: st.Status, To: reinv1.RunStatus_RUN_STATUS_RUNNING, Reason: "budget_raised",
		}}},
	})
	if err != nil {
		return st, err
	}
	e.disarm(st.RunID)
	e.schedule(st.RunID)
	return next, nil
}

// raisedBudget is the budget of a run after a raise: its contract's, with
// the limits it has now.
func raisedBudget(st runstate.State) *reinv1.Budget {
	b := proto.Clone(st.Contract.GetBudget()).(*reinv1.Budget)
	if b == nil {
		b = &reinv1.Budget{}
	}
	lim := st.Limits()
	b.MaxSteps, b.MaxTokens, b.MaxCostUsd, b.MaxToolCalls = lim.Steps, lim.Tokens, lim.CostUSD, lim.ToolCalls
	return b
}

// raiseHint says which addition lifts a limit.
func raiseHint(limit string) string {
	switch limit {
	case "max_steps":
		return "add steps (rein budget --add-steps, add_steps)"
	case "max_tokens":
		return "add tokens (rein budget --add-tokens, add_tokens)"
	case "max_cost_usd":
		return "add money (rein budget --add-usd, add_cost_usd)"
	case "max_tool_calls":
		return "add tool calls (rein budget --add-tool-calls, add_tool_calls)"
	case "deadline":
		return "move the deadline past now (rein budget --extend-deadline, extend_deadline)"
	}
	return "raise it further"
}
