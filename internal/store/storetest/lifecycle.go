package storetest

// Tests of store.Lifecycle, for the backends that implement it (the others
// skip them): the ended index, a run archived to its stub, a run deleted to
// its record, and the deletion records' paging. Each refusal changes nothing
// (snapshotLifecycle, assertLifecycleUnchanged), and each has its twin that
// is taken.

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
)

// lifecycleOf is the harness's store as a store.Lifecycle; the test is
// skipped when the backend does not implement it.
func lifecycleOf(t *testing.T, h *harness) store.Lifecycle {
	t.Helper()
	lc, ok := h.s.(store.Lifecycle)
	if !ok {
		t.Skipf("%T does not implement store.Lifecycle", h.s)
	}
	return lc
}

// endRun creates the run that started begins, appends n steps (n even, so
// no model call is left in flight) and then its end, status to, at
// sequence n+2: the run ends at epoch + (n+2) seconds. It returns the log.
func endRun(t *testing.T, s store.Store, started *reinv1.Event, n int, to reinv1.RunStatus) []*reinv1.Event {
	t.Helper()
	id := started.GetRunId()
	log := append([]*reinv1.Event{started}, steps(id, 2, n)...)
	log = append(log, statusChanged(id, uint64(n)+2, running, to))
	mustCreate(t, s, started)
	mustAppend(t, s, id, 1, log[1:]...)
	return log
}

// childStarted is the run_started of sp delegated by run parent.
func childStarted(sp spec, parent string) *reinv1.Event {
	ev := runStarted(sp)
	ev.GetRunStarted().DelegatedBy = &reinv1.DelegatedBy{
		ParentRunId: parent, RootRunId: parent, Sequence: 2, Depth: 1,
	}
	return ev
}

// archiveRecord is where an archiver would have put run id's export.
func archiveRecord(tenant, id string) *reinv1.RunArchive {
	return &reinv1.RunArchive{
		Key:        fmt.Sprintf("%s/2030/01/02/%s.rein", tenant, id),
		Sha256:     store.BlobHash([]byte("export of " + id)),
		SizeBytes:  4096,
		ArchivedAt: timestamppb.New(epoch.Add(24 * time.Hour)),
	}
}

func mustEnded(t *testing.T, lc store.Lifecycle, after string, limit int) []store.Ended {
	t.Helper()
	got, err := lc.Ended(t.Context(), after, limit)
	if err != nil {
		t.Fatalf("Ended(%q, %d): %v", after, limit, err)
	}
	return got
}

func mustDeletions(t *testing.T, lc store.Lifecycle, tenant, after string, limit int) ([]*reinv1.RunDeletion, string) {
	t.Helper()
	recs, next, err := lc.Deletions(t.Context(), tenant, after, limit)
	if err != nil {
		t.Fatalf("Deletions(%q, %q, %d): %v", tenant, after, limit, err)
	}
	return recs, next
}

func endedIDs(es []store.Ended) []string {
	ids := make([]string, len(es))
	for i, e := range es {
		ids[i] = e.RunID
	}
	return ids
}

// endedLine is an entry of the ended index, to compare and print.
func endedLine(e store.Ended) string {
	return fmt.Sprintf("%x %s tenant=%s parent=%s at=%d archived=%v",
		e.Cursor, e.RunID, e.Tenant, e.Parent, e.EndedAt.UnixNano(), e.Archived)
}

// wantEnded is an entry Ended must hold.
type wantEnded struct {
	id, tenant, parent string
	archived           bool
}

// assertEnded fails unless the ended index is want, in order, each run
// ended when it was last updated, and paging through it by cursor with any
// limit gives the same runs.
func assertEnded(t *testing.T, s store.Store, lc store.Lifecycle, want []wantEnded) {
	t.Helper()
	got := mustEnded(t, lc, "", all)
	var wantIDs []string
	for _, w := range want {
		wantIDs = append(wantIDs, w.id)
	}
	if !slices.Equal(endedIDs(got), wantIDs) {
		t.Fatalf("Ended lists %v, want %v", endedIDs(got), wantIDs)
	}
	for i, e := range got {
		w := want[i]
		if e.Tenant != w.tenant || e.Parent != w.parent || e.Archived != w.archived || e.Cursor == "" {
			t.Errorf("Ended[%d] = %s; want tenant %q, parent %q, archived %v and a cursor", i, endedLine(e), w.tenant, w.parent, w.archived)
		}
		if st := mustLoad(t, s, e.RunID); !e.EndedAt.Equal(st.UpdatedAt) {
			t.Errorf("Ended[%d] (%s) ended at %v, but the run was last updated at %v", i, e.RunID, e.EndedAt, st.UpdatedAt)
		}
	}
	for limit := 1; limit <= len(want)+1; limit++ {
		var paged []string
		after := ""
		for pages := 0; ; pages++ {
			if pages > len(want)+1 {
				t.Fatalf("Ended by %d: more than %d pages", limit, len(want)+1)
			}
			page := mustEnded(t, lc, after, limit)
			if len(page) > limit {
				t.Fatalf("Ended(%x, %d): %d runs", after, limit, len(page))
			}
			paged = append(paged, endedIDs(page)...)
			if len(page) < limit {
				break
			}
			after = page[len(page)-1].Cursor
		}
		if !slices.Equal(paged, wantIDs) {
			t.Errorf("Ended by %d lists %v, want %v", limit, paged, wantIDs)
		}
	}
}

// lifecycleSnapshot is what a refused lifecycle request must leave as it
// was: each run's state and (unless archived) its log, the ended index, the
// deletion records and the change log's head.
type lifecycleSnapshot struct {
	runs      []string
	states    map[string]*reinv1.Run
	logs      map[string][]*reinv1.Event
	ended     []string
	deletions []*reinv1.RunDeletion
	changes   uint64
}

func snapshotLifecycle(t *testing.T, s store.Store, lc store.Lifecycle) lifecycleSnapshot {
	t.Helper()
	page, err := s.List(t.Context(), store.Filter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	snap := lifecycleSnapshot{states: map[string]*reinv1.Run{}, logs: map[string][]*reinv1.Event{}}
	for _, listed := range page.Runs {
		id := listed.RunID
		st := mustLoad(t, s, id)
		snap.runs = append(snap.runs, id)
		snap.states[id] = st.Proto(true)
		if st.Archive == nil {
			snap.logs[id] = mustEvents(t, s, id, 0, all)
		}
	}
	for _, e := range mustEnded(t, lc, "", all) {
		snap.ended = append(snap.ended, endedLine(e))
	}
	snap.deletions, _ = mustDeletions(t, lc, "", "", all)
	if _, snap.changes, err = s.Changes(t.Context(), 0, 0); err != nil {
		t.Fatal(err)
	}
	return snap
}

// assertLifecycleUnchanged fails unless s holds what before saw.
func assertLifecycleUnchanged(t *testing.T, what string, s store.Store, lc store.Lifecycle, before lifecycleSnapshot) {
	t.Helper()
	after := snapshotLifecycle(t, s, lc)
	if !slices.Equal(after.runs, before.runs) {
		t.Fatalf("%s: the store holds runs %v, had %v", what, after.runs, before.runs)
	}
	for _, id := range before.runs {
		if !proto.Equal(after.states[id], before.states[id]) {
			t.Errorf("%s: run %s is\n %v\nwas\n %v", what, id, after.states[id], before.states[id])
		}
		if log, ok := before.logs[id]; ok {
			assertLog(t, s, id, log)
		} else if _, ok := after.logs[id]; ok {
			t.Errorf("%s: archived run %s has a log again", what, id)
		}
	}
	if !slices.Equal(after.ended, before.ended) {
		t.Errorf("%s: the ended index is\n %v\nwas\n %v", what, after.ended, before.ended)
	}
	if !slices.EqualFunc(after.deletions, before.deletions, func(a, b *reinv1.RunDeletion) bool { return proto.Equal(a, b) }) {
		t.Errorf("%s: the deletion records are\n %v\nwere\n %v", what, after.deletions, before.deletions)
	}
	if after.changes != before.changes {
		t.Errorf("%s: the change log's head moved from %d to %d", what, before.changes, after.changes)
	}
}

// assertStub fails unless got is the stub of the run that was live (loaded
// with its contract) archived with rec: what ListRuns shows, and no content.
func assertStub(t *testing.T, what string, got, live runstate.State, rec *reinv1.RunArchive) {
	t.Helper()
	if !proto.Equal(got.Archive, rec) {
		t.Errorf("%s: archive record %v, want %v", what, got.Archive, rec)
	}
	if got.RunID != live.RunID || got.Status != live.Status || got.Version != live.Version || got.Tenant != live.Tenant ||
		got.RequestID != live.RequestID || got.Principal != live.Principal {
		t.Errorf("%s: run %s %v v%d tenant %q request %q principal %q; want %s %v v%d tenant %q request %q principal %q", what,
			got.RunID, got.Status, got.Version, got.Tenant, got.RequestID, got.Principal,
			live.RunID, live.Status, live.Version, live.Tenant, live.RequestID, live.Principal)
	}
	if got.Steps != live.Steps || got.InputTokens != live.InputTokens || got.OutputTokens != live.OutputTokens ||
		got.ToolCalls != live.ToolCalls || got.CostUSD != live.CostUSD {
		t.Errorf("%s: usage %d steps %d/%d tokens %d calls $%v; want %d steps %d/%d tokens %d calls $%v", what,
			got.Steps, got.InputTokens, got.OutputTokens, got.ToolCalls, got.CostUSD,
			live.Steps, live.InputTokens, live.OutputTokens, live.ToolCalls, live.CostUSD)
	}
	if !got.CreatedAt.Equal(live.CreatedAt) || !got.UpdatedAt.Equal(live.UpdatedAt) {
		t.Errorf("%s: created %v updated %v, want %v and %v", what, got.CreatedAt, got.UpdatedAt, live.CreatedAt, live.UpdatedAt)
	}
	if !proto.Equal(got.DelegatedBy, live.DelegatedBy) {
		t.Errorf("%s: delegated by %v, want %v", what, got.DelegatedBy, live.DelegatedBy)
	}
	if !maps.Equal(got.Contract.GetLabels(), live.Contract.GetLabels()) {
		t.Errorf("%s: labels %v, want %v", what, got.Contract.GetLabels(), live.Contract.GetLabels())
	}
	if got.Contract.GetGoal() != "" || got.Result != nil || got.LastError != "" || got.Pending != nil || got.ApprovedWrite != nil {
		t.Errorf("%s: the stub keeps content: goal %q, result %v, error %q, pending %v, approved write %v", what,
			got.Contract.GetGoal(), got.Result, got.LastError, got.Pending, got.ApprovedWrite)
	}
	// The rest of what the run shows (without its contract): store.Stub's.
	if g, w := got.Proto(false), store.Stub(live, rec).Proto(false); !proto.Equal(g, w) {
		t.Errorf("%s: the stub is\n %v\nwant\n %v", what, g, w)
	}
}

// testLifecycleEnded: a run is listed once its status is terminal, by
// Append or Import, oldest end first (a tie by run ID), with its tenant,
// parent and end time; a running or paused run is not; paging by cursor and
// a reopen keep the list.
func testLifecycleEnded(t *testing.T, h *harness) {
	lc := lifecycleOf(t, h)
	// Each run ends at epoch + its last sequence in seconds, so the order
	// of their ends is not the order they were created in.
	a := newSpec(1)
	endRun(t, h.s, runStarted(a), 8, completed) // ends at 10s
	b := newSpec(2)
	b.tenant = "globex"
	mustCreate(t, h.s, runStarted(b))
	mustAppend(t, h.s, b.id, 1, steps(b.id, 2, 2)...) // running
	c := newSpec(3)
	mustCreate(t, h.s, runStarted(c))
	mustAppend(t, h.s, c.id, 1, inputRequested(c.id, 2), statusChanged(c.id, 3, running, needsIn)) // paused
	d := newSpec(4)
	d.tenant = "globex"
	endRun(t, h.s, childStarted(d, b.id), 0, failed) // b's child, ends at 2s
	e := newSpec(5)
	endRun(t, h.s, runStarted(e), 2, cancelled) // ends at 4s
	f := newSpec(6)
	endRun(t, h.s, runStarted(f), 2, completed) // ends at 4s too: after e, by run ID
	g := newSpec(7)
	imported, blobs := importLog(g)
	imported = append(imported, statusChanged(g.id, 8, needsIn, cancelled)) // ends at 8s
	if _, err := h.s.Import(t.Context(), imported, blobs); err != nil {
		t.Fatalf("Import(%s): %v", g.id, err)
	}
	want := []wantEnded{
		{id: d.id, tenant: "globex", parent: b.id},
		{id: e.id, tenant: "acme"},
		{id: f.id, tenant: "acme"},
		{id: g.id, tenant: "acme"},
		{id: a.id, tenant: "acme"},
	}
	assertEnded(t, h.s, lc, want)
	if rest := mustEnded(t, lc, mustEnded(t, lc, "", all)[len(want)-1].Cursor, all); len(rest) != 0 {
		t.Errorf("Ended after the last one's cursor: %v, want none", endedIDs(rest))
	}

	// The twin of the running run not listed: once it ends, it is, at its
	// end (12s, the last).
	mustAppend(t, h.s, b.id, 3, append(steps(b.id, 4, 8), statusChanged(b.id, 12, running, completed))...)
	want = append(want, wantEnded{id: b.id, tenant: "globex"})
	assertEnded(t, h.s, lc, want)
	h.reopen()
	assertEnded(t, h.s, lifecycleOf(t, h), want)
}

// testLifecycleArchive: a run that ended becomes its stub; its log and blobs
// are ErrArchived, an append is refused, and it is still listed, found by
// its request ID, and in the ended index as archived, across a reopen.
func testLifecycleArchive(t *testing.T, h *harness) {
	lc := lifecycleOf(t, h)
	a := newSpec(1)
	a.labels = map[string]string{"team": "red"}
	blob := []byte("the model's input for run 1")
	logA := []*reinv1.Event{runStarted(a), requestedWith(a.id, 2, blob), modelReturned(a.id, 3), statusChanged(a.id, 4, running, completed)}
	mustCreate(t, h.s, logA[0])
	mustAppendOpts(t, h.s, a.id, 1, logA[1:], store.WithBlobs(blobSet(blob)))
	b := newSpec(2)
	b.tenant = "globex"
	logB := endRun(t, h.s, childStarted(b, a.id), 2, failed)
	c := newSpec(3)
	c.labels = map[string]string{"team": "red"}
	mustCreate(t, h.s, runStarted(c)) // running, never archived

	// Before: the runs read whole (the twins of the refusals below).
	assertLog(t, h.s, a.id, logA)
	assertBlob(t, h.s, a.id, blob)
	liveA, liveB := mustLoad(t, h.s, a.id), mustLoad(t, h.s, b.id)
	if liveA.Result == nil || liveB.LastError == "" || liveA.Contract.GetGoal() == "" {
		t.Fatalf("fixture: run 1 result %v goal %q, run 2 error %q: want content to lose", liveA.Result, liveA.Contract.GetGoal(), liveB.LastError)
	}

	recA := archiveRecord(a.tenant, a.id)
	stub, err := lc.Archive(t.Context(), a.id, liveA.Version, recA)
	if err != nil {
		t.Fatalf("Archive(%s): %v", a.id, err)
	}
	assertStub(t, "Archive's state", stub, liveA, recA)
	recB := archiveRecord(b.tenant, b.id)

	check := func(when string, bArchived bool) {
		t.Helper()
		assertStub(t, when+": Load", mustLoad(t, h.s, a.id), liveA, recA)
		if evs, err := h.s.Events(t.Context(), a.id, 0, all); !errors.Is(err, store.ErrArchived) {
			t.Errorf("%s: Events of the archived run: %d events, %v; want ErrArchived", when, len(evs), err)
		}
		if _, err := h.s.Blobs(t.Context(), a.id, []string{store.BlobHash(blob)}); !errors.Is(err, store.ErrArchived) {
			t.Errorf("%s: Blobs of the archived run: %v; want ErrArchived", when, err)
		}
		if bArchived {
			assertStub(t, when+": Load", mustLoad(t, h.s, b.id), liveB, recB)
		} else {
			assertLog(t, h.s, b.id, logB)
		}
		// Listed as it was, by status, labels and tenant, as its stub.
		assertRuns(t, h.s, store.Filter{Limit: 10}, []string{c.id, b.id, a.id})
		assertRuns(t, h.s, store.Filter{Statuses: []reinv1.RunStatus{completed}, Limit: 10}, []string{a.id})
		assertRuns(t, h.s, store.Filter{Labels: map[string]string{"team": "red"}, Limit: 10}, []string{c.id, a.id})
		assertRuns(t, h.s, store.Filter{Tenant: "acme", Limit: 10}, []string{c.id, a.id})
		assertRuns(t, h.s, store.Filter{Statuses: []reinv1.RunStatus{failed}, Tenant: "globex", Limit: 10}, []string{b.id})
		page, err := h.s.List(t.Context(), store.Filter{Statuses: []reinv1.RunStatus{completed}, Labels: map[string]string{"team": "red"}, Limit: 10})
		if err != nil || len(page.Runs) != 1 {
			t.Fatalf("%s: List: %d runs, %v; want the archived one", when, len(page.Runs), err)
		}
		assertStub(t, when+": List", page.Runs[0], liveA, recA)
		// Both ended at 4s: by run ID.
		assertEnded(t, h.s, lc, []wantEnded{
			{id: a.id, tenant: "acme", archived: true},
			{id: b.id, tenant: "globex", parent: a.id, archived: bArchived},
		})
		// Its request ID still names it.
		again := spec{id: runID(9), tenant: a.tenant, requestID: a.requestID, goal: "again"}
		st, created, err := h.s.Create(t.Context(), runStarted(again))
		if err != nil || created {
			t.Fatalf("%s: Create with the archived run's request ID: created %v, %v; want its stub", when, created, err)
		}
		assertStub(t, when+": Create", st, liveA, recA)
	}
	check("archived", false)

	// An append to the stub is refused, by the store or the fold, and
	// stores nothing.
	before := snapshotLifecycle(t, h.s, lc)
	_, err = h.s.Append(t.Context(), a.id, liveA.Version, []*reinv1.Event{step(a.id, liveA.Version+1)}, store.WithBlobs(blobSet([]byte("more"))))
	if !errors.Is(err, store.ErrArchived) && !errors.Is(err, runstate.ErrTerminal) {
		t.Errorf("Append to the archived run: %v; want ErrArchived or ErrTerminal", err)
	}
	assertLifecycleUnchanged(t, "Append to the archived run", h.s, lc, before)

	if _, err := lc.Archive(t.Context(), b.id, liveB.Version, recB); err != nil {
		t.Fatalf("Archive(%s): %v", b.id, err)
	}
	check("both archived", true)
	h.reopen()
	lc = lifecycleOf(t, h)
	check("after reopen", true)
}

// testLifecycleArchiveRefused: a run that has not ended, a stale version, an
// unknown run and a run archived already are refused, each changing
// nothing; the twins, the run at its version once it ended, are taken.
func testLifecycleArchiveRefused(t *testing.T, h *harness) {
	lc := lifecycleOf(t, h)
	r1, r2, r3 := newSpec(1), newSpec(2), newSpec(3)
	mustCreate(t, h.s, runStarted(r1))
	mustAppend(t, h.s, r1.id, 1, steps(r1.id, 2, 2)...) // running, v3
	mustCreate(t, h.s, runStarted(r2))
	mustAppend(t, h.s, r2.id, 1, inputRequested(r2.id, 2), statusChanged(r2.id, 3, running, needsIn)) // paused, v3
	endRun(t, h.s, runStarted(r3), 2, completed)                                                      // v4

	for _, tc := range []struct {
		name    string
		id      string
		version uint64
		want    error
	}{
		{"a running run", r1.id, 3, store.ErrLive},
		{"a paused run", r2.id, 3, store.ErrLive},
		{"a stale version", r3.id, 3, store.ErrConflict},
		{"a version ahead", r3.id, 5, store.ErrConflict},
		{"an unknown run", runID(99), 1, store.ErrNotFound},
	} {
		before := snapshotLifecycle(t, h.s, lc)
		if _, err := lc.Archive(t.Context(), tc.id, tc.version, archiveRecord("acme", tc.id)); !errors.Is(err, tc.want) {
			t.Errorf("Archive of %s: %v; want %v", tc.name, err, tc.want)
		}
		assertLifecycleUnchanged(t, "Archive of "+tc.name, h.s, lc, before)
	}

	// The twins: the ended run at its version; the running one once it
	// ended.
	live3 := mustLoad(t, h.s, r3.id)
	rec3 := archiveRecord("acme", r3.id)
	if _, err := lc.Archive(t.Context(), r3.id, 4, rec3); err != nil {
		t.Fatalf("Archive(%s at its version): %v", r3.id, err)
	}
	mustAppend(t, h.s, r1.id, 3, statusChanged(r1.id, 4, running, cancelled))
	live1 := mustLoad(t, h.s, r1.id)
	rec1 := archiveRecord("acme", r1.id)
	st, err := lc.Archive(t.Context(), r1.id, 4, rec1)
	if err != nil {
		t.Fatalf("Archive(%s once it ended): %v", r1.id, err)
	}
	assertStub(t, "Archive once it ended", st, live1, rec1)

	// Archived twice: refused, and the stub keeps its first record.
	before := snapshotLifecycle(t, h.s, lc)
	if _, err := lc.Archive(t.Context(), r3.id, 4, archiveRecord("elsewhere", r3.id)); !errors.Is(err, store.ErrArchived) {
		t.Errorf("Archive of an archived run: %v; want ErrArchived", err)
	}
	assertLifecycleUnchanged(t, "Archive of an archived run", h.s, lc, before)
	assertStub(t, "Load after a second Archive", mustLoad(t, h.s, r3.id), live3, rec3)
}
