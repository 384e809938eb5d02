package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
)

// resumePage is how many runs ResumeAll lists at once.
const resumePage = 1000

// settleAtOnce bounds how many dispatched writes ResumeAll settles at
// once: each asks its tool's lookup, which may take up to the tool
// timeout, so one after another they would hold the server's start for
// the sum of them.
const settleAtOnce = 16

// ResumeAll carries on every run the store holds that has not ended, as a
// server does when it starts (and as a server taking over another's runs
// will): a running run is scheduled; a write that was dispatched when the
// process stopped is settled by its tool's lookup (never sent blindly
// again); any other paused run stays paused with its deadlines armed again
// (a proposal's expiry, the run's deadline, a budget pause's end). The
// dispatched writes are settled concurrently, settleAtOnce at a time, and
// ResumeAll returns once every one is. It returns the first error listing
// the runs or scheduling one; a write that cannot be settled is logged and
// left to a person.
func (e *Engine) ResumeAll(ctx context.Context) error {
	var settling sync.WaitGroup
	defer settling.Wait()
	slots := make(chan struct{}, settleAtOnce)
	f := store.Filter{Statuses: []reinv1.RunStatus{
		reinv1.RunStatus_RUN_STATUS_RUNNING, reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT, reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL,
		reinv1.RunStatus_RUN_STATUS_NEEDS_BUDGET,
	}, Limit: resumePage}
	for {
		page, err := e.cfg.Store.List(ctx, f)
		if err != nil {
			return fmt.Errorf("list the runs to resume: %w", err)
		}
		for _, err := range page.Damaged {
			e.cfg.Logger.Error("a run cannot be resumed: what is stored of it is damaged; rein check lists every problem", "error", err)
		}
		for _, st := range page.Runs {
			if !st.WriteInFlight() {
				e.resumeOne(ctx, st)
				continue
			}
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return ctx.Err()
			}
			settling.Add(1)
			go func() {
				defer settling.Done()
				defer func() { <-slots }()
				e.resumeOne(ctx, st)
			}()
		}
		if page.Next == "" {
			return nil
		}
		f.After = page.Next
	}
}

// Takeover carries on a run whose owner's lease ended (another server
// died, or was cut off): as ResumeAll carries on each run at start, taking
// the run's lease first. A run that ended, or that another server took
// first, is left alone; so is one that ended between this read and the
// lease, as the driver reads the run again once it holds the lease
// (drive).
func (e *Engine) Takeover(ctx context.Context, runID string) error {
	st, err := e.cfg.Store.Load(ctx, runID)
	if err != nil {
		return fmt.Errorf("take over run %s: %w", runID, err)
	}
	if !runstate.Terminal(st.Status) {
		e.resumeOne(ctx, st)
	}
	return nil
}

func (e *Engine) resumeOne(ctx context.Context, st runstate.State) {
	switch {
	case st.WriteInFlight():
		// Only the run's owner settles its write: one that another
		// server drives may be sending it now.
		if _, err := e.lease(ctx, st.RunID); err != nil {
			if !errors.Is(err, store.ErrOwned) {
				e.cfg.Logger.Error("settle a dispatched write", "run_id", st.RunID, "error", err)
			}
			return
		}
		if _, err := e.SettleWrite(ctx, st.RunID); err != nil {
			e.cfg.Logger.Error("settle a dispatched write", "run_id", st.RunID, "error", err)
		}
	case runstate.Paused(st.Status):
		if e.cfg.Replica {
			// One replica keeps a paused run's deadlines: the one that
			// holds it. Another's live lease holds it: that one does.
			if _, err := e.lease(ctx, st.RunID); err != nil {
				if !errors.Is(err, store.ErrOwned) {
					e.cfg.Logger.Error("take a paused run to keep its deadlines", "run_id", st.RunID, "error", err)
				}
				return
			}
		}
		e.Arm(st)
	default:
		e.schedule(st.RunID) // its driver logs "resumed run" once it holds the run
	}
}

// Import stores a whole run recorded elsewhere (an export file, checked by
// the caller) with the blobs its events reference, all of it or nothing,
// and publishes its events. With resume, the run is then carried on as
// ResumeAll would at start (a server does; the CLI's embedded server, which
// stops when the command ends, does not).
func (e *Engine) Import(ctx context.Context, events []*reinv1.Event, blobs map[string][]byte, resume bool) (runstate.State, error) {
	st, err := e.cfg.Store.Import(ctx, events, blobs)
	if err != nil {
		return st, err
	}
	e.publish(st, events)
	if resume && !runstate.Terminal(st.Status) {
		e.resumeOne(ctx, st)
	}
	return st, nil
}
