package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/step"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/taskcontract"
	"github.com/reinhq/rein/internal/tools"
)

// eventPage is how many events the engine reads at once from a run's log.
const eventPage = 4096

// drive is a driver's work on a run: it loads the run, holds its lease, and
// takes its steps (a step.Stepper) until the run leaves running or ctx is
// cancelled. A driver that takes the lease (it held none) loads the run
// again once it holds it: the owner it took the run from may have moved
// it, or ended it, between the first load and the lease, and only from the
// lease on is that owner fenced. The run as it is then is what the driver
// carries on; one that ended is dropped, one that paused is left paused
// (docs/design.md §5).
func (e *Engine) drive(ctx context.Context, runID string) error {
	if e.isHalted(runID) {
		return nil
	}
	st, err := e.driven(ctx, runID)
	if err != nil || st.Status != reinv1.RunStatus_RUN_STATUS_RUNNING {
		return err
	}
	// The driver holds the run's lease before it does anything, so an owner
	// it takes the run over from is fenced at once. A run another server
	// drives (a store shared by servers) is left to it.
	_, held := e.leases.epoch(runID)
	e.mu.Lock()
	full := e.cfg.MaxDriven > 0 && len(e.active) > e.cfg.MaxDriven // this driver is one of them
	e.mu.Unlock()
	if !held && full {
		e.cfg.Logger.Debug("driving as many runs as --max-runs allows: the run is left to another server", "run_id", runID)
		return nil
	}
	epoch, err := e.lease(ctx, runID)
	if err != nil {
		if errors.Is(err, store.ErrOwned) {
			return nil
		}
		return err
	}
	if !held {
		if st, err = e.driven(ctx, runID); err != nil || st.Status != reinv1.RunStatus_RUN_STATUS_RUNNING {
			if err == nil && runstate.Terminal(st.Status) {
				e.leases.release(runID)
			}
			return err
		}
	}
	taken := !held && st.Version > 1
	if taken {
		e.cfg.Logger.Info("resumed run", "run_id", st.RunID, "trace_id", st.TraceID, "tenant", st.Tenant, "principal", st.Principal, "version", st.Version, "epoch", epoch)
		if e.cfg.TookOver != nil {
			e.cfg.TookOver(st, epoch)
		}
	}
	s, err := step.New(ctx, (*stepHost)(e), &e.steps, st)
	if err != nil {
		return err
	}
	if taken {
		// Recorded with the driver's first commit: who carries the run on
		// from here, and the trace the work goes on in.
		s.Carry(&reinv1.Event{Actor: "harness", Payload: &reinv1.Event_RunTaken{RunTaken: &reinv1.RunTaken{
			Owner: e.cfg.Owner, Epoch: epoch, TraceId: st.TraceID,
		}}})
	}
	defer s.Flush()
	m, err := e.cfg.Models(st.Contract.GetModel())
	if err != nil {
		return s.Fail(fmt.Sprintf("the run's model cannot be built: %v", err))
	}
	if err := s.Begin(ctx, m); err != nil {
		if errors.Is(err, step.ErrStopped) {
			return nil
		}
		return err
	}
	for s.Running() {
		if ctx.Err() != nil || e.draining.Load() {
			return nil
		}
		err := s.Step(ctx)
		switch {
		case err == nil:
		case errors.Is(err, step.ErrStopped), errors.Is(err, step.ErrWaiting):
			return nil
		case errors.Is(err, step.ErrDefect):
			return s.Fail(err.Error())
		default:
			return err
		}
	}
	if st := s.State(); st.WriteInFlight() {
		// A policy approved the step's write and it was dispatched: the
		// driver commits it, as a person's approval would (the run is
		// driven once more after, when it goes on).
		next, err := e.commitWrite(ctx, st, sendDispatched)
		if err == nil && e.stepped && next.Status == reinv1.RunStatus_RUN_STATUS_RUNNING {
			// A synchronous engine has no driver to schedule: step on.
			return e.drive(ctx, runID)
		}
		return err
	}
	return nil
}

// driven is the run as a driver is to drive it, read from the store: a
// parent paused for a child that ended is set running first
// (resumeForChild). That commit takes the run's lease with it when this
// engine holds none, and the run may have moved since it was read (the
// owner it is taken from ended it, say): it is read again then, and
// considered as it is now.
func (e *Engine) driven(ctx context.Context, runID string) (st runstate.State, err error) {
	err = store.RetryOnConflict(ctx, runID, "drive", func() error {
		loaded, err := e.cfg.Store.Load(ctx, runID)
		st = loaded
		if err != nil {
			return err
		}
		st, err = e.resumeForChild(ctx, loaded)
		return err
	})
	return st, err
}

// stepHost is the engine as its steps see it (step.Host): the one commit path,
// reads of a run through the engine's store, its clock, IDs and tools, and
// the scheduling of a delegation's children.
type stepHost Engine

var _ step.Host = (*stepHost)(nil)

func (h *stepHost) Commit(ctx context.Context, st runstate.State, evs []*reinv1.Event, opts ...store.AppendOption) (runstate.State, error) {
	return (*Engine)(h).commit(ctx, st, "", evs, opts...)
}

func (h *stepHost) Load(ctx context.Context, runID string) (runstate.State, error) {
	return h.cfg.Store.Load(ctx, runID)
}

func (h *stepHost) Events(ctx context.Context, runID string, after uint64) ([]*reinv1.Event, error) {
	return h.cfg.Store.Events(ctx, runID, after, eventPage)
}

func (h *stepHost) Clock() time.Time { return h.cfg.Clock() }

func (h *stepHost) NewID(prefix string, now time.Time) string {
	return (*Engine)(h).newID(prefix, now)
}

func (h *stepHost) Tools() tools.Executor { return (*Engine)(h).executor() }

func (h *stepHost) CheckModel(c *reinv1.TaskContract) error {
	if _, err := h.cfg.Models(c.GetModel()); err != nil {
		return &taskcontract.FieldError{Field: "contract.model.provider", Description: err.Error()}
	}
	return (*Engine)(h).checkPrice(c)
}

func (h *stepHost) StartChildren(ctx context.Context, parent runstate.State, seq uint64, children []*reinv1.DelegatedChild) error {
	return (*Engine)(h).startChildren(ctx, parent, seq, children)
}

func (h *stepHost) EndedChildren(ctx context.Context, parent runstate.State) ([]*reinv1.Event, error) {
	return (*Engine)(h).endedChildren(ctx, parent)
}

func (h *stepHost) PausedChild(ctx context.Context, parent runstate.State) (runstate.State, bool, error) {
	return (*Engine)(h).pausedChild(ctx, parent)
}

func (h *stepHost) Logger() *slog.Logger { return h.cfg.Logger }
