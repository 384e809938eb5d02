package engine

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
)

// errFold marks an append the store's fold rejected: nothing was written.
// The error also wraps the fold's own (runstate.ErrIllegalTransition, …).
var errFold = errors.New("the fold rejects the events")

// commit is the one path by which the engine changes a run, whoever asks
// (a driver's step, a person, a timer, a fork): it stamps evs with the run,
// the sequences after st's version, the engine's clock and actor where
// they are unset; appends them fenced by this engine's lease on the run,
// so an owner whose lease was taken over cannot write (store.ErrFenced);
// and publishes them with the state the store folded them into, which it
// returns. The engine does not fold them itself: the store folds every
// append onto the run's stored state before it writes it, and what that
// fold rejects is never written (errFold). A run that moved since st is
// store.ErrConflict. The append is not cut by ctx once it starts: a caller
// that gave up still needs the step to be either stored or not.
func (e *Engine) commit(ctx context.Context, st runstate.State, actor string, evs []*reinv1.Event, opts ...store.AppendOption) (runstate.State, error) {
	var now *timestamppb.Timestamp
	for i, ev := range evs {
		ev.RunId, ev.Sequence = st.RunID, st.Version+uint64(i)+1
		if ev.RecordedAt == nil {
			if now == nil {
				now = timestamppb.New(e.cfg.Clock())
			}
			ev.RecordedAt = now
		}
		if ev.Actor == "" {
			ev.Actor = actor
		}
	}
	next, err := e.appendFenced(context.WithoutCancel(ctx), st, evs, opts)
	if err != nil {
		if runstate.Rejected(err) {
			return st, fmt.Errorf("%w: %w", errFold, err)
		}
		return st, err
	}
	e.publish(next, evs)
	e.wakeParent(st, next)
	return next, nil
}

// publish gives the watchers (Config.Published) events the store holds
// now, with the run's state after them; nothing else does. commit
// publishes every append it makes. Three writes do not go through commit,
// and publish here too:
//   - a run's first event (createAs): Store.Create makes the run, so there
//     is no version to append at, nor a lease to fence it by;
//   - a whole run imported (Import): Store.Import stores it in one
//     transaction, as recorded elsewhere, stamped already;
//   - a person's message to a running run (Steer): appended with no lease,
//     whoever drives the run; its driver takes it in when its next commit
//     conflicts (docs/architecture.md, "One commit path").
//
// A run published in a terminal status marks its driver, if it has one, so
// that it reads the run no more once it stops (launch): an ended run arms
// no timer, and the read would be of its largest state.
func (e *Engine) publish(next runstate.State, evs []*reinv1.Event) {
	if runstate.Terminal(next.Status) {
		e.mu.Lock()
		if d := e.active[next.RunID]; d != nil {
			d.ended = true
		}
		e.mu.Unlock()
	}
	e.cfg.Published(next, evs)
}
