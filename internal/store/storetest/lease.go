package storetest

import (
	"context"
	"errors"
	"testing"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
)

// testLeaseFencing: each Acquire returns a greater epoch; an append fenced
// with an older epoch is refused and stores nothing; the current epoch and
// unfenced appends go through; epochs survive a reopen; a missing run has no
// lease.
func testLeaseFencing(t *testing.T, h *harness) {
	ctx := context.Background()
	sp := newSpec(1)
	mustCreate(t, h.s, runStarted(sp))
	first, err := h.s.Acquire(ctx, sp.id, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	second, err := h.s.Acquire(ctx, sp.id, "node-b")
	if err != nil {
		t.Fatal(err)
	}
	if first == 0 || second <= first {
		t.Fatalf("epochs %d then %d: want them to grow from 1", first, second)
	}
	// The stale owner is refused, even at the right version.
	_, err = h.s.Append(ctx, sp.id, 1, steps(sp.id, 2, 2), store.WithEpoch(first))
	if !errors.Is(err, store.ErrFenced) {
		t.Fatalf("append with stale epoch %d: %v, want ErrFenced", first, err)
	}
	assertLog(t, h.s, sp.id, []*reinv1.Event{runStarted(sp)})
	// The current owner and an unfenced writer go through.
	mustAppendOpts(t, h.s, sp.id, 1, steps(sp.id, 2, 2), store.WithEpoch(second))
	mustAppendOpts(t, h.s, sp.id, 3, steps(sp.id, 4, 2))

	h.reopen()
	third, err := h.s.Acquire(ctx, sp.id, "node-c")
	if err != nil {
		t.Fatal(err)
	}
	if third <= second {
		t.Fatalf("after reopen the epoch went from %d to %d; it must keep growing", second, third)
	}
	if _, err := h.s.Append(ctx, sp.id, 5, steps(sp.id, 6, 1), store.WithEpoch(second)); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("append with the pre-reopen epoch: %v, want ErrFenced", err)
	}
	if _, err := h.s.Acquire(ctx, "run-missing", "node-a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Acquire on a missing run: %v, want ErrNotFound", err)
	}
}

func mustAppendOpts(t *testing.T, s store.Store, id string, expected uint64, evs []*reinv1.Event, opts ...store.AppendOption) {
	t.Helper()
	if _, err := s.Append(context.Background(), id, expected, evs, opts...); err != nil {
		t.Fatalf("Append(%s at %d): %v", id, expected, err)
	}
}

// testLeaseWithAppend: an append WithAcquire takes the lease in its own
// transaction: it reports the new epoch, the owner before it is fenced, and
// the new owner's epoch goes on; an append WithAcquire that is refused (a
// stale version) takes no lease and stores nothing.
func testLeaseWithAppend(t *testing.T, h *harness) {
	ctx := context.Background()
	sp := newSpec(1)
	mustCreate(t, h.s, runStarted(sp))
	old, err := h.s.Acquire(ctx, sp.id, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	var got uint64
	mustAppendOpts(t, h.s, sp.id, 1, steps(sp.id, 2, 2), store.WithAcquire("node-b", &got))
	if got <= old {
		t.Fatalf("append WithAcquire reported epoch %d after %d; want a greater one", got, old)
	}
	if _, err := h.s.Append(ctx, sp.id, 3, steps(sp.id, 4, 1), store.WithEpoch(old)); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("the owner before the acquiring append: %v, want ErrFenced", err)
	}
	mustAppendOpts(t, h.s, sp.id, 3, steps(sp.id, 4, 1), store.WithEpoch(got))

	// The failure twin: a refused append acquires nothing.
	var none uint64
	if _, err := h.s.Append(ctx, sp.id, 1, steps(sp.id, 2, 1), store.WithAcquire("node-c", &none)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("stale append WithAcquire: %v, want ErrConflict", err)
	}
	if none != 0 {
		t.Fatalf("a refused append reported epoch %d", none)
	}
	mustAppendOpts(t, h.s, sp.id, 4, steps(sp.id, 5, 1), store.WithEpoch(got))
	want := append([]*reinv1.Event{runStarted(sp)}, steps(sp.id, 2, 4)...)
	assertLog(t, h.s, sp.id, want)
}
