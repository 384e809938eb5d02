package engine

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/step"
	"github.com/reinhq/rein/internal/taskcontract"
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
	r := raise{
		add:    runstate.Spend{Steps: req.GetAddSteps(), Tokens: req.GetAddTokens(), CostUSD: req.GetAddCostUsd(), ToolCalls: req.GetAddToolCalls()},
		extend: req.GetExtendDeadline().AsDuration(), actor: "principal:" + principal, reason: req.GetReason(),
	}
	if r.add.IsZero() && r.extend <= 0 {
		return runstate.State{}, &taskcontract.FieldError{Field: "add_steps", Description: "a raise adds something: set at least one of add_steps, add_tokens, add_tool_calls, add_cost_usd, extend_deadline"}
	}
	st, err := e.cfg.Store.Load(ctx, req.GetRunId())
	if err != nil {
		return st, err
	}
	if by := st.DelegatedBy; by != nil && st.Status == reinv1.RunStatus_RUN_STATUS_NEEDS_BUDGET {
		return st, fmt.Errorf("%w: run %s was delegated to by run %s; a delegation tree's budget is its root's: raise run %s (rein budget %s …), which lends the raise on",
			ErrNotWaiting, st.RunID, by.GetParentRunId(), by.GetRootRunId(), by.GetRootRunId())
	}
	// The raise must lift the limit of every run it reaches: this one, and
	// down the tree the child each paused for.
	now := e.cfg.Clock()
	for cur := st; ; {
		pause := cur.Pending.GetBudget()
		if cur.Status != reinv1.RunStatus_RUN_STATUS_NEEDS_BUDGET || pause == nil {
			return st, fmt.Errorf("%w: run %s is %s; only a run paused on its budget (needs_budget, which a contract with budget.on_exhausted BUDGET_ACTION_PAUSE reaches) takes a raise",
				ErrNotWaiting, cur.RunID, runstate.StatusName(cur.Status))
		}
		if !now.Before(pause.GetExpiresAt().AsTime()) {
			return st, fmt.Errorf("%w: run %s's pause for a raise ended at %s; it ends expired", ErrNotWaiting, cur.RunID, pause.GetExpiresAt().AsTime().Format(time.RFC3339))
		}
		if limit, detail := step.LimitReached(r.applied(cur), now); limit != "" {
			return st, fmt.Errorf("%w: after this raise run %s would still be at a limit (%s): %s; %s",
				ErrNotWaiting, cur.RunID, limit, detail, raiseHint(limit))
		}
		if limit, detail := roomForNextCall(r.applied(cur), pause); limit != "" {
			return st, fmt.Errorf("%w: after this raise run %s could still not pay for its next model call (%s): %s; %s",
				ErrNotWaiting, cur.RunID, limit, detail, raiseHint(limit))
		}
		if pause.GetChildRunId() == "" {
			break
		}
		if cur, err = e.cfg.Store.Load(ctx, pause.GetChildRunId()); err != nil {
			return st, err
		}
	}
	return e.lend(ctx, st, r)
}

// roomForNextCall names the limit that leaves st, raised, too little for
// the model call it paused before (pause's next_call_*), or "".
func roomForNextCall(st runstate.State, pause *reinv1.BudgetPause) (limit, detail string) {
	lim, used := st.Limits(), st.Committed()
	if need := pause.GetNextCallTokens(); need > 0 && lim.Tokens > 0 && lim.Tokens < used.Tokens+need {
		return "max_tokens", fmt.Sprintf("the next model call needs about %d tokens and %d of %d would be left", need, lim.Tokens-min(lim.Tokens, used.Tokens), lim.Tokens)
	}
	if need := pause.GetNextCallCostUsd(); need > 0 && lim.CostUSD > 0 && lim.CostUSD-used.CostUSD < need {
		return "max_cost_usd", fmt.Sprintf("the next model call costs about $%.6f and $%.6f of $%.6f would be left", need, max(lim.CostUSD-used.CostUSD, 0), lim.CostUSD)
	}
	return "", ""
}

// raise is what a raise adds, by whom and why.
type raise struct {
	add           runstate.Spend
	extend        time.Duration
	actor, reason string
}

// applied is st with r's additions: its limits, and its deadline moved.
func (r raise) applied(st runstate.State) runstate.State {
	st.Raised = st.Raised.Add(r.add)
	if !st.Deadline.IsZero() && r.extend > 0 {
		st.Deadline = st.Deadline.Add(r.extend)
	}
	return st
}

// lend records raise r of st, a run paused on its budget (budget_raised),
// and carries it on; a run paused for a child lends the raise on to it
// (its loan grows), and the child is raised the same way, down the tree.
// The parent's raise is stored first: a crash before its child's leaves a
// loan the child was not given, which PausedChild gives it when the parent
// is driven again.
func (e *Engine) lend(ctx context.Context, st runstate.State, r raise) (runstate.State, error) {
	after := r.applied(st)
	child := st.Pending.GetBudget().GetChildRunId()
	br := &reinv1.BudgetRaised{
		AddSteps: r.add.Steps, AddTokens: r.add.Tokens, AddCostUsd: r.add.CostUSD, AddToolCalls: r.add.ToolCalls,
		Budget: raisedBudget(after), Reason: r.reason, ChildRunId: child,
	}
	if r.extend > 0 {
		br.ExtendDeadline = durationpb.New(r.extend)
	}
	if !after.Deadline.IsZero() {
		br.Deadline = timestamppb.New(after.Deadline)
	}
	next, err := e.commit(ctx, st, r.actor, []*reinv1.Event{
		{Payload: &reinv1.Event_BudgetRaised{BudgetRaised: br}},
		{Payload: &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{
			From: st.Status, To: reinv1.RunStatus_RUN_STATUS_RUNNING, Reason: "budget_raised",
		}}},
	})
	if err != nil {
		return st, err
	}
	e.disarm(st.RunID)
	// Driven again whatever becomes of the child's half: the parent's
	// driver gives the child what it is owed (pausedChild) if it failed.
	defer e.schedule(st.RunID)
	if child != "" {
		cst, err := e.cfg.Store.Load(ctx, child)
		if err == nil && cst.Status == reinv1.RunStatus_RUN_STATUS_NEEDS_BUDGET {
			_, err = e.lend(ctx, cst, raise{add: r.add, extend: r.extend, actor: r.actor, reason: "lent by run " + st.RunID + ": " + r.reason})
		}
		if err != nil {
			e.cfg.Logger.Warn("a raise lent to a child was not given to it yet; the parent gives it when it is driven", "run_id", st.RunID, "child_run_id", child, "error", err)
		}
	}
	return next, nil
}

// resumeForChild carries on a run paused for a child whose pause ended
// without a raise (the child was cancelled, or its pause expired): it
// waits for its children again, and the child's end comes back to it as
// any child's does. Any other run is returned as it is.
func (e *Engine) resumeForChild(ctx context.Context, st runstate.State) (runstate.State, error) {
	id := st.Pending.GetBudget().GetChildRunId()
	if st.Status != reinv1.RunStatus_RUN_STATUS_NEEDS_BUDGET || id == "" {
		return st, nil
	}
	child, err := e.cfg.Store.Load(ctx, id)
	if err != nil || !runstate.Terminal(child.Status) {
		return st, err
	}
	next, err := e.commit(ctx, st, "harness", []*reinv1.Event{{Payload: &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{
		From: st.Status, To: reinv1.RunStatus_RUN_STATUS_RUNNING, Reason: "child_ended",
	}}}})
	if err != nil {
		return st, err
	}
	e.disarm(st.RunID)
	return next, nil
}

// pausedChild is an open child of parent paused on the budget lent to it
// (step.Host): a loan parent raised that the child was not given (a crash
// between the two commits of a raise) is given to it first, and the child
// carried on instead.
func (e *Engine) pausedChild(ctx context.Context, parent runstate.State) (runstate.State, bool, error) {
	for _, c := range parent.Children {
		child, err := e.cfg.Store.Load(ctx, c.RunID)
		if err != nil {
			return child, false, err
		}
		if child.Status != reinv1.RunStatus_RUN_STATUS_NEEDS_BUDGET {
			continue
		}
		if owed := undelivered(c.Lent, child.Limits()); !owed.IsZero() {
			_, err := e.lend(ctx, child, raise{add: owed, actor: "harness", reason: "lent by run " + parent.RunID + " before a restart"})
			return child, false, err
		}
		return child, true, nil
	}
	return runstate.State{}, false, nil
}

// undelivered is what a parent lent a child beyond the child's limits, in
// each limit the child has.
func undelivered(lent, limits runstate.Spend) runstate.Spend {
	var d runstate.Spend
	if limits.Steps > 0 && lent.Steps > limits.Steps {
		d.Steps = lent.Steps - limits.Steps
	}
	if limits.Tokens > 0 && lent.Tokens > limits.Tokens {
		d.Tokens = lent.Tokens - limits.Tokens
	}
	if limits.CostUSD > 0 && lent.CostUSD > limits.CostUSD+1e-9 {
		d.CostUSD = lent.CostUSD - limits.CostUSD
	}
	if limits.ToolCalls > 0 && lent.ToolCalls > limits.ToolCalls {
		d.ToolCalls = lent.ToolCalls - limits.ToolCalls
	}
	return d
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

// GiveLentRaise records on runID, a run delegated to and paused on its
// budget, a raise its parent lent it, as the parent's raise does after its
// own record (lend): budget_raised by actor, with reason, and the run
// carried on. Replay gives a recorded child its lent raise this way; a
// person raises a tree at its root (RaiseBudget).
func (e *Engine) GiveLentRaise(ctx context.Context, runID string, req *reinv1.RaiseBudgetRequest, actor string) (runstate.State, error) {
	st, err := e.cfg.Store.Load(ctx, runID)
	if err != nil {
		return st, err
	}
	if st.DelegatedBy == nil || st.Status != reinv1.RunStatus_RUN_STATUS_NEEDS_BUDGET {
		return st, fmt.Errorf("%w: run %s is %s and not a run delegated to: only a child paused on its budget is given a raise its parent lent",
			ErrNotWaiting, runID, runstate.StatusName(st.Status))
	}
	return e.lend(ctx, st, raise{
		add:    runstate.Spend{Steps: req.GetAddSteps(), Tokens: req.GetAddTokens(), CostUSD: req.GetAddCostUsd(), ToolCalls: req.GetAddToolCalls()},
		extend: req.GetExtendDeadline().AsDuration(), actor: actor, reason: req.GetReason(),
	})
}
