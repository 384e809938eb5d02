package lifecycle_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/archive"
	"github.com/reinhq/rein/internal/lifecycle"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/store/bolt"
)

// marker is content every test run carries, to grep the files for.
const marker = "MARKER-7f3a9c"

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

type fixture struct {
	t      *testing.T
	db     *bolt.Store
	path   string
	arch   *archive.Archive
	dir    string
	s      *lifecycle.Store
	k      *lifecycle.Keeper
	now    time.Time
	policy lifecycle.Policy
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	return newFixtureAt(t, "")
}

// newFixtureAt archives to url, or to a directory of the test's when it is
// "".
func newFixtureAt(t *testing.T, url string) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{t: t, path: filepath.Join(dir, "rein.db"), dir: filepath.Join(dir, "archive"), now: t0.Add(time.Hour)}
	if url == "" {
		url = "file://" + filepath.ToSlash(f.dir)
	}
	db, err := bolt.Open(f.path, bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	a, err := archive.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	f.db, f.arch = db, a
	f.s = lifecycle.NewStore(db, a)
	f.k = &lifecycle.Keeper{Store: f.s, Policy: func(string) lifecycle.Policy { return f.policy }, Clock: func() time.Time { return f.now }}
	return f
}

func ev(id string, seq uint64) *reinv1.Event {
	return &reinv1.Event{RunId: id, Sequence: seq, RecordedAt: timestamppb.New(t0.Add(time.Duration(seq) * time.Second)), Actor: "harness"}
}

// run stores a run that ends completed (or stays running), its goal and
// answer carrying the marker; parent makes it a child, and children are
// those it delegated to (and saw return).
func (f *fixture) run(id, parent string, end bool, children ...string) {
	f.t.Helper()
	ctx := context.Background()
	start := ev(id, 1)
	start.Payload = &reinv1.Event_RunStarted{RunStarted: &reinv1.RunStarted{
		Contract:  &reinv1.TaskContract{Goal: "goal " + marker, Labels: map[string]string{"team": "a"}},
		Principal: "alice", Tenant: "acme", RequestId: "req-" + id,
	}}
	if parent != "" {
		start.GetRunStarted().DelegatedBy = &reinv1.DelegatedBy{ParentRunId: parent}
	}
	if _, _, err := f.db.Create(ctx, start); err != nil {
		f.t.Fatal(err)
	}
	seq := uint64(1)
	if len(children) > 0 {
		ds := &reinv1.DelegationStarted{}
		for _, c := range children {
			ds.Children = append(ds.Children, &reinv1.DelegatedChild{RunId: c, RequestId: "req-" + c, Contract: &reinv1.TaskContract{Goal: "sub"}})
		}
		evs := []*reinv1.Event{ev(id, 2)}
		evs[0].Payload = &reinv1.Event_DelegationStarted{DelegationStarted: ds}
		for i, c := range children {
			r := ev(id, uint64(3+i))
			r.Payload = &reinv1.Event_DelegationReturned{DelegationReturned: &reinv1.DelegationReturned{RunId: c, Status: reinv1.RunStatus_RUN_STATUS_COMPLETED}}
			evs = append(evs, r)
		}
		if _, err := f.db.Append(ctx, id, 1, evs); err != nil {
			f.t.Fatal(err)
		}
		seq += uint64(len(evs))
	}
	if !end {
		return
	}
	f.endAt(id, seq, "answer "+marker)
}

// end completes a run just started (at version 1) with answer.
func (f *fixture) end(id, answer string) { f.endAt(id, 1, answer) }

func (f *fixture) endAt(id string, seq uint64, answer string) {
	f.t.Helper()
	done := ev(id, seq+1)
	done.Payload = &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{
		From: reinv1.RunStatus_RUN_STATUS_RUNNING, To: reinv1.RunStatus_RUN_STATUS_COMPLETED, Reason: "final_answer",
		Result: &reinv1.FinalAnswer{Text: answer},
	}}
	if _, err := f.db.Append(context.Background(), id, seq, []*reinv1.Event{done}); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) sweep() lifecycle.Swept {
	f.t.Helper()
	got, err := f.k.Sweep(context.Background())
	if err != nil {
		f.t.Fatalf("Sweep: %v", err)
	}
	return got
}

// fileHolds reports whether the store's file or its log holds s.
func fileHolds(t *testing.T, path, s string) bool {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	log, err := os.ReadFile(bolt.WALPath(path))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return bytes.Contains(data, []byte(s)) || bytes.Contains(log, []byte(s))
}

func TestArchiveReadsAlike(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.run("run-1", "", true)
	before, err := f.s.Load(ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	evsBefore, err := f.s.Events(ctx, "run-1", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	f.policy = lifecycle.Policy{ArchiveOn: true, ArchiveAfter: 2 * time.Hour}
	if got := f.sweep(); got.Archived != 0 {
		t.Fatalf("archived %d runs before archive_after passed", got.Archived)
	}
	f.policy.ArchiveAfter = 0
	if got := f.sweep(); got.Archived != 1 {
		t.Fatalf("sweep archived %d runs, want 1", got.Archived)
	}
	stub, err := f.db.Load(ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	if stub.Archive == nil || stub.Result != nil || stub.Contract.GetGoal() != "" {
		t.Fatalf("the live store holds %+v, want a stub without content", stub)
	}
	after, err := f.s.Load(ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	if after.Archive == nil {
		t.Fatal("an archived run's state does not say it is archived")
	}
	after.Archive = nil
	if !proto.Equal(before.Proto(true), after.Proto(true)) {
		t.Fatalf("archived run reads\n%v\nwas\n%v", after.Proto(true), before.Proto(true))
	}
	evsAfter, err := f.s.Events(ctx, "run-1", 1, 100)
	if err != nil || len(evsAfter) != 1 || !proto.Equal(evsAfter[0], evsBefore[1]) {
		t.Fatalf("Events after 1 of the archived run: %v, %v", evsAfter, err)
	}
	key := archive.Key("acme", t0.Add(2*time.Second), "run-1")
	if stub.Archive.GetKey() != key {
		t.Fatalf("key %q, want %q", stub.Archive.GetKey(), key)
	}
	if !fileHolds(t, filepath.Join(f.dir, filepath.FromSlash(key)), marker) {
		t.Fatal("the archive's object does not hold the run")
	}
	// Once swept, an archived run is left alone.
	if got := f.sweep(); got.Archived != 0 {
		t.Fatalf("second sweep archived %d", got.Archived)
	}
}

func TestArchiveWaitsForTheTree(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.run("run-1", "", true, "run-2")
	f.run("run-2", "run-1", false) // a child still running
	f.policy = lifecycle.Policy{ArchiveOn: true}
	got := f.sweep()
	if got.Archived != 0 || got.Failed != 1 {
		t.Fatalf("sweep of a root with a live child: %+v, want nothing archived", got)
	}
	for _, id := range []string{"run-1", "run-2"} {
		if st, _ := f.db.Load(ctx, id); st.Archive != nil {
			t.Fatalf("%s was archived while its tree was live", id)
		}
	}
}

func TestArchiveTree(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.run("run-1", "", true, "run-2")
	f.run("run-2", "run-1", true, "run-3")
	f.run("run-3", "run-2", true)
	f.policy = lifecycle.Policy{ArchiveOn: true}
	if got := f.sweep(); got.Archived != 3 {
		t.Fatalf("archived %d runs of a tree of 3", got.Archived)
	}
	for _, id := range []string{"run-1", "run-2", "run-3"} {
		if st, err := f.s.Load(ctx, id); err != nil || st.Archive == nil || st.Result.GetText() == "" {
			t.Fatalf("%s: %+v, %v", id, st, err)
		}
	}
}

func TestArchiveUnreachableKeepsTheRun(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.run("run-1", "", true)
	// The archive's directory is a file: every write fails.
	if err := os.RemoveAll(f.dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.dir, []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}
	f.policy = lifecycle.Policy{ArchiveOn: true}
	if got := f.sweep(); got.Archived != 0 || got.Failed != 1 {
		t.Fatalf("sweep with the archive broken: %+v", got)
	}
	st, err := f.db.Load(ctx, "run-1")
	if err != nil || st.Archive != nil || st.Result.GetText() == "" {
		t.Fatalf("the run after a failed archive: %+v, %v", st, err)
	}
	// Backing off: the next sweep at once does not try again...
	if got := f.sweep(); got.Failed != 0 {
		t.Fatalf("retried at once: %+v", got)
	}
	// ...and once the archive is back and the backoff passed, it goes.
	if err := os.Remove(f.dir); err != nil {
		t.Fatal(err)
	}
	f.now = f.now.Add(time.Minute)
	if got := f.sweep(); got.Archived != 1 {
		t.Fatalf("sweep after the archive came back: %+v", got)
	}
}

func TestArchivedObjectDamaged(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.run("run-1", "", true)
	f.policy = lifecycle.Policy{ArchiveOn: true}
	f.sweep()
	stub, _ := f.db.Load(ctx, "run-1")
	path := filepath.Join(f.dir, filepath.FromSlash(stub.Archive.GetKey()))
	data, _ := os.ReadFile(path)
	data[len(data)/2] ^= 0xff
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.Load(ctx, "run-1"); !errors.Is(err, store.ErrDataLoss) {
		t.Fatalf("Load of a run whose object changed: %v, want ErrDataLoss", err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.Events(ctx, "run-1", 0, 10); !errors.Is(err, store.ErrDataLoss) {
		t.Fatalf("Events of a run whose object is gone: %v, want ErrDataLoss", err)
	}
}

func TestRetentionErases(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	for i := 1; i <= 3; i++ {
		f.run(fmt.Sprintf("run-%d", i), "", true)
	}
	f.policy = lifecycle.Policy{ArchiveOn: true}
	f.sweep()
	f.run("run-4", "", true) // live, not archived
	if !fileHolds(t, f.path, marker) {
		t.Fatal("the fixture's runs are not in the file")
	}
	f.policy = lifecycle.Policy{RetainOn: true, Retain: 30 * time.Minute}
	if got := f.sweep(); got.Deleted != 4 {
		t.Fatalf("retention deleted %d of 4 runs", got.Deleted)
	}
	for i := 1; i <= 4; i++ {
		id := fmt.Sprintf("run-%d", i)
		if _, err := f.s.Load(ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("%s after retention: %v", id, err)
		}
		rec, err := f.db.Deletion(ctx, id)
		if err != nil || rec.GetDeletedBy() != lifecycle.ByPolicy {
			t.Fatalf("%s's deletion record: %v, %v", id, rec, err)
		}
	}
	if fileHolds(t, f.path, marker) {
		t.Fatal("the store's file still holds the deleted runs' content")
	}
	var left []string
	_ = filepath.WalkDir(f.dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			left = append(left, p)
		}
		return nil
	})
	if len(left) != 0 {
		t.Fatalf("the archive still holds %v", left)
	}
}

func TestEraseRefusals(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.run("run-1", "", false)
	f.run("run-2", "", true, "run-3")
	f.run("run-3", "run-2", true)
	if _, err := f.k.Erase(ctx, "run-1", "principal:bob", "test", false); !errors.Is(err, store.ErrLive) {
		t.Fatalf("erase a running run: %v, want ErrLive", err)
	}
	if _, err := f.k.Erase(ctx, "run-2", "principal:bob", "test", false); !errors.Is(err, store.ErrLive) {
		t.Fatalf("erase a parent alone: %v, want a refusal", err)
	}
	if _, err := f.k.Erase(ctx, "nope", "principal:bob", "test", false); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("erase an unknown run: %v, want ErrNotFound", err)
	}
	recs, err := f.k.Erase(ctx, "run-3", "principal:bob", "test", true)
	if err != nil || len(recs) != 2 || recs[0].GetRunId() != "run-3" {
		t.Fatalf("erase a tree from a child: %v, %v", recs, err)
	}
	again, err := f.k.Erase(ctx, "run-3", "principal:carol", "again", false)
	if err != nil || len(again) != 1 || !proto.Equal(again[0], recs[0]) {
		t.Fatalf("erase again: %v, %v; want the first record", again, err)
	}
	if st, err := f.db.Load(ctx, "run-1"); err != nil || st.Status != reinv1.RunStatus_RUN_STATUS_RUNNING {
		t.Fatalf("the running run after the refusals: %v", err)
	}
}

// TestSweepStopsAtWhatIsDue: with Soonest, a sweep reads the runs that
// ended in the order of their end and stops at the first that ended too
// lately for any policy, so a run that ended 10 minutes ago is not
// archived under a least age of 30 minutes, even by a policy that would
// archive it at once; with no policy acting it archives nothing. The
// twin: without Soonest, the same policy archives both runs.
func TestSweepStopsAtWhatIsDue(t *testing.T) {
	for _, c := range []struct {
		name    string
		soonest func() (time.Duration, bool)
		want    int
	}{
		{"least 30m", func() (time.Duration, bool) { return 30 * time.Minute, true }, 1},
		{"no policy acts", func() (time.Duration, bool) { return 0, false }, 0},
		{"no bound", nil, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			f.run("old", "", true) // ended at t0+2s
			f.run("new", "", false)
			done := ev("new", 2)
			done.RecordedAt = timestamppb.New(t0.Add(50 * time.Minute))
			done.Payload = &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{
				From: reinv1.RunStatus_RUN_STATUS_RUNNING, To: reinv1.RunStatus_RUN_STATUS_COMPLETED, Reason: "final_answer",
				Result: &reinv1.FinalAnswer{Text: "late"},
			}}
			if _, err := f.db.Append(context.Background(), "new", 1, []*reinv1.Event{done}); err != nil {
				t.Fatal(err)
			}
			f.now = t0.Add(time.Hour)
			f.policy = lifecycle.Policy{ArchiveOn: true} // at once
			f.k.Soonest = c.soonest
			if got := f.sweep(); got.Archived != c.want {
				t.Fatalf("archived %d runs, want %d", got.Archived, c.want)
			}
		})
	}
}
