package engine

import (
	"testing"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/model"
)

// TestStaleOwnerIsFenced: a driver whose lease was taken over while its
// model call was in flight cannot record the reply; the run's log stays as
// the new owner's, and the new owner carries the run on.
func TestStaleOwnerIsFenced(t *testing.T) {
	m := &gateModel{entered: make(chan struct{}, 1), release: make(chan struct{})}
	e, s := setup(t, Config{Owner: "old", Models: func(*reinv1.ModelSpec) (model.Model, error) { return m, nil }})
	ctx := testCtx(t)
	c := testContract()
	c.Model = &reinv1.ModelSpec{Provider: "gate"}
	st, _, err := e.Start(ctx, StartRequest{RequestID: "r", Contract: c, Principal: "alice", Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	<-m.entered // the old owner's call is in flight
	if _, err := s.Acquire(ctx, st.RunID, "new"); err != nil {
		t.Fatal(err)
	}
	before, err := s.Load(ctx, st.RunID)
	if err != nil {
		t.Fatal(err)
	}
	m.release <- struct{}{}
	if err := e.Wait(ctx, st.RunID); err != nil {
		t.Fatal(err)
	}
	after, err := s.Load(ctx, st.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if after.Version != before.Version || !after.ModelInFlight || after.Status != reinv1.RunStatus_RUN_STATUS_RUNNING {
		t.Fatalf("the fenced owner wrote: version %d → %d, in flight %v, status %v", before.Version, after.Version, after.ModelInFlight, after.Status)
	}

	// The twin: a new owner (another engine on the store) takes over and
	// finishes the run; its re-sent call is marked resumed.
	e2 := newEngine(t, Config{Store: s, Owner: "new", Models: func(*reinv1.ModelSpec) (model.Model, error) { return m, nil }})
	if err := e2.Resume(ctx, st.RunID); err != nil {
		t.Fatal(err)
	}
	<-m.entered
	m.release <- struct{}{}
	if err := e2.Wait(ctx, st.RunID); err != nil {
		t.Fatal(err)
	}
	done, err := s.Load(ctx, st.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if done.Status != reinv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Fatalf("after the new owner: %v, want completed", done.Status)
	}
	evs, err := s.Events(ctx, st.RunID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	resumed := 0
	for _, ev := range evs {
		if ev.GetModelRequested().GetResumed() {
			resumed++
		}
	}
	if resumed != 1 {
		t.Fatalf("%d resumed model calls in the log, want 1 (the call the fenced owner lost)", resumed)
	}
}
