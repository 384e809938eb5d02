package engine

import (
	"context"
	"time"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
)

// A paused run has deadlines of its own: its pending proposal's expires_at
// and the run's deadline, or, paused on its budget, the pause's expires_at
// alone. The engine arms a timer for the nearer one when the run pauses
// (and, through Arm, for every paused run at start-up), so they fire on
// time without any call: the proposal → expired, the deadline →
// budget_exhausted, the budget pause → expired.

// Arm sets the paused run's timer, if it has a deadline to keep.
func (e *Engine) Arm(st runstate.State) {
	if !runstate.Paused(st.Status) || e.cfg.NoTimers {
		return
	}
	at, _ := st.PauseEnds()
	if at.IsZero() {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	if t := e.timers[st.RunID]; t != nil {
		t.Stop()
	}
	runID := st.RunID
	e.timers[runID] = e.later(max(at.Sub(e.cfg.Clock()), 0), func() { e.fire(runID) })
}

// later runs fn after d on a goroutine of the engine's wait group, unless
// the engine is closed by then: Close and Shutdown wait for it as for a
// driver, so that nothing fn does (a commit, a read) reaches a store that
// was closed after them. The caller may stop the timer it returns.
func (e *Engine) later(d time.Duration, fn func()) *time.Timer {
	return time.AfterFunc(d, func() {
		e.mu.Lock()
		if e.closed {
			e.mu.Unlock()
			return
		}
		e.wg.Add(1)
		e.mu.Unlock()
		defer e.wg.Done()
		fn()
	})
}

// disarm stops a run's timer: it is no longer paused.
func (e *Engine) disarm(runID string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if t := e.timers[runID]; t != nil {
		t.Stop()
		delete(e.timers, runID)
	}
}

// fire ends a paused run whose proposal expired or whose deadline passed,
// and re-arms it if neither is due yet (its clock may lag the timer's). It
// runs in the engine's wait group (later).
func (e *Engine) fire(runID string) {
	e.mu.Lock()
	delete(e.timers, runID)
	e.mu.Unlock()
	e.Expire(e.base, runID)
}

// Expire ends a paused run whose proposal expired or whose deadline passed
// by the engine's clock, as its timer does; a run with nothing due is armed
// again.
func (e *Engine) Expire(ctx context.Context, runID string) {
	// A decision that lands first makes the append conflict: look again.
	err := store.RetryOnConflict(ctx, runID, "expire", func() error {
		st, err := e.cfg.Store.Load(ctx, runID)
		if err != nil || !runstate.Paused(st.Status) {
			return nil
		}
		now := e.cfg.Clock()
		var evs []*reinv1.Event
		switch p, b := st.Pending.GetProposal(), st.Pending.GetBudget(); {
		case b != nil && !now.Before(b.GetExpiresAt().AsTime()):
			evs = []*reinv1.Event{{Payload: &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{
				From: st.Status, To: reinv1.RunStatus_RUN_STATUS_EXPIRED, Reason: "budget_not_raised",
			}}}}
		case b != nil:
			e.Arm(st)
			return nil
		case !st.Deadline.IsZero() && !now.Before(st.Deadline):
			evs = []*reinv1.Event{
				{Payload: &reinv1.Event_BudgetReached{BudgetReached: &reinv1.BudgetReached{
					Limit: "deadline", Detail: "the run's deadline " + st.Deadline.Format(time.RFC3339) + " passed while it waited for a person",
				}}},
				{Payload: &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{
					From: st.Status, To: reinv1.RunStatus_RUN_STATUS_BUDGET_EXHAUSTED, Reason: "deadline",
				}}},
			}
		case p != nil && !now.Before(p.GetExpiresAt().AsTime()):
			evs = []*reinv1.Event{{Payload: &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{
				From: st.Status, To: reinv1.RunStatus_RUN_STATUS_EXPIRED, Reason: "proposal_expired",
			}}}}
		default:
			e.Arm(st)
			return nil
		}
		_, err = e.commit(ctx, st, "harness", evs)
		return err
	})
	if err != nil {
		e.cfg.Logger.Error("expire paused run", "run_id", runID, "error", err)
	}
}

// stopTimers stops every timer (Close, Shutdown).
func (e *Engine) stopTimers() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for id, t := range e.timers {
		t.Stop()
		delete(e.timers, id)
	}
}
