package bolt

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/store/seal"
)

// storeAtVersion2 is a store with run-a at version 2, its state cached.
func storeAtVersion2(t *testing.T) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "rein.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	if _, _, err := s.Create(ctx, startEvent("run-a")); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, "run-a", 1, []*reinv1.Event{stepEvent("run-a", 2)}); err != nil {
		t.Fatal(err)
	}
	return s
}

// returnedEvent is the model's answer to stepEvent's call.
func returnedEvent(runID string, seq uint64) *reinv1.Event {
	ev := stepEvent(runID, seq)
	ev.Actor = "model"
	ev.Payload = &reinv1.Event_ModelReturned{ModelReturned: &reinv1.ModelReturned{
		Decision: &reinv1.Decision{Action: &reinv1.Decision_ToolCall{ToolCall: &reinv1.ToolCall{Tool: "read_file", CallId: "call-1"}}},
		Usage:    &reinv1.Usage{InputTokens: 10, OutputTokens: 2},
	}}
	return ev
}

// submitFolded appends events at version expected as Append does, with f
// as the caller's fold.
func submitFolded(t *testing.T, s *Store, expected uint64, events []*reinv1.Event, f *folded) error {
	t.Helper()
	encoded := make([][]byte, len(events))
	for i, ev := range events {
		var err error
		if encoded[i], err = seal.Seal(ev); err != nil {
			t.Fatal(err)
		}
	}
	_, err := s.submit(context.Background(), &writeReq{runID: "run-a", expected: expected, events: events, encoded: encoded, folded: f})
	return err
}

// The fold an append's caller made is the one stored when the state it
// folded onto is still the run's.
func TestFoldAheadIsStored(t *testing.T) {
	s := storeAtVersion2(t)
	ev := returnedEvent("run-a", 3)
	f := s.foldAhead("run-a", 2, []*reinv1.Event{ev})
	if f == nil {
		t.Fatal("no fold ahead of the writer with the run's state cached at the append's version")
	}
	want, err := runstate.ApplyAll(*f.base, []*reinv1.Event{ev})
	if err != nil {
		t.Fatal(err)
	}
	if f.next.Version != 3 || f.next.UpdatedAt != want.UpdatedAt {
		t.Fatalf("folded ahead to version %d at %v, want 3 at %v", f.next.Version, f.next.UpdatedAt, want.UpdatedAt)
	}
	if err := submitFolded(t, s, 2, []*reinv1.Event{ev}, f); err != nil {
		t.Fatal(err)
	}
	if got := s.states.get("run-a"); got != &f.next {
		t.Error("the writer folded again a fold made onto the run's state as stored")
	}
	st, err := s.Load(context.Background(), "run-a")
	if err != nil || st.Version != 3 {
		t.Fatalf("Load = version %d, %v; want 3", st.Version, err)
	}
}

// A fold made onto a state the writer no longer holds (its cache was
// dropped, as after a failed commit) is not taken: the writer folds the
// events onto the state as stored, and that is what Load reads.
func TestStaleFoldIsFoldedAgain(t *testing.T) {
	s := storeAtVersion2(t)
	ev := returnedEvent("run-a", 3)
	f := s.foldAhead("run-a", 2, []*reinv1.Event{ev})
	if f == nil {
		t.Fatal("no fold ahead")
	}
	s.states.drop("run-a")
	f.next.Steps = 99 // what a fold onto another state might say
	var err error
	if f.snapshot, err = seal.Seal(f.next.Proto(false)); err != nil {
		t.Fatal(err)
	}
	if err := submitFolded(t, s, 2, []*reinv1.Event{ev}, f); err != nil {
		t.Fatal(err)
	}
	st, err := s.Load(context.Background(), "run-a")
	if err != nil {
		t.Fatal(err)
	}
	if st.Version != 3 || st.Steps == 99 || s.states.get("run-a").Steps == 99 {
		t.Errorf("stored state at version %d with %d steps: the stale fold was taken", st.Version, st.Steps)
	}
}

// A fold made at a version another append then passed is a conflict, and
// the other append's events are the log's.
func TestFoldAheadOvertakenIsAConflict(t *testing.T) {
	s := storeAtVersion2(t)
	f := s.foldAhead("run-a", 2, []*reinv1.Event{returnedEvent("run-a", 3)})
	if f == nil {
		t.Fatal("no fold ahead")
	}
	winner := returnedEvent("run-a", 3)
	winner.GetModelReturned().Usage.OutputTokens = 7
	if err := s.Append(context.Background(), "run-a", 2, []*reinv1.Event{winner}); err != nil {
		t.Fatal(err)
	}
	err := submitFolded(t, s, 2, []*reinv1.Event{returnedEvent("run-a", 3)}, f)
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("append folded at an overtaken version: %v, want ErrConflict", err)
	}
	evs, err := s.Events(context.Background(), "run-a", 2, 10)
	if err != nil || len(evs) != 1 || evs[0].GetModelReturned().GetUsage().GetOutputTokens() != 7 {
		t.Fatalf("events after 2: %v, %v; want only the winner's", evs, err)
	}
}

// Events the fold rejects are not folded ahead, and the writer refuses
// them with the fold's error, storing nothing.
func TestFoldAheadOfInvalidEvents(t *testing.T) {
	s := storeAtVersion2(t)
	bad := []*reinv1.Event{returnedEvent("run-a", 3), returnedEvent("run-a", 5)}
	if f := s.foldAhead("run-a", 2, bad); f != nil {
		t.Fatal("folded ahead events out of sequence")
	}
	err := s.Append(context.Background(), "run-a", 2, bad)
	if !errors.Is(err, runstate.ErrSequence) {
		t.Fatalf("append out of sequence: %v, want ErrSequence", err)
	}
	st, err := s.Load(context.Background(), "run-a")
	if err != nil || st.Version != 2 {
		t.Fatalf("Load = version %d, %v; want 2, nothing of the refused append", st.Version, err)
	}
}
