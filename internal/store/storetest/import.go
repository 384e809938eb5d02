package storetest

// Tests of Import: a whole log and its blobs go in at once, as if they had
// been created and appended here; a log that does not fold, a bad blob, a run
// ID or request ID already stored are refused with nothing stored, alone and
// under concurrent callers.

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
)

// importLog is a run that asked a person, referencing two blobs: its log
// and the blobs, as an export file holds them.
func importLog(sp spec) ([]*reinv1.Event, map[string][]byte) {
	goal, big := []byte("goal "+sp.goal), bigBlob(1<<20+3)
	evs := []*reinv1.Event{runStarted(sp), requestedWith(sp.id, 2, goal, big), modelReturned(sp.id, 3)}
	evs = append(evs, steps(sp.id, 4, 2)...)
	evs = append(evs, inputRequested(sp.id, 6), statusChanged(sp.id, 7, running, needsIn))
	return evs, blobSet(goal, big)
}

// storeSnapshot is what a refused Import must leave as it was: the runs,
// each one's log and state, and the change log's head.
type storeSnapshot struct {
	runs    []string
	logs    map[string][]*reinv1.Event
	changes uint64
}

func snapshotStore(t *testing.T, s store.Store) storeSnapshot {
	t.Helper()
	page, err := s.List(t.Context(), store.Filter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	snap := storeSnapshot{logs: map[string][]*reinv1.Event{}}
	for _, st := range page.Runs {
		snap.runs = append(snap.runs, st.RunID)
		snap.logs[st.RunID] = mustEvents(t, s, st.RunID, 0, all)
	}
	if _, snap.changes, err = s.Changes(t.Context(), 0, 0); err != nil {
		t.Fatal(err)
	}
	return snap
}

// assertUnchanged fails unless s holds exactly what before saw: the same
// runs, each with the same log and the state that log folds to, and no new
// status change.
func assertUnchanged(t *testing.T, what string, s store.Store, before storeSnapshot) {
	t.Helper()
	after := snapshotStore(t, s)
	if fmt.Sprint(after.runs) != fmt.Sprint(before.runs) {
		t.Fatalf("%s: the store holds runs %v, had %v", what, after.runs, before.runs)
	}
	for _, id := range before.runs {
		assertLog(t, s, id, before.logs[id])
	}
	if after.changes != before.changes {
		t.Errorf("%s: the change log's head moved from %d to %d", what, before.changes, after.changes)
	}
}

// testImportThenRead: an imported log reads back as it was given, with its
// state, its blobs, its place in List and one status change, and survives a
// reopen.
func testImportThenRead(t *testing.T, h *harness) {
	mustCreate(t, h.s, runStarted(newSpec(1)))
	sp := newSpec(2)
	evs, blobs := importLog(sp)
	st, err := h.s.Import(t.Context(), evs, blobs)
	if err != nil {
		t.Fatalf("Import: %v", err)
	}
	assertState(t, "Import's state", st, fold(t, evs))
	check := func(when string) {
		t.Helper()
		assertLog(t, h.s, sp.id, evs)
		for _, content := range blobs {
			assertBlob(t, h.s, sp.id, content)
		}
		assertRuns(t, h.s, store.Filter{Statuses: []reinv1.RunStatus{needsIn}, Limit: 10}, []string{sp.id})
		assertRuns(t, h.s, store.Filter{Tenant: sp.tenant, Limit: 10}, []string{sp.id, runID(1)})
		changes, head, err := h.s.Changes(t.Context(), 1, 10)
		if err != nil {
			t.Fatal(err)
		}
		if head != 2 || len(changes) != 1 {
			t.Fatalf("%s: %d changes after the first, head %d; want the import's one, head 2", when, len(changes), head)
		}
		ch := changes[0].Change
		if ch.GetRunId() != sp.id || changes[0].Tenant != sp.tenant || ch.GetPrevious() != reinv1.RunStatus_RUN_STATUS_UNSPECIFIED ||
			ch.GetStatus() != needsIn || ch.GetVersion() != uint64(len(evs)) {
			t.Errorf("%s: the import's change is %v (tenant %q), want %s unspecified→needs_input at v%d", when, ch, changes[0].Tenant, sp.id, len(evs))
		}
	}
	check("after Import")
	// The run goes on like any other: it takes the next event at its version.
	next := inputProvided(sp.id, 8)
	mustAppend(t, h.s, sp.id, uint64(len(evs)), next)
	evs = append(evs, next)
	h.reopen()
	assertLog(t, h.s, sp.id, evs)
	for _, content := range blobs {
		assertBlob(t, h.s, sp.id, content)
	}
}

// inputProvided answers inputRequested and resumes the run.
func inputProvided(id string, seq uint64) *reinv1.Event {
	e := envelope(id, seq)
	e.Actor = "principal:alice"
	e.Payload = &reinv1.Event_InputProvided{InputProvided: &reinv1.InputProvided{Text: "main"}}
	return e
}

// testImportRefused: each refusal stores nothing (no run, no event, no blob,
// no change) and leaves the runs already there as they were; the twin, the
// same log made valid, is taken.
func testImportRefused(t *testing.T, h *harness) {
	there := newSpec(1)
	thereLog := append([]*reinv1.Event{runStarted(there)}, steps(there.id, 2, 2)...)
	mustCreate(t, h.s, thereLog[0])
	mustAppend(t, h.s, there.id, 1, thereLog[1:]...)

	sp := newSpec(2)
	valid, blobs := importLog(sp)
	clone := func() []*reinv1.Event {
		out := make([]*reinv1.Event, len(valid))
		for i, ev := range valid {
			out[i] = proto.Clone(ev).(*reinv1.Event)
		}
		return out
	}
	sameID := clone()
	for _, ev := range sameID {
		ev.RunId = there.id
	}
	sameRequest := clone()
	sameRequest[0].GetRunStarted().RequestId = there.requestID
	gap := clone()
	gap = append(gap[:3], gap[4:]...)
	noStart := clone()[1:]
	afterEnd := append(clone(), statusChanged(sp.id, 8, needsIn, cancelled), step(sp.id, 9))
	otherRun := clone()
	otherRun[4].RunId = runID(9)
	badBlob := map[string][]byte{}
	for k, v := range blobs {
		badBlob[k] = v
	}
	badBlob[store.BlobHash([]byte("a"))] = []byte("b")

	for _, tc := range []struct {
		name   string
		evs    []*reinv1.Event
		blobs  map[string][]byte
		exists bool
		blob   bool
	}{
		{name: "a run ID already stored", evs: sameID, blobs: blobs, exists: true},
		{name: "a request ID the tenant already used", evs: sameRequest, blobs: blobs, exists: true},
		{name: "a gap in the sequences", evs: gap, blobs: blobs},
		{name: "no run_started first", evs: noStart, blobs: blobs},
		{name: "an event after the end", evs: afterEnd, blobs: blobs},
		{name: "an event of another run", evs: otherRun, blobs: blobs},
		{name: "a blob not under its hash", evs: clone(), blobs: badBlob, blob: true},
		{name: "no events", evs: nil, blobs: blobs},
	} {
		before := snapshotStore(t, h.s)
		_, err := h.s.Import(t.Context(), tc.evs, tc.blobs)
		switch {
		case err == nil:
			t.Fatalf("Import with %s: err = nil, want a refusal", tc.name)
		case errors.Is(err, store.ErrExists) != tc.exists:
			t.Errorf("Import with %s: %v; want ErrExists: %v", tc.name, err, tc.exists)
		case errors.Is(err, store.ErrInvalidBlob) != tc.blob:
			t.Errorf("Import with %s: %v; want ErrInvalidBlob: %v", tc.name, err, tc.blob)
		}
		assertUnchanged(t, "Import with "+tc.name, h.s, before)
		for _, content := range blobs {
			assertNoBlob(t, h.s, there.id, content)
		}
	}
	assertLog(t, h.s, there.id, thereLog)

	// The twin: the valid log is taken, once; a second Import of it is
	// refused and changes nothing.
	if _, err := h.s.Import(t.Context(), valid, blobs); err != nil {
		t.Fatalf("Import of the valid log: %v", err)
	}
	before := snapshotStore(t, h.s)
	if _, err := h.s.Import(t.Context(), valid, blobs); !errors.Is(err, store.ErrExists) {
		t.Fatalf("Import again: %v, want ErrExists", err)
	}
	assertUnchanged(t, "Import again", h.s, before)
}

// testImportConcurrent: of concurrent Imports of one run, exactly one is
// taken; the others are ErrExists.
func testImportConcurrent(t *testing.T, h *harness) {
	sp := newSpec(1)
	evs, blobs := importLog(sp)
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { _, errs[i] = h.s.Import(t.Context(), evs, blobs) })
	}
	wg.Wait()
	taken := 0
	for i, err := range errs {
		switch {
		case err == nil:
			taken++
		case !errors.Is(err, store.ErrExists):
			t.Errorf("Import %d: %v, want nil or ErrExists", i, err)
		}
	}
	if taken != 1 {
		t.Fatalf("%d of %d concurrent Imports were taken, want 1", taken, n)
	}
	assertLog(t, h.s, sp.id, evs)
	assertRuns(t, h.s, store.Filter{Limit: 10}, []string{sp.id})
}
