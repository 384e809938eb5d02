package mem_test

import (
	"errors"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/store/mem"
	"github.com/reinhq/rein/internal/store/storetest"
)

// TestConformance runs the suite with dir standing for the store's data: the
// first open of a dir makes a new store, and each later one (after the suite
// closed the last handle) is a Reopen of it, so data must survive a reopen
// as it does on disk.
func TestConformance(t *testing.T) {
	var (
		mu     sync.Mutex
		stores = map[string]*mem.Store{}
	)
	storetest.Run(t, func(t *testing.T, dir string) store.Store {
		mu.Lock()
		defer mu.Unlock()
		s, ok := stores[dir]
		if ok {
			s = s.Reopen()
		} else {
			s = mem.New()
		}
		stores[dir] = s
		return s
	})
}

func started(runID string) *reinv1.Event {
	return &reinv1.Event{
		RunId: runID, Sequence: 1, RecordedAt: timestamppb.Now(), Actor: "harness",
		Payload: &reinv1.Event_RunStarted{RunStarted: &reinv1.RunStarted{
			Contract: &reinv1.TaskContract{Goal: "g", Labels: map[string]string{"team": "red"}},
			Tenant:   "t", RequestId: "req-" + runID,
		}},
	}
}

// TestNoAliasing: changing an event after storing it, or an event or state
// the store returned, changes nothing stored.
func TestNoAliasing(t *testing.T) {
	ctx := t.Context()
	s := mem.New()
	defer s.Close()
	ev := started("run-1")
	want := proto.Clone(ev).(*reinv1.Event)
	st, created, err := s.Create(ctx, ev)
	if err != nil || !created {
		t.Fatalf("Create: created %v, %v", created, err)
	}
	ev.GetRunStarted().GetContract().Goal = "changed by the caller"
	st.Contract.Labels["team"] = "blue"

	evs, err := s.Events(ctx, "run-1", 0, 10)
	if err != nil || len(evs) != 1 {
		t.Fatalf("Events: %v, %v", evs, err)
	}
	if !proto.Equal(evs[0], want) {
		t.Errorf("stored event changed with the caller's: %v", evs[0])
	}
	evs[0].Actor = "changed by the reader"
	loaded, err := s.Load(ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(loaded.Contract, want.GetRunStarted().GetContract()) {
		t.Errorf("stored contract changed: %v", loaded.Contract)
	}
	loaded.Contract.Goal = "changed by the loader"
	page, err := s.List(ctx, store.Filter{Limit: 10})
	if err != nil || len(page.Runs) != 1 {
		t.Fatalf("List: %v, %v", page, err)
	}
	if !proto.Equal(page.Runs[0].Contract, want.GetRunStarted().GetContract()) {
		t.Errorf("listed contract changed: %v", page.Runs[0].Contract)
	}
	again, err := s.Events(ctx, "run-1", 0, 10)
	if err != nil || !proto.Equal(again[0], want) {
		t.Errorf("stored event changed with a returned one: %v, %v", again, err)
	}
	changes, _, err := s.Changes(ctx, 0, 10)
	if err != nil || len(changes) != 1 {
		t.Fatalf("Changes: %v, %v", changes, err)
	}
	changes[0].Change.RunId = "changed"
	if changes, _, _ := s.Changes(ctx, 0, 10); changes[0].Change.GetRunId() != "run-1" {
		t.Errorf("stored change changed with a returned one: %v", changes[0].Change)
	}
}

// TestReopenHandles: a closed handle stays closed after Reopen, and the new
// handle sees the data.
func TestReopenHandles(t *testing.T) {
	ctx := t.Context()
	s := mem.New()
	if _, _, err := s.Create(ctx, started("run-1")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r := s.Reopen()
	defer r.Close()
	if _, err := s.Load(ctx, "run-1"); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Load on the closed handle after Reopen: err = %v, want ErrClosed", err)
	}
	if _, err := r.Load(ctx, "run-1"); err != nil {
		t.Errorf("Load on the reopened handle: %v", err)
	}
}
