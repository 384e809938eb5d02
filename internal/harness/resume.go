package harness

import (
	"context"
	"fmt"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
)

// resumePage is how many runs ResumeAll lists at once.
const resumePage = 1000

// ResumeAll carries on every run the store holds that has not ended, as a
// server does when it starts (and as a server taking over another's runs
// will): a running run is scheduled; a write that was dispatched when the
// process stopped is settled by its tool's lookup (never sent blindly
// again); any other paused run stays paused with its deadlines armed again
// (a proposal's expiry, the run's deadline). It returns the first error
// listing the runs or scheduling one; a write that cannot be settled is
// logged and left to a person.
func (e *Engine) ResumeAll(ctx context.Context) error {
	f := store.Filter{Statuses: []reinv1.RunStatus{
		reinv1.RunStatus_RUN_STATUS_RUNNING, reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT, reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL,
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
			e.resumeOne(ctx, st)
		}
		if page.Next == "" {
			return nil
		}
		f.After = page.Next
	}
}

func (e *Engine) resumeOne(ctx context.Context, st runstate.State) {
	switch {
	case st.WriteInFlight():
		if _, err := e.SettleWrite(ctx, st.RunID); err != nil {
			e.cfg.Logger.Error("settle a dispatched write", "run_id", st.RunID, "error", err)
		}
	case runstate.Paused(st.Status):
		e.Arm(st)
	default:
		e.schedule(st.RunID)
		e.cfg.Logger.Info("resumed run", "run_id", st.RunID, "trace_id", st.TraceID, "tenant", st.Tenant, "principal", st.Principal, "version", st.Version)
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
	e.cfg.Published(st, events)
	if resume && !runstate.Terminal(st.Status) {
		e.resumeOne(ctx, st)
	}
	return st, nil
}
