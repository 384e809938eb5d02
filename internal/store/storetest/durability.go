package storetest

// Tests of durability and closing: a reopened store holds every run, log,
// snapshot and idempotency key it held; a closed store refuses every call and
// stores nothing; a store closed under writers keeps exactly the appends it
// acknowledged.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
)

func testReopen(t *testing.T, h *harness) {
	type run struct {
		sp  spec
		log []*reinv1.Event
	}
	var runs []run
	add := func(i int, tenant string, rest func(id string) []*reinv1.Event) {
		sp := newSpec(i)
		sp.tenant = tenant
		sp.labels = map[string]string{"n": fmt.Sprint(i)}
		r := run{sp: sp, log: []*reinv1.Event{runStarted(sp)}}
		mustCreate(t, h.s, r.log[0])
		if more := rest(sp.id); len(more) > 0 {
			mustAppend(t, h.s, sp.id, 1, more...)
			r.log = append(r.log, more...)
		}
		runs = append(runs, r)
	}
	add(1, "acme", func(string) []*reinv1.Event { return nil })
	add(2, "acme", func(id string) []*reinv1.Event { return steps(id, 2, 5) }) // model call in flight
	add(3, "globex", func(id string) []*reinv1.Event {
		return []*reinv1.Event{step(id, 2), step(id, 3), inputRequested(id, 4), statusChanged(id, 5, running, needsIn)}
	})
	add(4, "acme", func(id string) []*reinv1.Event {
		return append(steps(id, 2, 2), statusChanged(id, 4, running, completed))
	})
	add(5, "globex", func(id string) []*reinv1.Event {
		return []*reinv1.Event{step(id, 2), statusChanged(id, 3, running, failed)}
	})

	before, err := h.s.List(t.Context(), store.Filter{Limit: 100})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	for range 2 {
		h.reopen()
		for _, r := range runs {
			assertLog(t, h.s, r.sp.id, r.log)
		}
		after, err := h.s.List(t.Context(), store.Filter{Limit: 100})
		if err != nil {
			t.Fatalf("List after reopen: %v", err)
		}
		if len(after.Runs) != len(before.Runs) {
			t.Fatalf("List after reopen: %d runs, want %d", len(after.Runs), len(before.Runs))
		}
		for i := range after.Runs {
			assertState(t, "List after reopen", after.Runs[i], before.Runs[i])
		}
		// Idempotency keys survive.
		for _, r := range runs {
			dup := newSpec(100)
			dup.tenant, dup.requestID = r.sp.tenant, r.sp.requestID
			st, created, err := h.s.Create(t.Context(), runStarted(dup))
			if err != nil || created || st.RunID != r.sp.id {
				t.Errorf("Create(%s's request ID) after reopen: run %q created %v err %v, want %q false nil",
					r.sp.id, st.RunID, created, err, r.sp.id)
			}
		}
	}

	// The stored snapshot is the one appends build on: the version check and
	// the fold hold after a reopen.
	r := runs[1]
	if _, err := h.s.Append(t.Context(), r.sp.id, 1, steps(r.sp.id, 2, 1)); !errors.Is(err, store.ErrConflict) {
		t.Errorf("stale Append after reopen: err = %v, want ErrConflict", err)
	}
	if _, err := h.s.Append(t.Context(), r.sp.id, 6, []*reinv1.Event{modelRequested(r.sp.id, 7, "x")}); !errors.Is(err, runstate.ErrIllegalTransition) {
		t.Errorf("model_requested with a call in flight after reopen: err = %v, want ErrIllegalTransition", err)
	}
	more := step(r.sp.id, 7)
	mustAppend(t, h.s, r.sp.id, 6, more)
	r.log = append(r.log, more)
	h.reopen()
	assertLog(t, h.s, r.sp.id, r.log)
	mustCreate(t, h.s, runStarted(newSpec(6)))
}

func testClosed(t *testing.T, h *harness) {
	sp := newSpec(1)
	mustCreate(t, h.s, runStarted(sp))
	h.close()
	ctx := t.Context()
	calls := map[string]func() error{
		"Create": func() error { _, _, err := h.s.Create(ctx, runStarted(newSpec(2))); return err },
		"Append": func() error { _, err := h.s.Append(ctx, sp.id, 1, steps(sp.id, 2, 1)); return err },
		"Load":   func() error { _, err := h.s.Load(ctx, sp.id); return err },
		"Events": func() error { _, err := h.s.Events(ctx, sp.id, 0, 10); return err },
		"List":   func() error { _, err := h.s.List(ctx, store.Filter{Limit: 10}); return err },
		"Blobs":  func() error { _, err := h.s.Blobs(ctx, sp.id, []string{store.BlobHash(nil)}); return err },
	}
	for _, name := range slices.Sorted(maps.Keys(calls)) {
		if err := calls[name](); !errors.Is(err, store.ErrClosed) {
			t.Errorf("%s after Close: err = %v, want ErrClosed", name, err)
		}
	}
	// Nothing a closed store refused was written.
	h.reopen()
	assertLog(t, h.s, sp.id, []*reinv1.Event{runStarted(sp)})
	assertRuns(t, h.s, store.Filter{Limit: 10}, []string{sp.id})
}

// testCloseDuringAppends closes the store while writers append: every append
// that returned nil is in the log after a reopen, and every one refused
// (ErrClosed) is not.
func testCloseDuringAppends(t *testing.T, h *harness) {
	const writers = 8
	var (
		wg    sync.WaitGroup
		warm  sync.WaitGroup  // done when each writer has appended a few times, or quit
		acked [writers]uint64 // the last version a writer's append acknowledged
	)
	warm.Add(writers)
	for w := range writers {
		sp := newSpec(w + 1)
		mustCreate(t, h.s, runStarted(sp))
		acked[w] = 1
		wg.Go(func() {
			var once sync.Once
			defer once.Do(warm.Done)
			for seq := uint64(2); ; seq++ {
				_, err := h.s.Append(context.Background(), sp.id, seq-1, []*reinv1.Event{step(sp.id, seq)})
				if err != nil {
					if !errors.Is(err, store.ErrClosed) {
						t.Errorf("Append(%s, %d) during Close: err = %v, want nil or ErrClosed", sp.id, seq-1, err)
					}
					return
				}
				acked[w] = seq
				if seq == 4 {
					once.Do(warm.Done)
				}
			}
		})
	}
	warm.Wait() // every writer has appended a few times and goes on appending
	h.close()
	wg.Wait()
	h.reopen()
	for w := range writers {
		sp := newSpec(w + 1)
		want := append([]*reinv1.Event{runStarted(sp)}, steps(sp.id, 2, int(acked[w]-1))...)
		assertLog(t, h.s, sp.id, want)
	}
}
