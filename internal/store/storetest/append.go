package storetest

// Tests of appending to a run's log and reading it back: Events and its
// paging, the state an append returns (the fold of the stored log, as Load
// returns it, the contract included; the zero State when it is refused), the
// version check and the fold refusing an append (all or nothing), and
// concurrent writers to one run and to many.

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
	"google.golang.org/protobuf/proto"
)

func testAppendAndEvents(t *testing.T, h *harness) {
	sp := newSpec(1)
	log := []*reinv1.Event{runStarted(sp)}
	mustCreate(t, h.s, log[0])

	batches := [][]*reinv1.Event{
		steps(sp.id, 2, 1),
		steps(sp.id, 3, 2),
		steps(sp.id, 5, 5),
		{inputRequested(sp.id, 10), statusChanged(sp.id, 11, running, needsIn)},
		{statusChanged(sp.id, 12, needsIn, running), modelRequested(sp.id, 13, "h13"), modelReturned(sp.id, 14)},
		{statusChanged(sp.id, 15, running, completed)},
	}
	for i, b := range batches {
		if i == 3 {
			// A store opened again has cached nothing: the state an append
			// returns is made from the stored one, its contract included.
			h.reopen()
		}
		got := mustAppend(t, h.s, sp.id, uint64(len(log)), b...)
		log = append(log, b...)
		assertState(t, fmt.Sprintf("the state Append returned after %d events, against the fold of what was appended", len(log)), got, fold(t, log))
		if got.Version != uint64(len(log)) || got.Contract.GetGoal() != sp.goal {
			t.Fatalf("Append returned version %d, goal %q after %d events, want %d, %q", got.Version, got.Contract.GetGoal(), len(log), len(log), sp.goal)
		}
	}
	assertLog(t, h.s, sp.id, log)
	st := mustLoad(t, h.s, sp.id)
	if st.Status != completed || st.Result.GetText() != "done" || st.Steps != 5 {
		t.Errorf("final state: status %v result %v steps %d, want completed, done, 5", st.Status, st.Result, st.Steps)
	}

	// An append of no events stores nothing and returns the run's state; of
	// a run that does not exist, ErrNotFound.
	got, err := h.s.Append(t.Context(), sp.id, uint64(len(log)), nil)
	if err != nil {
		t.Fatalf("Append(no events): %v", err)
	}
	assertState(t, "the state Append(no events) returned", got, fold(t, log))
	got, err = h.s.Append(t.Context(), runID(2), 1, nil)
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Append(no events, a run not stored): err = %v, want ErrNotFound", err)
	}
	assertRefused(t, "Append(no events, a run not stored)", got, err)
	assertLog(t, h.s, sp.id, log)
}

func testEventsPaging(t *testing.T, h *harness) {
	sp := newSpec(1)
	log := append([]*reinv1.Event{runStarted(sp)}, steps(sp.id, 2, 12)...)
	mustCreate(t, h.s, log[0])
	mustAppend(t, h.s, sp.id, 1, log[1:]...)
	n := len(log)

	for after := 0; after <= n+1; after++ {
		for limit := 1; limit <= n+1; limit++ {
			got := mustEvents(t, h.s, sp.id, uint64(after), limit)
			want := log[min(after, n):min(after+limit, n)]
			if len(got) != len(want) {
				t.Fatalf("Events(after=%d, limit=%d): %d events, want %d", after, limit, len(got), len(want))
			}
			for i := range got {
				if !proto.Equal(got[i], want[i]) {
					t.Fatalf("Events(after=%d, limit=%d)[%d]: sequence %d, want %d",
						after, limit, i, got[i].GetSequence(), want[i].GetSequence())
				}
			}
		}
	}

	// Paging by the last sequence seen covers the log exactly once.
	for _, limit := range []int{1, 3, 5, n} {
		var seen []*reinv1.Event
		var after uint64
		for range n + 1 {
			page := mustEvents(t, h.s, sp.id, after, limit)
			if len(page) == 0 {
				break
			}
			seen = append(seen, page...)
			after = page[len(page)-1].GetSequence()
		}
		if len(seen) != n {
			t.Errorf("paging by %d: %d events, want %d", limit, len(seen), n)
		}
		for i, ev := range seen {
			if ev.GetSequence() != uint64(i+1) {
				t.Errorf("paging by %d: event %d has sequence %d", limit, i, ev.GetSequence())
				break
			}
		}
	}
}

func testAppendStaleVersion(t *testing.T, h *harness) {
	sp := newSpec(1)
	log := append([]*reinv1.Event{runStarted(sp)}, steps(sp.id, 2, 2)...)
	mustCreate(t, h.s, log[0])
	mustAppend(t, h.s, sp.id, 1, log[1:]...)

	tests := []struct {
		name     string
		expected uint64
		events   []*reinv1.Event
	}{
		// A writer that did not see the last append: its events are the
		// ones it would write at its version.
		{"behind_by_one", 2, steps(sp.id, 3, 1)},
		{"behind_by_two", 1, steps(sp.id, 2, 2)},
		{"zero", 0, []*reinv1.Event{runStarted(sp)}},
		// A writer ahead of the log.
		{"ahead", 4, steps(sp.id, 5, 1)},
		{"far_ahead", 100, steps(sp.id, 101, 1)},
	}
	for _, tc := range tests {
		st, err := h.s.Append(t.Context(), sp.id, tc.expected, tc.events)
		if !errors.Is(err, store.ErrConflict) {
			t.Errorf("Append(%s, expected %d): err = %v, want ErrConflict", tc.name, tc.expected, err)
		}
		assertRefused(t, "Append("+tc.name+")", st, err)
		assertLog(t, h.s, sp.id, log)
	}
	// The twin: the right version is taken, and its state returned.
	st := mustAppend(t, h.s, sp.id, 3, steps(sp.id, 4, 1)...)
	assertState(t, "the state Append returned at the right version", st, fold(t, append(log, steps(sp.id, 4, 1)...)))
}

func testAppendRejectedByFold(t *testing.T, h *harness) {
	sp := newSpec(1)
	log := append([]*reinv1.Event{runStarted(sp)}, steps(sp.id, 2, 2)...)
	mustCreate(t, h.s, log[0])
	mustAppend(t, h.s, sp.id, 1, log[1:]...)
	otherRun := step(runID(2), 4)
	startedAgain := runStarted(sp)
	startedAgain.Sequence = 4

	tests := []struct {
		name   string
		events []*reinv1.Event
		want   error // nil: any error
	}{
		{"illegal_transition", []*reinv1.Event{statusChanged(sp.id, 4, running, expired)}, runstate.ErrIllegalTransition},
		{"wrong_from", []*reinv1.Event{statusChanged(sp.id, 4, needsIn, running)}, runstate.ErrIllegalTransition},
		{"returned_without_request", []*reinv1.Event{modelReturned(sp.id, 4)}, runstate.ErrIllegalTransition},
		{"run_started_again", []*reinv1.Event{startedAgain}, runstate.ErrInvalidEvent},
		{"no_payload", []*reinv1.Event{envelope(sp.id, 4)}, runstate.ErrInvalidEvent},
		{"gap", steps(sp.id, 5, 1), runstate.ErrSequence},
		{"other_run", []*reinv1.Event{otherRun}, nil},
		// All or nothing: the first events apply, the last does not.
		{"bad_last_of_batch", append(steps(sp.id, 4, 3), statusChanged(sp.id, 7, needsIn, running)), runstate.ErrIllegalTransition},
		{"gap_in_batch", append(steps(sp.id, 4, 2), step(sp.id, 7)), runstate.ErrSequence},
	}
	for _, tc := range tests {
		st, err := h.s.Append(t.Context(), sp.id, 3, tc.events)
		switch {
		case err == nil:
			t.Errorf("Append(%s): err = nil, want an error", tc.name)
		case tc.want != nil && !errors.Is(err, tc.want):
			t.Errorf("Append(%s): err = %v, want %v", tc.name, err, tc.want)
		}
		assertRefused(t, "Append("+tc.name+")", st, err)
		assertLog(t, h.s, sp.id, log)
	}

	// After a terminal status nothing is taken. The terminal append's
	// state is returned whole (mustAppend), the contract included.
	end := statusChanged(sp.id, 4, running, cancelled)
	if st := mustAppend(t, h.s, sp.id, 3, end); st.Status != cancelled {
		t.Errorf("Append(cancel) returned status %v, want cancelled", st.Status)
	}
	log = append(log, end)
	for name, ev := range map[string]*reinv1.Event{
		"model_requested": step(sp.id, 5),
		"status_changed":  statusChanged(sp.id, 5, cancelled, running),
	} {
		st, err := h.s.Append(t.Context(), sp.id, 4, []*reinv1.Event{ev})
		if !errors.Is(err, runstate.ErrTerminal) {
			t.Errorf("Append(%s after cancelled): err = %v, want ErrTerminal", name, err)
		}
		assertRefused(t, "Append("+name+" after cancelled)", st, err)
	}
	assertLog(t, h.s, sp.id, log)
	if st := mustLoad(t, h.s, sp.id); st.Status != cancelled {
		t.Errorf("status %v, want cancelled", st.Status)
	}
}

func testAppendConflictConcurrent(t *testing.T, h *harness) {
	const writers = 16
	sp := newSpec(1)
	log := append([]*reinv1.Event{runStarted(sp)}, steps(sp.id, 2, 4)...)
	mustCreate(t, h.s, log[0])
	mustAppend(t, h.s, sp.id, 1, log[1:]...)
	expected := uint64(len(log))

	var (
		wg     sync.WaitGroup
		start  = make(chan struct{})
		errs   = make([]error, writers)
		states = make([]runstate.State, writers)
		writes = make([][]*reinv1.Event, writers)
	)
	for i := range writers {
		// Each writer's events differ, so the log shows whose won.
		writes[i] = []*reinv1.Event{
			modelRequested(sp.id, expected+1, fmt.Sprintf("writer-%d", i)),
			modelReturned(sp.id, expected+2),
		}
		wg.Go(func() {
			<-start
			states[i], errs[i] = h.s.Append(t.Context(), sp.id, expected, writes[i])
		})
	}
	close(start)
	wg.Wait()

	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Errorf("writers %d and %d both appended at version %d", winner, i, expected)
		case err == nil:
			winner = i
		case !errors.Is(err, store.ErrConflict):
			t.Errorf("writer %d: err = %v, want nil or ErrConflict", i, err)
		}
		if err != nil {
			assertRefused(t, fmt.Sprintf("writer %d", i), states[i], err)
		}
	}
	if winner < 0 {
		t.Fatalf("no writer appended at version %d", expected)
	}
	assertLog(t, h.s, sp.id, append(log, writes[winner]...))
	assertAppended(t, h.s, sp.id, states[winner])
	if v := mustLoad(t, h.s, sp.id).Version; v != expected+2 {
		t.Errorf("version %d, want %d", v, expected+2)
	}
}

func testAppendManyRunsConcurrent(t *testing.T, h *harness) {
	const (
		runs    = 32
		appends = 20
	)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for r := range runs {
		sp := newSpec(r + 1)
		mustCreate(t, h.s, runStarted(sp))
		wg.Go(func() {
			<-start
			for seq := uint64(2); seq < 2+appends; seq++ {
				st, err := h.s.Append(t.Context(), sp.id, seq-1, []*reinv1.Event{step(sp.id, seq)})
				if err != nil {
					t.Errorf("Append(%s, %d): %v", sp.id, seq-1, err)
					return
				}
				// Each run's appends share commits with the other runs':
				// the state returned is this run's, after this append.
				if st.RunID != sp.id || st.Version != seq || st.Steps != uint32(seq/2) || st.Contract.GetGoal() != sp.goal {
					t.Errorf("Append(%s, %d) returned run %q at version %d, %d steps, goal %q; want %s at %d, %d steps, goal %q",
						sp.id, seq-1, st.RunID, st.Version, st.Steps, st.Contract.GetGoal(), sp.id, seq, seq/2, sp.goal)
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if t.Failed() {
		return
	}
	for r := range runs {
		sp := newSpec(r + 1)
		assertLog(t, h.s, sp.id, append([]*reinv1.Event{runStarted(sp)}, steps(sp.id, 2, appends)...))
	}
}
