package engine

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
)

// Admit starts a queued run (docs/design.md §17): run_admitted, with the
// time it waited and its deadline from now (its contract's timeout, unless
// that counts from the submission), and the status change to running, in
// one commit; then the run is driven. by names the server that admitted
// it. A run that is no longer queued is ErrNotWaiting, and nothing is
// recorded: of two servers admitting one run, one wins.
func (e *Engine) Admit(ctx context.Context, runID, by string) (runstate.State, error) {
	st, err := e.cfg.Store.Load(ctx, runID)
	if err != nil {
		return st, err
	}
	if st.Status != reinv1.RunStatus_RUN_STATUS_QUEUED {
		return st, fmt.Errorf("%w: run %s is %s, not queued", ErrNotWaiting, runID, runstate.StatusName(st.Status))
	}
	now := e.cfg.Clock()
	ra := &reinv1.RunAdmitted{Waited: durationpb.New(max(now.Sub(st.CreatedAt), 0)), By: by}
	b := st.Contract.GetBudget()
	if t := b.GetTimeout(); t != nil && !b.GetTimeoutFromSubmission() {
		ra.Deadline = timestamppb.New(now.Add(t.AsDuration()))
	}
	next, err := e.commit(ctx, st, "harness", []*reinv1.Event{
		{Payload: &reinv1.Event_RunAdmitted{RunAdmitted: ra}},
		{Payload: &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{
			From: reinv1.RunStatus_RUN_STATUS_QUEUED, To: reinv1.RunStatus_RUN_STATUS_RUNNING, Reason: "admitted",
		}}},
	})
	if err != nil {
		return st, err
	}
	e.schedule(runID)
	return next, nil
}

// ExpireQueued ends a queued run whose deadline (counted from its
// submission) passed while it waited: budget_exhausted, as a running run
// whose deadline passes.
func (e *Engine) ExpireQueued(ctx context.Context, runID string) (runstate.State, error) {
	st, err := e.cfg.Store.Load(ctx, runID)
	if err != nil {
		return st, err
	}
	if st.Status != reinv1.RunStatus_RUN_STATUS_QUEUED || st.Deadline.IsZero() || e.cfg.Clock().Before(st.Deadline) {
		return st, fmt.Errorf("%w: run %s is not a queued run past its deadline", ErrNotWaiting, runID)
	}
	return e.commit(ctx, st, "harness", []*reinv1.Event{
		{Payload: &reinv1.Event_BudgetReached{BudgetReached: &reinv1.BudgetReached{Limit: "deadline",
			Detail: "the run's deadline passed while it waited in the queue"}}},
		{Payload: &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{
			From: reinv1.RunStatus_RUN_STATUS_QUEUED, To: reinv1.RunStatus_RUN_STATUS_BUDGET_EXHAUSTED, Reason: "deadline",
		}}},
	})
}
