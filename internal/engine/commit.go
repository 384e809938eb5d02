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
	// Fenced by the lease this engine holds, or taking it with the append
	// (one transaction) when it holds none yet.
	e.mu.Lock()
	epoch, held := e.leases[st.RunID]
	e.mu.Unlock()
	if held {
		opts = append(opts, store.WithEpoch(epoch))
	} else {
		opts = append(opts, store.WithAcquire(e.cfg.Owner, &epoch))
	}
	next, err := e.cfg.Store.Append(context.WithoutCancel(ctx), st.RunID, st.Version, evs, opts...)
	if err != nil {
		if held && errors.Is(err, store.ErrFenced) {
			e.dropLease(st.RunID, epoch)
		}
		if runstate.Rejected(err) {
			return st, fmt.Errorf("%w: %w", errFold, err)
		}
		return st, err
	}
	if !held {
		e.holdLease(st.RunID, epoch)
	}
	if runstate.Terminal(next.Status) {
		e.releaseLease(st.RunID)
	}
	e.cfg.Published(next, evs)
	e.wakeParent(st, next)
	return next, nil
}

// lease is this engine's lease epoch on the run, acquired if it holds none
// (a driver takes the run before it does anything), and held until another
// owner fences it. Every append of a live run is fenced with it (commit):
// a driver's steps, and a person's decision or a timer's expiry alike, so
// nothing this engine writes slips past another owner's lease.
func (e *Engine) lease(ctx context.Context, runID string) (uint64, error) {
	e.mu.Lock()
	epoch, ok := e.leases[runID]
	e.mu.Unlock()
	if ok {
		return epoch, nil
	}
	epoch, err := e.cfg.Store.Acquire(ctx, runID, e.cfg.Owner)
	if err != nil {
		return 0, fmt.Errorf("acquire run %s: %w", runID, err)
	}
	return e.holdLease(runID, epoch), nil
}

// holdLease notes a lease this engine acquired, unless it holds a newer
// one, and returns the one it holds.
func (e *Engine) holdLease(runID string, epoch uint64) uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if held, ok := e.leases[runID]; ok && held > epoch {
		return held
	}
	e.leases[runID] = epoch
	return epoch
}

// dropLease forgets a lease another owner fenced, so the next append
// acquires the run again instead of failing for good.
func (e *Engine) dropLease(runID string, epoch uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.leases[runID] == epoch {
		delete(e.leases, runID)
	}
}

// releaseLease forgets the lease of a run that ended: nothing appends to it
// again.
func (e *Engine) releaseLease(runID string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.leases, runID)
}
