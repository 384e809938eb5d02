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

// leases are the epochs of the runs' leases this engine holds, the one
// place they are noted and forgotten. A lease is noted when this engine
// acquires the run (Engine.lease) or takes it with an append
// (Engine.appendFenced); forgotten when an append is fenced (another owner
// took the run, so the next append acquires it again instead of failing
// for good), when the run ends (nothing appends to it again), and when the
// engine abandons its runs (Abandon). It is safe for concurrent use.
type leases struct {
	// mu is taken after Engine.mu when both are held, never before.
	mu     sync.Mutex
	epochs map[string]uint64
}

// epoch is the lease this engine holds on the run, if it holds one.
func (l *leases) epoch(runID string) (uint64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	epoch, ok := l.epochs[runID]
	return epoch, ok
}

// hold notes a lease this engine acquired, unless it holds a newer one,
// and returns the one it holds.
func (l *leases) hold(runID string, epoch uint64) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if held, ok := l.epochs[runID]; ok && held > epoch {
		return held
	}
	if l.epochs == nil {
		l.epochs = map[string]uint64{}
	}
	l.epochs[runID] = epoch
	return epoch
}

// drop forgets a lease another owner fenced, unless a newer one was noted
// since.
func (l *leases) drop(runID string, epoch uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.epochs[runID] == epoch {
		delete(l.epochs, runID)
	}
}

// release forgets the lease of a run that ended.
func (l *leases) release(runID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.epochs, runID)
}

// clear forgets every lease (Abandon).
func (l *leases) clear() {
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.epochs)
}

// count is how many runs this engine holds a lease on.
func (l *leases) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.epochs)
}

// lease is this engine's lease epoch on the run, acquired if it holds none
// (a driver takes the run before it does anything), and held until another
// owner fences it. Every append of a live run is fenced with it
// (appendFenced): a driver's steps, and a person's decision or a timer's
// expiry alike, so nothing this engine writes slips past another owner's
// lease.
func (e *Engine) lease(ctx context.Context, runID string) (uint64, error) {
	if epoch, ok := e.leases.epoch(runID); ok {
		return epoch, nil
	}
	epoch, err := e.cfg.Store.Acquire(ctx, runID, e.cfg.Owner)
	if err != nil {
		return 0, fmt.Errorf("acquire run %s: %w", runID, err)
	}
	return e.leases.hold(runID, epoch), nil
}

// appendFenced appends evs to the run at st's version, fenced by the lease
// this engine holds on it, or taking the lease with the append (one
// transaction) when it holds none, and notes what the append did to the
// lease: taken, fenced (forgotten), or let go with a run that ended. It is
// commit's append.
func (e *Engine) appendFenced(ctx context.Context, st runstate.State, evs []*reinv1.Event, opts []store.AppendOption) (runstate.State, error) {
	epoch, held := e.leases.epoch(st.RunID)
	if held {
		opts = append(opts, store.WithEpoch(epoch))
	} else {
		opts = append(opts, store.WithAcquire(e.cfg.Owner, &epoch))
	}
	next, err := e.cfg.Store.Append(ctx, st.RunID, st.Version, evs, opts...)
	if err != nil {
		if held && errors.Is(err, store.ErrFenced) {
			e.leases.drop(st.RunID, epoch)
		}
		return next, err
	}
	if !held {
		e.leases.hold(st.RunID, epoch)
	}
	if runstate.Terminal(next.Status) {
		e.leases.release(st.RunID)
	}
	return next, nil
}
