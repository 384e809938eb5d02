package storetest

// Tests of store.Lifecycle's deletions: a run deleted to its record, the
// refusals, and the records' paging (lifecycle.go has the helpers).

import (
	"errors"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
)

// testLifecycleDelete: a run that ended, live or archived, is erased to its
// record: not loaded, read, listed nor ended, its request ID free again;
// deleting it again returns the record and changes nothing; a reopen keeps
// the records.
func testLifecycleDelete(t *testing.T, h *harness) {
	lc := lifecycleOf(t, h)
	a := newSpec(1)
	a.labels = map[string]string{"team": "red"}
	blob := []byte("the model's input for run 1")
	logA := []*reinv1.Event{runStarted(a), requestedWith(a.id, 2, blob), modelReturned(a.id, 3), statusChanged(a.id, 4, running, completed)}
	mustCreate(t, h.s, logA[0])
	mustAppendOpts(t, h.s, a.id, 1, logA[1:], store.WithBlobs(blobSet(blob)))
	b := newSpec(2)
	b.tenant = "globex"
	endRun(t, h.s, runStarted(b), 2, failed)
	if _, err := lc.Archive(t.Context(), b.id, 4, archiveRecord(b.tenant, b.id)); err != nil {
		t.Fatalf("Archive(%s): %v", b.id, err)
	}
	c := newSpec(3)
	logC := []*reinv1.Event{runStarted(c)}
	mustCreate(t, h.s, logC[0]) // running, never deleted

	// Before: the run reads, and its request ID names it (the twins).
	assertLog(t, h.s, a.id, logA)
	assertBlob(t, h.s, a.id, blob)
	again := spec{id: runID(8), tenant: a.tenant, requestID: a.requestID, goal: "again"}
	if st, created, err := h.s.Create(t.Context(), runStarted(again)); err != nil || created || st.RunID != a.id {
		t.Fatalf("Create with run 1's request ID: run %s, created %v, %v; want run 1", st.RunID, created, err)
	}

	deletedAt := timestamppb.New(epoch.Add(48 * time.Hour))
	// What the caller says of the run itself is replaced by the run's.
	del := &reinv1.RunDeletion{
		RunId: a.id, DeletedBy: "principal:alice", DeletedAt: deletedAt, Reason: "erasure request",
		Tenant: "initech", Status: running, Archived: true,
	}
	wantA := &reinv1.RunDeletion{
		RunId: a.id, Tenant: "acme", DeletedBy: "principal:alice", DeletedAt: deletedAt, Reason: "erasure request",
		Status: completed, Archived: false,
	}
	rec, deleted, err := lc.Delete(t.Context(), del)
	if err != nil || !deleted || !proto.Equal(rec, wantA) {
		t.Fatalf("Delete(%s): %v, deleted %v, %v; want %v, true", a.id, rec, deleted, err, wantA)
	}
	// Deleted later: "newest first" lists it first, whether a backend
	// orders records by deleted_at or as they were stored.
	laterAt := timestamppb.New(deletedAt.AsTime().Add(time.Minute))
	delB := &reinv1.RunDeletion{RunId: b.id, DeletedBy: "policy:retain", DeletedAt: laterAt, Reason: "retention"}
	wantB := &reinv1.RunDeletion{
		RunId: b.id, Tenant: "globex", DeletedBy: "policy:retain", DeletedAt: laterAt, Reason: "retention",
		Status: failed, Archived: true,
	}
	if rec, deleted, err := lc.Delete(t.Context(), delB); err != nil || !deleted || !proto.Equal(rec, wantB) {
		t.Fatalf("Delete(%s, archived): %v, deleted %v, %v; want %v, true", b.id, rec, deleted, err, wantB)
	}

	check := func(when string) {
		t.Helper()
		for _, id := range []string{a.id, b.id} {
			if _, err := h.s.Load(t.Context(), id); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("%s: Load(%s): %v; want ErrNotFound", when, id, err)
			}
			if _, err := h.s.Events(t.Context(), id, 0, all); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("%s: Events(%s): %v; want ErrNotFound", when, id, err)
			}
			if _, err := h.s.Blobs(t.Context(), id, []string{store.BlobHash(blob)}); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("%s: Blobs(%s): %v; want ErrNotFound", when, id, err)
			}
		}
		for id, want := range map[string]*reinv1.RunDeletion{a.id: wantA, b.id: wantB} {
			if got, err := lc.Deletion(t.Context(), id); err != nil || !proto.Equal(got, want) {
				t.Errorf("%s: Deletion(%s): %v, %v; want %v", when, id, got, err, want)
			}
		}
		if got, err := lc.Deletion(t.Context(), c.id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s: Deletion of a run not deleted: %v, %v; want ErrNotFound", when, got, err)
		}
		assertLog(t, h.s, c.id, logC)
		assertEnded(t, h.s, lc, nil)
	}
	check("deleted")
	assertRuns(t, h.s, store.Filter{Limit: 10}, []string{c.id})
	assertRuns(t, h.s, store.Filter{Labels: map[string]string{"team": "red"}, Limit: 10}, nil)

	// Deleted again: the first record, and nothing changes.
	before := snapshotLifecycle(t, h.s, lc)
	for _, id := range []string{a.id, b.id} {
		want := map[string]*reinv1.RunDeletion{a.id: wantA, b.id: wantB}[id]
		rec, deleted, err := lc.Delete(t.Context(), &reinv1.RunDeletion{RunId: id, DeletedBy: "principal:bob", Reason: "again"})
		if err != nil || deleted || !proto.Equal(rec, want) {
			t.Errorf("Delete(%s) again: %v, deleted %v, %v; want %v, false", id, rec, deleted, err, want)
		}
	}
	assertLifecycleUnchanged(t, "Delete again", h.s, lc, before)

	// The request ID is free: Create with it makes a new run.
	st, created, err := h.s.Create(t.Context(), runStarted(again))
	if err != nil || !created || st.RunID != again.id {
		t.Fatalf("Create with the deleted run's request ID: run %s, created %v, %v; want a new run %s", st.RunID, created, err, again.id)
	}
	assertRuns(t, h.s, store.Filter{Limit: 10}, []string{again.id, c.id})

	h.reopen()
	lc = lifecycleOf(t, h)
	check("after reopen")
	assertRuns(t, h.s, store.Filter{Limit: 10}, []string{again.id, c.id})
	if recs, next := mustDeletions(t, lc, "", "", 10); len(recs) != 2 || !proto.Equal(recs[0], wantB) || !proto.Equal(recs[1], wantA) || next != "" {
		t.Errorf("after reopen: Deletions = %v, next %q; want run 2's then run 1's, no next", recs, next)
	}
}

// testLifecycleDeleteRefused: a run that has not ended and an unknown run
// are refused, each changing nothing and leaving no record; the twin, the
// run once it ended, is deleted.
func testLifecycleDeleteRefused(t *testing.T, h *harness) {
	lc := lifecycleOf(t, h)
	r1, r2 := newSpec(1), newSpec(2)
	mustCreate(t, h.s, runStarted(r1))
	mustAppend(t, h.s, r1.id, 1, steps(r1.id, 2, 2)...) // running
	mustCreate(t, h.s, runStarted(r2))
	mustAppend(t, h.s, r2.id, 1, inputRequested(r2.id, 2), statusChanged(r2.id, 3, running, needsIn)) // paused

	for _, tc := range []struct {
		name string
		id   string
		want error
	}{
		{"a running run", r1.id, store.ErrLive},
		{"a paused run", r2.id, store.ErrLive},
		{"an unknown run", runID(99), store.ErrNotFound},
	} {
		before := snapshotLifecycle(t, h.s, lc)
		rec, deleted, err := lc.Delete(t.Context(), &reinv1.RunDeletion{RunId: tc.id, DeletedBy: "principal:alice"})
		if !errors.Is(err, tc.want) || deleted {
			t.Errorf("Delete of %s: %v, deleted %v, %v; want %v", tc.name, rec, deleted, err, tc.want)
		}
		assertLifecycleUnchanged(t, "Delete of "+tc.name, h.s, lc, before)
		if got, err := lc.Deletion(t.Context(), tc.id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Deletion after a refused Delete of %s: %v, %v; want ErrNotFound", tc.name, got, err)
		}
	}

	// The twin: once it ended, it is deleted.
	mustAppend(t, h.s, r1.id, 3, statusChanged(r1.id, 4, running, cancelled))
	rec, deleted, err := lc.Delete(t.Context(), &reinv1.RunDeletion{RunId: r1.id, DeletedBy: "principal:alice"})
	if err != nil || !deleted || rec.GetStatus() != cancelled || rec.GetRunId() != r1.id {
		t.Fatalf("Delete of the run once it ended: %v, deleted %v, %v", rec, deleted, err)
	}
	if _, err := h.s.Load(t.Context(), r1.id); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Load of the deleted run: %v; want ErrNotFound", err)
	}
	assertRuns(t, h.s, store.Filter{Limit: 10}, []string{r2.id})
}

// testLifecycleDeletions: the records come newest first, a page at a time
// by the cursor each page returns, "" after the last; a tenant keeps its
// own; a cursor no call returned is ErrInvalidCursor; a reopen keeps them.
func testLifecycleDeletions(t *testing.T, h *harness) {
	lc := lifecycleOf(t, h)
	const n = 7
	tenants := map[string]string{}
	for i := 1; i <= n; i++ {
		sp := newSpec(i)
		if i%2 == 0 {
			sp.tenant = "globex"
		}
		tenants[sp.id] = sp.tenant
		endRun(t, h.s, runStarted(sp), 0, completed)
	}
	order := []int{3, 1, 7, 2, 5, 4, 6} // the order they are deleted in
	var newest []string                 // newest first
	for k, i := range order {
		id := runID(i)
		_, deleted, err := lc.Delete(t.Context(), &reinv1.RunDeletion{
			RunId: id, DeletedBy: "policy:retain", Reason: "retention",
			DeletedAt: timestamppb.New(epoch.Add(time.Duration(k) * time.Minute)),
		})
		if err != nil || !deleted {
			t.Fatalf("Delete(%s): deleted %v, %v", id, deleted, err)
		}
		newest = append([]string{id}, newest...)
	}

	check := func(when string) {
		t.Helper()
		for _, tenant := range []string{"", "acme", "globex", "initech"} {
			var want []string
			for _, id := range newest {
				if tenant == "" || tenants[id] == tenant {
					want = append(want, id)
				}
			}
			for _, limit := range []int{1, 2, 3, n - 1, n, 100} {
				var got []string
				after, pages := "", 0
				for {
					pages++
					if pages > n+2 {
						t.Fatalf("%s: Deletions(%q) by %d: the cursor never empties", when, tenant, limit)
					}
					recs, next := mustDeletions(t, lc, tenant, after, limit)
					if len(recs) > limit || (next != "" && len(recs) < limit) {
						t.Fatalf("%s: Deletions(%q, %q, %d): %d records, next %q", when, tenant, after, limit, len(recs), next)
					}
					for _, r := range recs {
						got = append(got, r.GetRunId())
						if r.GetTenant() != tenants[r.GetRunId()] {
							t.Errorf("%s: the record of %s names tenant %q, want %q", when, r.GetRunId(), r.GetTenant(), tenants[r.GetRunId()])
						}
						if one, err := lc.Deletion(t.Context(), r.GetRunId()); err != nil || !proto.Equal(one, r) {
							t.Errorf("%s: Deletion(%s) = %v, %v; Deletions holds %v", when, r.GetRunId(), one, err, r)
						}
					}
					if next == "" {
						break
					}
					after = next
				}
				if !slices.Equal(got, want) {
					t.Errorf("%s: Deletions(%q) by %d: %v, want %v", when, tenant, limit, got, want)
				}
				if wantPages := max(1, (len(want)+limit-1)/limit); pages != wantPages {
					t.Errorf("%s: Deletions(%q) by %d: %d pages for %d records, want %d: next must be empty on the last page",
						when, tenant, limit, pages, len(want), wantPages)
				}
			}
		}
		for _, bad := range []string{"not-a-cursor", "-1", "1x"} {
			if recs, next, err := lc.Deletions(t.Context(), "", bad, 10); !errors.Is(err, store.ErrInvalidCursor) {
				t.Errorf("%s: Deletions after %q: %d records, next %q, %v; want ErrInvalidCursor", when, bad, len(recs), next, err)
			}
		}
	}
	check("deleted")
	h.reopen()
	lc = lifecycleOf(t, h)
	check("after reopen")
}
