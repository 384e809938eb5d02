package bolt

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

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
	if _, err := s.Append(ctx, "run-a", 1, []*reinv1.Event{stepEvent("run-a", 2)}); err != nil {
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
// as the caller's fold, and returns the state the writer stored.
func submitFolded(t *testing.T, s *Store, expected uint64, events []*reinv1.Event, f *folded) (runstate.State, error) {
	t.Helper()
	encoded := make([][]byte, len(events))
	for i, ev := range events {
		var err error
		if encoded[i], err = seal.Seal(ev); err != nil {
			t.Fatal(err)
		}
	}
	res, err := s.submit(context.Background(), &writeReq{runID: "run-a", expected: expected, events: events, encoded: encoded, folded: f})
	if err != nil {
		return runstate.State{}, err
	}
	return *res.state, nil
}

// The fold an append's caller made is the one stored, and returned, when
// the state it folded onto is still the run's.
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
	got, err := submitFolded(t, s, 2, []*reinv1.Event{ev}, f)
	if err != nil {
		t.Fatal(err)
	}
	if cached := s.states.get("run-a"); cached != &f.next {
		t.Error("the writer folded again a fold made onto the run's state as stored")
	}
	if !proto.Equal(got.Proto(true), f.next.Proto(true)) || got.Contract != f.next.Contract {
		t.Errorf("the append returned %v, want the fold ahead's %v", got.Proto(true), f.next.Proto(true))
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
	got, err := submitFolded(t, s, 2, []*reinv1.Event{ev}, f)
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Load(context.Background(), "run-a")
	if err != nil {
		t.Fatal(err)
	}
	if st.Version != 3 || st.Steps == 99 || s.states.get("run-a").Steps == 99 {
		t.Errorf("stored state at version %d with %d steps: the stale fold was taken", st.Version, st.Steps)
	}
	// What the writer folded is what the append returns: the state as
	// stored, its contract (read back with the snapshot) included.
	if !proto.Equal(got.Proto(true), st.Proto(true)) {
		t.Errorf("the append returned %v, want the stored %v", got.Proto(true), st.Proto(true))
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
	if _, err := s.Append(context.Background(), "run-a", 2, []*reinv1.Event{winner}); err != nil {
		t.Fatal(err)
	}
	_, err := submitFolded(t, s, 2, []*reinv1.Event{returnedEvent("run-a", 3)}, f)
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
	got, err := s.Append(context.Background(), "run-a", 2, bad)
	if !errors.Is(err, runstate.ErrSequence) {
		t.Fatalf("append out of sequence: %v, want ErrSequence", err)
	}
	if got.Version != 0 || got.RunID != "" {
		t.Errorf("a refused append returned run %q at version %d, want the zero state", got.RunID, got.Version)
	}
	st, err := s.Load(context.Background(), "run-a")
	if err != nil || st.Version != 2 {
		t.Fatalf("Load = version %d, %v; want 2, nothing of the refused append", st.Version, err)
	}
}

// The cache holds a live run's contract, which the state an append returns
// holds too, and lets go of it once the run ended: the state of the append
// that ended it is returned whole, and nothing is appended to it again.
func TestEndedRunCachedWithoutContract(t *testing.T) {
	s := storeAtVersion2(t)
	if c := s.states.get("run-a").Contract; c.GetGoal() != "g" {
		t.Fatalf("a live run is cached with contract %v, want its own", c)
	}
	end := stepEvent("run-a", 3)
	end.Payload = &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{
		From: reinv1.RunStatus_RUN_STATUS_RUNNING, To: reinv1.RunStatus_RUN_STATUS_CANCELLED, Reason: "test",
	}}
	got, err := s.Append(context.Background(), "run-a", 2, []*reinv1.Event{end})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != reinv1.RunStatus_RUN_STATUS_CANCELLED || got.Contract.GetGoal() != "g" {
		t.Errorf("the ending append returned status %v, contract %v; want cancelled, its contract", got.Status, got.Contract)
	}
	cached := s.states.get("run-a")
	if cached.Contract != nil || cached.Version != 3 {
		t.Errorf("the ended run is cached at version %d with contract %v, want 3 and none", cached.Version, cached.Contract)
	}
	// The twin: an append to it is refused by the fold, whatever is cached.
	if _, err := s.Append(context.Background(), "run-a", 3, []*reinv1.Event{stepEvent("run-a", 4)}); !errors.Is(err, runstate.ErrTerminal) {
		t.Errorf("append after the end: %v, want ErrTerminal", err)
	}
}
