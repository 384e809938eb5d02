package storetest

// Tests of creating and loading runs: what Create refuses, its idempotency by
// (tenant, request ID), alone and under concurrent callers, and the errors
// for a run that does not exist.

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
	"google.golang.org/protobuf/proto"
)

func testCreateThenLoad(t *testing.T, h *harness) {
	sp := newSpec(1)
	sp.labels = map[string]string{"team": "infra"}
	ev := runStarted(sp)
	st := mustCreate(t, h.s, ev)
	for what, got := range map[string]runstate.State{"Create": st, "Load": mustLoad(t, h.s, sp.id)} {
		if got.RunID != sp.id || got.Status != running || got.Version != 1 {
			t.Errorf("%s: run %q status %v version %d, want %q running 1", what, got.RunID, got.Status, got.Version, sp.id)
		}
		if !proto.Equal(got.Contract, ev.GetRunStarted().GetContract()) {
			t.Errorf("%s: contract %v, want %v", what, got.Contract, ev.GetRunStarted().GetContract())
		}
		if got.Principal != "alice" || got.Tenant != sp.tenant || got.RequestID != sp.requestID {
			t.Errorf("%s: principal %q tenant %q request %q", what, got.Principal, got.Tenant, got.RequestID)
		}
		if !got.CreatedAt.Equal(at(1).AsTime()) {
			t.Errorf("%s: created at %v, want %v", what, got.CreatedAt, at(1).AsTime())
		}
		assertState(t, what, got, fold(t, []*reinv1.Event{ev}))
	}
	assertLog(t, h.s, sp.id, []*reinv1.Event{ev})
}

func testCreateRejectsInvalid(t *testing.T, h *harness) {
	notStarted := modelRequested(runID(1), 1, "h")
	seqTwo := runStarted(newSpec(2))
	seqTwo.Sequence = 2
	noContract := runStarted(newSpec(3))
	noContract.GetRunStarted().Contract = nil
	for name, ev := range map[string]*reinv1.Event{
		"not_run_started": notStarted,
		"sequence_2":      seqTwo,
		"no_contract":     noContract,
	} {
		if _, _, err := h.s.Create(t.Context(), ev); err == nil {
			t.Errorf("Create(%s): err = nil, want an error", name)
		}
		if _, err := h.s.Load(t.Context(), ev.GetRunId()); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Load after a refused Create(%s): err = %v, want ErrNotFound", name, err)
		}
	}
	assertRuns(t, h.s, store.Filter{Limit: 100}, nil)
	// The twin: a valid run_started is taken.
	mustCreate(t, h.s, runStarted(newSpec(4)))
}

func testCreateIdempotent(t *testing.T, h *harness) {
	first := newSpec(1)
	first.goal = "the first goal"
	mustCreate(t, h.s, runStarted(first))
	mustAppend(t, h.s, first.id, 1, steps(first.id, 2, 2)...)

	again := newSpec(2)
	again.requestID = first.requestID
	again.goal = "another goal"
	got, created, err := h.s.Create(t.Context(), runStarted(again))
	if err != nil {
		t.Fatalf("Create again: %v", err)
	}
	if created {
		t.Errorf("Create again: created = true, want false")
	}
	if got.RunID != first.id {
		t.Errorf("Create again: run %q, want %q", got.RunID, first.id)
	}
	if got.Contract.GetGoal() != "the first goal" {
		t.Errorf("Create again: goal %q, want the first run's", got.Contract.GetGoal())
	}
	if got.Version != 3 {
		t.Errorf("Create again: version %d, want the run's current version 3", got.Version)
	}
	if _, err := h.s.Load(t.Context(), again.id); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Load(%s): err = %v, want ErrNotFound: the second Create must store nothing", again.id, err)
	}
	assertState(t, "Load after Create again", mustLoad(t, h.s, first.id),
		fold(t, append([]*reinv1.Event{runStarted(first)}, steps(first.id, 2, 2)...)))
	assertRuns(t, h.s, store.Filter{Limit: 100}, []string{first.id})

	// The same request ID in another tenant is another run.
	other := newSpec(3)
	other.requestID = first.requestID
	other.tenant = "globex"
	st2, created, err := h.s.Create(t.Context(), runStarted(other))
	if err != nil || !created || st2.RunID != other.id {
		t.Fatalf("Create in another tenant: run %q created %v err %v, want %q true nil", st2.RunID, created, err, other.id)
	}
	// And another request ID in the first tenant is another run.
	mustCreate(t, h.s, runStarted(newSpec(4)))
	assertRuns(t, h.s, store.Filter{Limit: 100}, []string{runID(4), other.id, first.id})
}

func testCreateIdempotentConcurrent(t *testing.T, h *harness) {
	const n = 16
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		created atomic.Int32
		ids     = make([]string, n)
	)
	for i := range n {
		wg.Go(func() {
			sp := newSpec(i + 1)
			sp.requestID = "same"
			<-start
			st, c, err := h.s.Create(t.Context(), runStarted(sp))
			if err != nil {
				t.Errorf("Create %d: %v", i, err)
				return
			}
			if c {
				created.Add(1)
			}
			ids[i] = st.RunID
		})
	}
	close(start)
	wg.Wait()
	if created.Load() != 1 {
		t.Errorf("%d of %d concurrent Creates with one request ID created a run, want 1", created.Load(), n)
	}
	for i, id := range ids {
		if id != ids[0] {
			t.Errorf("Create %d returned run %q, Create 0 %q: want one run", i, id, ids[0])
		}
	}
	page, err := h.s.List(t.Context(), store.Filter{Limit: 100})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(page.Runs) != 1 {
		t.Errorf("List: %d runs, want 1", len(page.Runs))
	}
}

func testNotFound(t *testing.T, h *harness) {
	mustCreate(t, h.s, runStarted(newSpec(1)))
	missing := runID(2)
	if _, err := h.s.Load(t.Context(), missing); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Load: err = %v, want ErrNotFound", err)
	}
	if _, err := h.s.Events(t.Context(), missing, 0, 10); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Events: err = %v, want ErrNotFound", err)
	}
	if _, err := h.s.Append(t.Context(), missing, 1, steps(missing, 2, 1)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Append: err = %v, want ErrNotFound", err)
	}
	if _, err := h.s.Load(t.Context(), missing); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Load after a refused Append: err = %v, want ErrNotFound", err)
	}
	// The twin: the run that exists is found.
	mustLoad(t, h.s, runID(1))
	mustEvents(t, h.s, runID(1), 0, 10)
}
