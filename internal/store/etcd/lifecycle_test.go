package etcd

// Tests of the lifecycle (lifecycle.go) on a real etcd, beyond what the
// conformance suite sees: which keys Archive and Delete leave, one Txn
// each when two servers race, the ended index put in the Txn that ends a
// run, and its backfill at Open.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
)

// finish is the event at seq that completes a running run at time at.
func finish(id string, seq uint64, at time.Time) *reinv1.Event {
	return &reinv1.Event{RunId: id, Sequence: seq, RecordedAt: timestamppb.New(at), Actor: "harness",
		Payload: &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{
			From: reinv1.RunStatus_RUN_STATUS_RUNNING, To: reinv1.RunStatus_RUN_STATUS_COMPLETED, Reason: "test",
			Result: &reinv1.FinalAnswer{Text: "the answer of " + id},
		}}}
}

// endRun creates run id (tenant acme, request "req-<id>", labels), takes
// two steps, the first bringing blobs, and completes it at t0 plus
// endedAfter; it returns the run as stored.
func endRun(t *testing.T, s *Store, id string, endedAfter time.Duration, blobs ...[]byte) runstate.State {
	t.Helper()
	ctx := t.Context()
	ev := started(id)
	ev.GetRunStarted().Contract.Labels = map[string]string{"team": "core"}
	if _, created, err := s.Create(ctx, ev); err != nil || !created {
		t.Fatalf("Create(%s): %v, %v", id, created, err)
	}
	m := map[string][]byte{}
	for _, b := range blobs {
		m[store.BlobHash(b)] = b
	}
	if _, err := s.Append(ctx, id, 1, []*reinv1.Event{step(id, 2, blobs...), step(id, 3)}, store.WithBlobs(m)); err != nil {
		t.Fatalf("Append(%s): %v", id, err)
	}
	if _, err := s.Append(ctx, id, 3, []*reinv1.Event{finish(id, 4, t0.Add(endedAfter))}); err != nil {
		t.Fatalf("complete %s: %v", id, err)
	}
	st, err := s.Load(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func archiveRec(id string) *reinv1.RunArchive {
	return &reinv1.RunArchive{Key: "acme/2030/01/02/" + id + ".rein", Sha256: strings.Repeat("ab", 32), SizeBytes: 1234, ArchivedAt: timestamppb.New(t0.Add(48 * time.Hour))}
}

// namedBy is dump's keys under prefix that hold s.
func namedBy(t *testing.T, prefix, s string) map[string]string {
	t.Helper()
	all := dump(t, shared, prefix)
	maps.DeleteFunc(all, func(k, _ string) bool { return !strings.Contains(k, s) })
	return all
}

// keysOf is the keys under prefix that hold s, less the prefix, sorted.
func keysOf(t *testing.T, prefix, s string) []string {
	t.Helper()
	var out []string
	for _, k := range slices.Sorted(maps.Keys(namedBy(t, prefix, s))) {
		out = append(out, strings.TrimPrefix(k, prefix))
	}
	return out
}

// TestEndedIndex: the append that ends a run puts its entry in the ended
// index in the same Txn (the same ModRevision as the snapshot's), and Ended
// lists the runs oldest end first with their tenant and parent, a page at
// a time. The twin: a run still running, or whose ending append was
// refused, is not listed.
func TestEndedIndex(t *testing.T) {
	ctx := t.Context()
	prefix := prefixOf(t.TempDir())
	s := openShared(t, prefix)
	defer s.Close()
	blob := []byte("an observation")
	late := endRun(t, s, "run-01", 2*time.Hour, blob)
	mustCreate(t, s, "run-02") // stays running
	child := started("run-03")
	child.GetRunStarted().DelegatedBy = &reinv1.DelegatedBy{ParentRunId: "run-01", RootRunId: "run-01", Depth: 1}
	if _, _, err := s.Create(ctx, child); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "run-03", 1, []*reinv1.Event{finish("run-03", 2, t0.Add(time.Hour))}); err != nil {
		t.Fatal(err)
	}
	// A refused ending (a stale version) lists nothing.
	if _, err := s.Append(ctx, "run-02", 7, []*reinv1.Event{finish("run-02", 8, t0)}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a stale ending append: %v, want ErrConflict", err)
	}

	got, err := s.Ended(ctx, "", 10)
	if err != nil {
		t.Fatal(err)
	}
	want := []store.Ended{
		{RunID: "run-03", Tenant: "acme", Parent: "run-01", EndedAt: t0.Add(time.Hour)},
		{RunID: "run-01", Tenant: "acme", EndedAt: t0.Add(2 * time.Hour)},
	}
	if len(got) != len(want) {
		t.Fatalf("Ended = %+v, want %+v", got, want)
	}
	for i := range want {
		g := got[i]
		if g.RunID != want[i].RunID || g.Tenant != want[i].Tenant || g.Parent != want[i].Parent || !g.EndedAt.Equal(want[i].EndedAt) || g.Archived {
			t.Errorf("Ended[%d] = %+v, want %+v", i, g, want[i])
		}
	}
	// One a page: the cursor goes on after the one before.
	var paged []string
	for after := ""; ; {
		page, err := s.Ended(ctx, after, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		paged = append(paged, page[0].RunID)
		after = page[0].Cursor
	}
	if !slices.Equal(paged, []string{"run-03", "run-01"}) {
		t.Fatalf("Ended one a page = %v, want [run-03 run-01]", paged)
	}

	resp, err := shared.Txn(ctx).Then(clientv3.OpGet(s.keys.ended(late)), clientv3.OpGet(s.keys.run("run-01"))).Commit()
	if err != nil {
		t.Fatal(err)
	}
	entry, snap := kvOf(resp, 0), kvOf(resp, 1)
	if entry == nil || entry.ModRevision != snap.ModRevision {
		t.Fatalf("the ended entry of run-01 is %v; want it at the snapshot's revision %d", entry, snap.ModRevision)
	}
}

// TestArchive: Archive leaves the run's stub alone: no event, lease or
// owner key; its snapshot the stub, its contract the labels, its ended
// entry marked. Its log and blobs are then ErrArchived, and an append is
// ErrArchived with nothing stored. The twins: a stale version, a run still
// running, a run archived already and a run never stored are refused, and
// nothing is written.
func TestArchive(t *testing.T) {
	ctx := t.Context()
	prefix := prefixOf(t.TempDir())
	s := openShared(t, prefix)
	defer s.Close()
	blob := []byte("a tool's output")
	st := endRun(t, s, "run-01", time.Hour, blob)
	if _, err := s.Acquire(ctx, "run-01", "server-a"); err != nil { // a lease key to go
		t.Fatal(err)
	}
	mustCreate(t, s, "run-02")

	refusals := []struct {
		name    string
		id      string
		version uint64
		want    error
	}{
		{"stale version", "run-01", st.Version - 1, store.ErrConflict},
		{"running", "run-02", 1, store.ErrLive},
		{"never stored", "run-99", 1, store.ErrNotFound},
	}
	for _, tc := range refusals {
		before := dump(t, shared, prefix)
		if _, err := s.Archive(ctx, tc.id, tc.version, archiveRec(tc.id)); !errors.Is(err, tc.want) {
			t.Fatalf("Archive %s: %v, want %v", tc.name, err, tc.want)
		}
		assertUnchanged(t, "Archive "+tc.name, before, dump(t, shared, prefix))
	}

	rec := archiveRec("run-01")
	stub, err := s.Archive(ctx, "run-01", st.Version, rec)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(stub.Archive, rec) || stub.Version != st.Version || stub.Status != st.Status || stub.Result != nil {
		t.Fatalf("Archive = %+v; want the stub of the run with its record", stub)
	}
	if got := keysOf(t, prefix, "run-01"); !slices.Equal(got, []string{"contract/run-01", s.keys.ended(st)[len(prefix):], "request/acme/req-run-01", "run/run-01"}) {
		t.Fatalf("the keys of the archived run: %q; want its contract, ended entry, request key and snapshot only", got)
	}
	loaded, err := s.Load(ctx, "run-01")
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(loaded.Archive, rec) || loaded.Contract.GetGoal() != "" || loaded.Contract.GetLabels()["team"] != "core" || loaded.Result != nil {
		t.Fatalf("Load of the stub = %+v; want the record, the labels and no content", loaded)
	}
	ended, err := s.Ended(ctx, "", 10)
	if err != nil || len(ended) != 1 || !ended[0].Archived {
		t.Fatalf("Ended = %+v, %v; want run-01 archived", ended, err)
	}
	page, err := s.List(ctx, store.Filter{Limit: 10, Statuses: []reinv1.RunStatus{reinv1.RunStatus_RUN_STATUS_COMPLETED}})
	if err != nil || len(page.Runs) != 1 || page.Runs[0].Archive == nil || len(page.Damaged) > 0 {
		t.Fatalf("List of completed runs = %+v, %v; want the stub", page, err)
	}

	if _, err := s.Events(ctx, "run-01", 0, 10); !errors.Is(err, store.ErrArchived) || !strings.Contains(err.Error(), rec.Key) {
		t.Fatalf("Events of the archived run: %v, want ErrArchived naming %s", err, rec.Key)
	}
	if _, err := s.Blobs(ctx, "run-01", []string{store.BlobHash(blob)}); !errors.Is(err, store.ErrArchived) {
		t.Fatalf("Blobs of the archived run: %v, want ErrArchived", err)
	}
	before := dump(t, shared, prefix)
	if _, err := s.Append(ctx, "run-01", st.Version, steps("run-01", st.Version+1, 1)); !errors.Is(err, store.ErrArchived) {
		t.Fatalf("Append to the archived run: %v, want ErrArchived", err)
	}
	assertUnchanged(t, "an append to an archived run", before, dump(t, shared, prefix))
	if _, err := s.Archive(ctx, "run-01", st.Version, archiveRec("run-01")); !errors.Is(err, store.ErrArchived) {
		t.Fatalf("a second Archive: %v, want ErrArchived", err)
	}
	assertUnchanged(t, "a second Archive", before, dump(t, shared, prefix))
	// The twin of the refused reads: the running run's log and blob read.
	if evs, err := s.Events(ctx, "run-02", 0, 10); err != nil || len(evs) != 1 {
		t.Fatalf("Events of a running run = %d, %v", len(evs), err)
	}
}

// TestArchiveRace: two servers archive each of several runs at once: for
// each, exactly one Archive succeeds and the other is ErrArchived. The
// server that did not archive, whose cache holds the run as it ended, is
// refused an append with ErrArchived; the twin, on a run ended and not
// archived, is the fold's ErrTerminal.
func TestArchiveRace(t *testing.T) {
	ctx := t.Context()
	_, a, b := twoServers(t)
	const runs = 6
	for i := range runs {
		endRun(t, b, fmt.Sprintf("run-%02d", 10+i), time.Duration(i+1)*time.Minute, []byte("shared"))
	}
	for i := range runs {
		id := fmt.Sprintf("run-%02d", 10+i)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for j, s := range []*Store{a, b} {
			wg.Go(func() {
				<-start
				_, errs[j] = s.Archive(ctx, id, 4, archiveRec(id))
			})
		}
		close(start)
		wg.Wait()
		won := 0
		for _, err := range errs {
			switch {
			case err == nil:
				won++
			case !errors.Is(err, store.ErrArchived):
				t.Fatalf("%s: the loser got %v, want ErrArchived", id, err)
			}
		}
		if won != 1 {
			t.Fatalf("%s: %d Archives succeeded, want exactly 1 (%v)", id, won, errs)
		}
	}

	endRun(t, b, "run-20", time.Hour, []byte("shared"))
	if _, err := b.Append(ctx, "run-20", 4, steps("run-20", 5, 1)); !errors.Is(err, runstate.ErrTerminal) {
		t.Fatalf("Append to an ended run: %v, want ErrTerminal", err)
	}
	if _, err := a.Archive(ctx, "run-20", 4, archiveRec("run-20")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Append(ctx, "run-20", 4, steps("run-20", 5, 1)); !errors.Is(err, store.ErrArchived) {
		t.Fatalf("Append, through the server that cached it, to a run another archived: %v, want ErrArchived", err)
	}
}

// TestDelete: Delete leaves no key that names the run but P deleted/<id>
// (its record is keyed by sequence), and its request key only when that
// names another run; a
// blob it shared with another run still reads through that one. A second
// Delete returns the record and writes nothing. The twins: a running run
// is ErrLive and a run never stored ErrNotFound, writing nothing; an
// archived stub is deleted too, its record saying so.
func TestDelete(t *testing.T) {
	ctx := t.Context()
	prefix := prefixOf(t.TempDir())
	s := openShared(t, prefix)
	defer s.Close()
	blob := []byte("an observation both runs brought")
	endRun(t, s, "run-01", time.Hour, blob)
	if _, err := s.Acquire(ctx, "run-01", "server-a"); err != nil {
		t.Fatal(err)
	}
	endRun(t, s, "run-02", 2*time.Hour, blob)
	mustCreate(t, s, "run-03")
	keep := namedBy(t, prefix, "run-02")

	for _, tc := range []struct {
		id   string
		want error
	}{{"run-03", store.ErrLive}, {"run-99", store.ErrNotFound}} {
		before := dump(t, shared, prefix)
		if _, _, err := s.Delete(ctx, &reinv1.RunDeletion{RunId: tc.id}); !errors.Is(err, tc.want) {
			t.Fatalf("Delete(%s): %v, want %v", tc.id, err, tc.want)
		}
		assertUnchanged(t, "Delete of "+tc.id, before, dump(t, shared, prefix))
	}
	if _, err := s.Deletion(ctx, "run-01"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Deletion of a run not deleted: %v, want ErrNotFound", err)
	}

	d := &reinv1.RunDeletion{RunId: "run-01", DeletedBy: "principal:alice", DeletedAt: timestamppb.New(t0.Add(72 * time.Hour)), Reason: "asked"}
	rec, deleted, err := s.Delete(ctx, d)
	if err != nil || !deleted {
		t.Fatalf("Delete = %v, %v", deleted, err)
	}
	if rec.GetTenant() != "acme" || rec.GetStatus() != reinv1.RunStatus_RUN_STATUS_COMPLETED || rec.GetArchived() || rec.GetReason() != "asked" {
		t.Fatalf("the record = %v", rec)
	}
	if got := keysOf(t, prefix, "run-01"); !slices.Equal(got, []string{"deleted/run-01"}) {
		t.Errorf("after Delete, the keys naming the run are %q; want only its entry in the deletions' index", got)
	}
	if got, err := readBlob(ctx, s, "run-02", store.BlobHash(blob)); err != nil || string(got) != string(blob) {
		t.Fatalf("the other run's blob after Delete = %q, %v", got, err)
	}
	assertUnchanged(t, "Delete of another run", keep, namedBy(t, prefix, "run-02"))
	for what, err := range map[string]error{
		"Load":   func() error { _, err := s.Load(ctx, "run-01"); return err }(),
		"Events": func() error { _, err := s.Events(ctx, "run-01", 0, 10); return err }(),
	} {
		if !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s of the deleted run: %v, want ErrNotFound", what, err)
		}
	}
	if got, err := s.Deletion(ctx, "run-01"); err != nil || !proto.Equal(got, rec) {
		t.Fatalf("Deletion = %v, %v; want %v", got, err, rec)
	}
	before := dump(t, shared, prefix)
	again, deleted, err := s.Delete(ctx, &reinv1.RunDeletion{RunId: "run-01", Reason: "again"})
	if err != nil || deleted || !proto.Equal(again, rec) {
		t.Fatalf("a second Delete = %v, %v, %v; want the first record, false", again, deleted, err)
	}
	assertUnchanged(t, "a second Delete", before, dump(t, shared, prefix))
	if page, err := s.List(ctx, store.Filter{Limit: 10}); err != nil || len(page.Runs) != 2 || len(page.Damaged) > 0 {
		t.Fatalf("List after Delete = %+v, %v; want the two other runs", page, err)
	}

	// An archived stub, whose request key names another run.
	if _, err := s.Archive(ctx, "run-02", 4, archiveRec("run-02")); err != nil {
		t.Fatal(err)
	}
	rk := s.keys.request("acme", "req-run-02")
	if _, err := shared.Put(ctx, rk, "run-03"); err != nil {
		t.Fatal(err)
	}
	rec, deleted, err = s.Delete(ctx, &reinv1.RunDeletion{RunId: "run-02"})
	if err != nil || !deleted || !rec.GetArchived() {
		t.Fatalf("Delete of the stub = %v, %v, %v; want its record, archived", rec, deleted, err)
	}
	if got := keysOf(t, prefix, "run-02"); !slices.Equal(got, []string{"deleted/run-02", strings.TrimPrefix(rk, prefix)}) {
		t.Errorf("after Delete of the stub, the keys naming it are %q; want its entry in the deletions' index and run-03's request key", got)
	}
	if resp, err := shared.Get(ctx, rk); err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "run-03" {
		t.Fatalf("the request key naming another run after Delete: %v, %v; want it kept", resp, err)
	}
}

// TestDeleteRace: two servers delete each of several runs at once: for
// each, exactly one is told it deleted the run, and both get one record.
func TestDeleteRace(t *testing.T) {
	ctx := t.Context()
	prefix, a, b := twoServers(t)
	const runs = 6
	for i := range runs {
		endRun(t, a, fmt.Sprintf("run-%02d", 10+i), time.Minute, []byte("shared"))
	}
	for i := range runs {
		id := fmt.Sprintf("run-%02d", 10+i)
		recs := make([]*reinv1.RunDeletion, 2)
		dels := make([]bool, 2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for j, s := range []*Store{a, b} {
			wg.Go(func() {
				<-start
				recs[j], dels[j], errs[j] = s.Delete(ctx, &reinv1.RunDeletion{RunId: id, DeletedBy: fmt.Sprint("server-", j)})
			})
		}
		close(start)
		wg.Wait()
		if errs[0] != nil || errs[1] != nil || dels[0] == dels[1] || !proto.Equal(recs[0], recs[1]) {
			t.Fatalf("%s: Delete on two servers = %v/%v, %v/%v, %v/%v; want one deleted, one record", id, recs[0], recs[1], dels[0], dels[1], errs[0], errs[1])
		}
		if got := keysOf(t, prefix, id); !slices.Equal(got, []string{"deleted/" + id}) {
			t.Fatalf("%s: the keys naming the deleted run are %q", id, got)
		}
	}
}

// TestDeletions: the records come newest first, a page at a time, those of
// one tenant when asked; the twin: a page token no call returned is
// ErrInvalidCursor.
func TestDeletions(t *testing.T) {
	ctx := t.Context()
	s := openShared(t, prefixOf(t.TempDir()))
	defer s.Close()
	var newestFirst, others []string
	for i := range 5 {
		id := fmt.Sprintf("run-%02d", i)
		ev := started(id)
		if i%2 == 1 {
			ev.GetRunStarted().Tenant = "other"
		}
		if _, _, err := s.Create(ctx, ev); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Append(ctx, id, 1, []*reinv1.Event{finish(id, 2, t0)}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.Delete(ctx, &reinv1.RunDeletion{RunId: id, DeletedAt: timestamppb.New(t0.Add(time.Duration(i) * time.Minute))}); err != nil {
			t.Fatal(err)
		}
		newestFirst = append([]string{id}, newestFirst...)
		if i%2 == 1 {
			others = append([]string{id}, others...)
		}
	}
	for _, tc := range []struct {
		tenant string
		want   []string
	}{{"", newestFirst}, {"other", others}, {"nobody", nil}} {
		for _, limit := range []int{1, 2, 10} {
			var got []string
			pages := 0
			for after := ""; ; pages++ {
				recs, next, err := s.Deletions(ctx, tc.tenant, after, limit)
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range recs {
					got = append(got, r.GetRunId())
				}
				if next == "" {
					break
				}
				if len(recs) != limit {
					t.Fatalf("tenant %q, limit %d: a page of %d with a next page", tc.tenant, limit, len(recs))
				}
				after = next
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("Deletions of tenant %q, %d a page = %v, want %v", tc.tenant, limit, got, tc.want)
			}
			if wantPages := max(0, (len(tc.want)-1)/limit); pages != wantPages {
				t.Errorf("tenant %q, limit %d: %d further pages, want %d", tc.tenant, limit, pages, wantPages)
			}
		}
	}
	for _, bad := range []string{"zz", "-1", "0123456789abcdeg", "0123456789abcdef/run-01", "0123456789abcdef0"} {
		if _, _, err := s.Deletions(ctx, "", bad, 10); !errors.Is(err, store.ErrInvalidCursor) {
			t.Errorf("Deletions after %q: %v, want ErrInvalidCursor", bad, err)
		}
	}
}

// TestBackfillEnded: a prefix whose ended runs have no entries (an older
// rein's) gets them at Open, marked archived where they are, and the mark
// that it did; opened again, nothing is written. The twin: with the mark
// there, Open reads nothing more and puts back no entry.
func TestBackfillEnded(t *testing.T) {
	ctx := t.Context()
	prefix := prefixOf(t.TempDir())
	s := openShared(t, prefix)
	endRun(t, s, "run-01", time.Hour, []byte("x"))
	endRun(t, s, "run-02", 2*time.Hour, []byte("y"))
	mustCreate(t, s, "run-03")
	if _, err := s.Archive(ctx, "run-02", 4, archiveRec("run-02")); err != nil {
		t.Fatal(err)
	}
	want, err := s.Ended(ctx, "", 10)
	if err != nil || len(want) != 2 {
		t.Fatalf("Ended = %v, %v", want, err)
	}
	s.Close()

	// As an older rein left it: no ended index, no mark.
	forget := func() {
		t.Helper()
		if _, err := shared.Delete(ctx, s.keys.endedRuns(), clientv3.WithPrefix()); err != nil {
			t.Fatal(err)
		}
	}
	forget()
	if _, err := shared.Delete(ctx, s.keys.endedMark()); err != nil {
		t.Fatal(err)
	}
	s = openShared(t, prefix)
	got, err := s.Ended(ctx, "", 10)
	if err != nil || len(got) != len(want) {
		t.Fatalf("Ended after the backfill = %+v, %v; want %+v", got, err, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("Ended[%d] after the backfill = %+v, want %+v", i, got[i], want[i])
		}
	}
	s.Close()
	before := dump(t, shared, prefix)
	openShared(t, prefix).Close()
	assertUnchanged(t, "Open of a prefix backfilled", before, dump(t, shared, prefix))

	forget()
	before = dump(t, shared, prefix)
	s = openShared(t, prefix)
	defer s.Close()
	assertUnchanged(t, "Open of a prefix marked backfilled", before, dump(t, shared, prefix))
	if got, err := s.Ended(ctx, "", 10); err != nil || len(got) != 0 {
		t.Fatalf("Ended with the mark and no entries = %v, %v; want none put back", got, err)
	}
}

// TestLifecycleClosed: every lifecycle call on a closed store is
// ErrClosed.
func TestLifecycleClosed(t *testing.T) {
	ctx := context.Background()
	s := openShared(t, prefixOf(t.TempDir()))
	s.Close()
	calls := map[string]error{
		"Ended":     func() error { _, err := s.Ended(ctx, "", 1); return err }(),
		"Archive":   func() error { _, err := s.Archive(ctx, "run-01", 1, archiveRec("run-01")); return err }(),
		"Delete":    func() error { _, _, err := s.Delete(ctx, &reinv1.RunDeletion{RunId: "run-01"}); return err }(),
		"Deletion":  func() error { _, err := s.Deletion(ctx, "run-01"); return err }(),
		"Deletions": func() error { _, _, err := s.Deletions(ctx, "", "", 1); return err }(),
	}
	for name, err := range calls {
		if !errors.Is(err, store.ErrClosed) {
			t.Errorf("%s on a closed store: %v, want ErrClosed", name, err)
		}
	}
}
