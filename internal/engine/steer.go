package engine

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/step"
	"github.com/reinhq/rein/internal/store"
)

// MaxSteers is the most messages one run takes (step.MaxSteers).
const MaxSteers = step.MaxSteers

// Steer records a person's message to a running run (run_steered), for its
// next model call; created is false when requestID named a message the run
// recorded already, which is then not recorded again. The message is
// appended with no lease, whoever drives the run and wherever: the run's
// driver finds it when its next commit conflicts (step.Stepper's rebase)
// and takes it in. A paused run is refused (ErrNotWaiting) naming what
// answers it; a run that ended, likewise.
func (e *Engine) Steer(ctx context.Context, runID, text, requestID, principal string) (st runstate.State, created bool, err error) {
	// An append that loses to the run's driver committing first (each loss
	// means the driver made progress) is tried again on the run as it is
	// then.
	err = store.RetryOnConflict(ctx, runID, "steer", func() error {
		st, created = runstate.State{}, false
		loaded, err := e.cfg.Store.Load(ctx, runID)
		st = loaded
		if err != nil {
			return err
		}
		if st.HasSteer(requestID) {
			return nil
		}
		if err := steerable(st); err != nil {
			return err
		}
		if e.isHalted(runID) {
			// Being cancelled here: a message would only race the cancel.
			return fmt.Errorf("%w: run %s is being cancelled and takes no message", ErrNotWaiting, runID)
		}
		if len(st.Steers) >= MaxSteers {
			return fmt.Errorf("%w: run %s has taken %d messages, the most a run takes; cancel it and fork it (rein fork) to go on with more",
				ErrNotWaiting, runID, MaxSteers)
		}
		evs := []*reinv1.Event{{
			RunId: runID, Sequence: st.Version + 1, RecordedAt: timestamppb.New(e.cfg.Clock()), Actor: "principal:" + principal,
			Payload: &reinv1.Event_RunSteered{RunSteered: &reinv1.RunSteered{Text: text, RequestId: requestID}},
		}}
		next, err := e.cfg.Store.Append(context.WithoutCancel(ctx), runID, st.Version, evs)
		if err != nil {
			return err
		}
		e.publish(next, evs)
		st, created = next, true
		return nil
	})
	return st, created, err
}

// steerable says why a run takes no message, or nil.
func steerable(st runstate.State) error {
	var next string
	switch st.Status {
	case reinv1.RunStatus_RUN_STATUS_RUNNING:
		return nil
	case reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT:
		next = "it waits for an answer to its question: send it with rein input (ProvideInput)"
	case reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL:
		next = "it waits for a decision on its proposed write: rein approve or rein deny (DecideApproval), with a reason the model reads"
	case reinv1.RunStatus_RUN_STATUS_NEEDS_BUDGET:
		next = "it waits for more budget: rein budget (RaiseBudget)"
	default:
		next = "it ended and takes no message; fork it (rein fork) to go on from a point in its log"
	}
	return fmt.Errorf("%w: run %s is %s; %s", ErrNotWaiting, st.RunID, runstate.StatusName(st.Status), next)
}
