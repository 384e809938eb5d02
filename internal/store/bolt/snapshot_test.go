package bolt

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
)

// heldLog is the log's file with its first sync held: it says so on
// entered, then waits for release.
type heldLog struct {
	logDisk
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (h *heldLog) Datasync() error {
	h.once.Do(func() {
		h.entered <- struct{}{}
		<-h.release
	})
	return h.logDisk.Datasync()
}

// withHeldLog puts a heldLog under s's log and returns it.
func withHeldLog(s *Store) *heldLog {
	s.txMu.Lock()
	defer s.txMu.Unlock()
	h := &heldLog{logDisk: s.wal.f, entered: make(chan struct{}), release: make(chan struct{})}
	s.wal.f = h
	return h
}

// within runs fn and fails the test if it has not returned in a minute:
// a read that waits on the writer would wait for as long as its sync is
// held.
func within(t *testing.T, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("%s waited on the writer's sync", what)
	}
}

// readRunA reads run-a every way a client does and returns the version
// each way saw: Load, Events and List.
func readRunA(t *testing.T, s *Store) (load, events, list uint64, err error) {
	ctx := t.Context()
	st, err := s.Load(ctx, "run-a")
	if err != nil {
		return 0, 0, 0, err
	}
	evs, err := s.Events(ctx, "run-a", 0, 1<<20)
	if err != nil {
		return 0, 0, 0, err
	}
	page, err := s.List(ctx, store.Filter{Limit: 10})
	if err != nil {
		return 0, 0, 0, err
	}
	for _, r := range page.Runs {
		if r.RunID == "run-a" {
			list = r.Version
		}
	}
	return st.Version, uint64(len(evs)), list, nil
}

// TestReadsSeeOnlySyncedCommits: while a commit's record is written but its
// sync has not returned, a read neither waits for it nor sees it; once the
// sync returns and the append is acknowledged, every read sees it. So
// across a checkpoint.
func TestReadsSeeOnlySyncedCommits(t *testing.T) {
	s, _ := walStore(t, 3)
	h := withHeldLog(s)
	appended := make(chan error, 1)
	go func() {
		_, err := s.Append(t.Context(), "run-a", 3, []*reinv1.Event{markedEvent("run-a", 4)})
		appended <- err
	}()
	<-h.entered // the record is written, its sync held
	within(t, "a read during a sync", func() {
		load, events, list, err := readRunA(t, s)
		if err != nil || load != 3 || events != 3 || list != 3 {
			t.Errorf("during the sync: version %d, %d events, listed at %d, %v; want 3, none of the unsynced commit", load, events, list, err)
		}
	})
	close(h.release)
	if err := <-appended; err != nil {
		t.Fatal(err)
	}
	if load, events, list, err := readRunA(t, s); err != nil || load != 4 || events != 4 || list != 4 {
		t.Fatalf("once acknowledged: version %d, %d events, listed at %d, %v; want 4", load, events, list, err)
	}
	if err := s.checkpoint(); err != nil {
		t.Fatal(err)
	}
	assertRunA(t, s, 4)
}

// TestFailedLogWriteIsNeverRead is the twin: a commit whose record could not
// be written (a full disk) is refused, and no read ever sees it, though its
// writes were in the writer's transaction and overlay; the next commit
// is read as usual.
func TestFailedLogWriteIsNeverRead(t *testing.T) {
	s, _ := walStore(t, 3)
	f := withFaultyLog(s)
	f.set(false, true)
	_, err := s.Append(t.Context(), "run-a", 3, []*reinv1.Event{markedEvent("run-a", 4)})
	if !errors.Is(err, store.ErrDiskFull) {
		t.Fatalf("append on a full disk: %v, want ErrDiskFull", err)
	}
	if _, _, err := s.Create(t.Context(), startEvent("run-z")); !errors.Is(err, store.ErrDiskFull) {
		t.Fatalf("create on a full disk: %v, want ErrDiskFull", err)
	}
	if load, events, list, err := readRunA(t, s); err != nil || load != 3 || events != 3 || list != 3 {
		t.Fatalf("after the refused commit: version %d, %d events, listed at %d, %v; want 3", load, events, list, err)
	}
	f.set(false, false)
	appendTo(t, s, 3, 5)
	for _, when := range []string{"after the next commits", "after a checkpoint"} {
		assertRunA(t, s, 5)
		if _, err := s.Load(t.Context(), "run-z"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("%s: run-z, whose create was refused: %v, want ErrNotFound", when, err)
		}
		if page, err := s.List(t.Context(), store.Filter{Limit: 10}); err != nil || len(page.Runs) != 1 {
			t.Fatalf("%s: listed %d runs, %v; want run-a alone", when, len(page.Runs), err)
		}
		if err := s.checkpoint(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFailedSyncIsNeverRead: a commit whose sync failed halts the store,
// and no read sees the commit: every read is refused from then on.
func TestFailedSyncIsNeverRead(t *testing.T) {
	s, _ := walStore(t, 3)
	f := withFaultyLog(s)
	f.set(true, false)
	if _, err := s.Append(t.Context(), "run-a", 3, []*reinv1.Event{markedEvent("run-a", 4)}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("append whose sync fails: %v, want ErrUnavailable", err)
	}
	if _, _, _, err := readRunA(t, s); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("read after the failed sync: %v, want ErrUnavailable", err)
	}
}

// TestCheckpointUnderReaders: readers reading every way while runs append
// and checkpoints come (between batches, and with lifecycle changes, which
// commit what no record holds) never see a run go back, a gap in its
// events, or its log and state disagree.
func TestCheckpointUnderReaders(t *testing.T) {
	s, _ := walStore(t, 1)
	const runs, appends = 4, 60
	ids := []string{"run-a"}
	for i := 1; i < runs; i++ {
		id := fmt.Sprintf("run-%c", 'a'+i)
		if _, _, err := s.Create(t.Context(), startEvent(id)); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	errs := make(chan error, 16)
	var readers sync.WaitGroup
	for r := range 3 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			seen := map[string]uint64{}
			for ctx.Err() == nil {
				id := ids[r%len(ids)]
				r++
				st, err := s.Load(ctx, id)
				if err != nil {
					errs <- err
					return
				}
				evs, err := s.Events(ctx, id, 0, 1<<20)
				if err != nil {
					errs <- err
					return
				}
				for i, ev := range evs {
					if ev.GetSequence() != uint64(i+1) {
						errs <- fmt.Errorf("%s: event %d at place %d", id, ev.GetSequence(), i+1)
						return
					}
				}
				switch {
				case st.Version < seen[id]:
					errs <- fmt.Errorf("%s went back from version %d to %d", id, seen[id], st.Version)
					return
				case uint64(len(evs)) < st.Version:
					errs <- fmt.Errorf("%s: version %d read, then only %d events", id, st.Version, len(evs))
					return
				}
				seen[id] = uint64(len(evs))
				page, err := s.List(ctx, store.Filter{Limit: runs + 1})
				if err != nil {
					errs <- err
					return
				}
				if len(page.Runs) != runs {
					errs <- fmt.Errorf("listed %d runs, want %d", len(page.Runs), runs)
					return
				}
				for _, st := range page.Runs {
					if st.Version < seen[st.RunID] {
						errs <- fmt.Errorf("%s listed at version %d after %d was read", st.RunID, st.Version, seen[st.RunID])
						return
					}
				}
			}
		}()
	}
	var writers sync.WaitGroup
	for _, id := range ids {
		writers.Add(1)
		go func() {
			defer writers.Done()
			for v := uint64(1); v <= appends; v++ {
				if _, err := s.Append(ctx, id, v, []*reinv1.Event{markedEvent(id, v+1)}); err != nil {
					errs <- fmt.Errorf("append %s %d: %w", id, v+1, err)
					return
				}
			}
		}()
	}
	writers.Add(1)
	go func() {
		defer writers.Done()
		for i := 0; i < 20; i++ {
			if err := s.checkpoint(); err != nil {
				errs <- err
				return
			}
			sc := &reinv1.Schedule{Tenant: "t", Name: fmt.Sprintf("s%d", i), Cron: "* * * * *"}
			if err := s.CreateSchedule(ctx, sc); err != nil {
				errs <- fmt.Errorf("create schedule: %w", err)
				return
			}
		}
	}()
	writers.Wait()
	cancel()
	readers.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, context.Canceled) {
			t.Error(err)
		}
	}
	for _, id := range ids {
		st, err := s.Load(t.Context(), id)
		if err != nil || st.Version != appends+1 {
			t.Fatalf("%s: version %d, %v; want %d", id, st.Version, err, appends+1)
		}
	}
}

// TestReadsTakeTurns: reads beyond readTurns wait for a turn, and writes
// never do: with every turn taken, an append commits and is acknowledged
// while a read waits; the read goes on once a turn is free, and sees it.
func TestReadsTakeTurns(t *testing.T) {
	s, _ := walStore(t, 3)
	for range cap(s.reads) {
		s.reads <- struct{}{}
	}
	loaded := make(chan uint64, 1)
	go func() {
		st, err := s.Load(t.Context(), "run-a")
		if err != nil {
			t.Error(err)
		}
		loaded <- st.Version
	}()
	appendTo(t, s, 3, 4)
	select {
	case v := <-loaded:
		t.Fatalf("a read ran with every turn taken (it saw version %d)", v)
	default:
	}
	<-s.reads
	if v := <-loaded; v != 4 {
		t.Fatalf("the read that waited for its turn saw version %d, want 4", v)
	}
	for range cap(s.reads) - 1 {
		<-s.reads
	}
}

// TestReadWaitingForATurnEndsWithItsContext: a read that waits for a turn
// stops waiting when its caller's context ends, with the context's error
// (a cancelled ListRuns does not wait behind the reads before it); the
// same read with the turns free reads.
func TestReadWaitingForATurnEndsWithItsContext(t *testing.T) {
	s, _ := walStore(t, 3)
	for range cap(s.reads) {
		s.reads <- struct{}{}
	}
	ctx, cancel := context.WithCancel(t.Context())
	loaded := make(chan error, 1)
	go func() {
		_, err := s.Load(ctx, "run-a")
		loaded <- err
	}()
	cancel()
	within(t, "a cancelled read waiting for a turn", func() {
		if err := <-loaded; !errors.Is(err, context.Canceled) {
			t.Errorf("a cancelled read waiting for a turn returned %v, want context.Canceled", err)
		}
	})
	for range cap(s.reads) {
		<-s.reads
	}
	if st, err := s.Load(t.Context(), "run-a"); err != nil || st.Version != 3 {
		t.Fatalf("with the turns free, the read returned version %d, %v; want 3", st.Version, err)
	}
}

// TestReadsAcrossRemaps: bbolt remaps its file each time the file outgrows
// the map (the map doubles up to 1 GiB), and a remap waits for every read
// transaction to end. With readers reading without pause while appends of
// 256 KiB events grow the file past 32 MiB (remaps at every doubling from
// 32 KiB), every append and every read completes: no read transaction is
// held across a checkpoint, so no remap waits on one.
func TestReadsAcrossRemaps(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 40 MiB; skipped in -short")
	}
	s, path := walStore(t, 1)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	errs := make(chan error, 8)
	var readers sync.WaitGroup
	for range 3 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for ctx.Err() == nil {
				if _, err := s.Load(ctx, "run-a"); err != nil {
					errs <- err
					return
				}
				if _, err := s.List(ctx, store.Filter{Limit: 10}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	big := strings.Repeat("r", 256<<10)
	const appends = 160
	within(t, "appends growing the file under readers", func() {
		for v := uint64(1); v < appends; v++ {
			ev := markedEvent("run-a", v+1)
			if mr := ev.GetModelRequested(); mr != nil {
				mr.InputHash = big
			}
			if _, err := s.Append(ctx, "run-a", v, []*reinv1.Event{ev}); err != nil {
				errs <- fmt.Errorf("append %d: %w", v+1, err)
				return
			}
			if v%20 == 0 {
				if err := s.checkpoint(); err != nil {
					errs <- err
					return
				}
			}
		}
	})
	cancel()
	within(t, "readers stopping", readers.Wait)
	close(errs)
	for err := range errs {
		if !errors.Is(err, context.Canceled) {
			t.Error(err)
		}
	}
	if err := s.checkpoint(); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Size() < 32<<20 {
		t.Fatalf("the file grew to %d bytes, want past 32 MiB (the remaps this test is about)", info.Size())
	}
	if st, err := s.Load(t.Context(), "run-a"); err != nil || st.Version != appends {
		t.Fatalf("after the appends: version %d, %v; want %d", st.Version, err, appends)
	}
}

// TestSnapshotPublishedForReads: appends with no read between them publish
// no snapshot and add nothing to a tree; the first read after them
// publishes one that holds them all, and reads with no append between them
// share it.
func TestSnapshotPublishedForReads(t *testing.T) {
	s, _ := walStore(t, 3)
	assertRunA(t, s, 3)
	before := s.snap.Load()
	appendTo(t, s, 3, 9)
	if s.snap.Load() != before {
		t.Fatal("appends with no read between them published a snapshot")
	}
	if load, events, list, err := readRunA(t, s); err != nil || load != 9 || events != 9 || list != 9 {
		t.Fatalf("the first read after the appends: version %d, %d events, listed at %d, %v; want 9", load, events, list, err)
	}
	read := s.snap.Load()
	if ov, err := read.overlay(); read == before || err != nil || ov == nil {
		t.Fatal("the read after the appends took the snapshot from before them")
	}
	assertRunA(t, s, 9)
	if s.snap.Load() != read {
		t.Fatal("reads with no append between them published a snapshot each")
	}
}

// TestSnapshotsCarryBatchesNoReadAdded: a snapshot no read took carries the
// batches it holds to the next one, which a read then reads whole; one a
// read took is the next one's base, with only the batches after it above.
// A snapshot that held only the newest batches would read the run's last
// state but lack the events of those before (the twin checks that).
func TestSnapshotsCarryBatchesNoReadAdded(t *testing.T) {
	// A checkpoint (due 2 s after the first record) starts the snapshots
	// anew: an attempt it falls in is made again.
	for range 5 {
		s, _ := walStore(t, 3)
		var checkpoints atomic.Int32
		s.txMu.Lock()
		s.afterCheckpoint = func() { checkpoints.Add(1) }
		s.txMu.Unlock()
		carryBatches(t, s, func() bool { return checkpoints.Load() == 0 })
		if t.Failed() || checkpoints.Load() == 0 {
			return
		}
	}
	t.Fatal("a checkpoint fell in each of 5 attempts")
}

// carryBatches is TestSnapshotsCarryBatchesNoReadAdded's one attempt on s,
// from run-a at version 3. It stops at the first check that fails, which
// it reports only when uncheckpointed says no checkpoint came in.
func carryBatches(t *testing.T, s *Store, uncheckpointed func() bool) {
	holds := func(ok bool, format string, args ...any) bool {
		if !ok && uncheckpointed() {
			t.Errorf(format, args...)
		}
		return ok
	}
	assertRunA(t, s, 3)
	appendTo(t, s, 3, 5)
	unread := s.fresh() // published, never read
	if !holds(unread.ov.Load() == nil && len(unread.above) == 2,
		"the snapshot no read took: overlay made %v, %d batches above; want none made, the 2 appends", unread.ov.Load() != nil, len(unread.above)) {
		return
	}
	appendTo(t, s, 5, 7)
	load, events, list, err := readRunA(t, s)
	if !holds(err == nil && load == 7 && events == 7 && list == 7,
		"the read after a snapshot no read took: version %d, %d events, listed at %d, %v; want 7", load, events, list, err) {
		return
	}
	read := s.snap.Load()
	made := read.ov.Load()
	if !holds(read != unread && read.base == unread.base && len(read.above) == 4 && made != nil,
		"the read's snapshot: %d batches above the same base %v, overlay made %v; want the 4 appends since the last read, made", len(read.above), read.base == unread.base, made != nil) {
		return
	}
	appendTo(t, s, 7, 8)
	load, events, _, err = readRunA(t, s)
	if !holds(err == nil && load == 8 && events == 8, "the read after one more append: version %d, %d events, %v; want 8", load, events, err) {
		return
	}
	next := s.snap.Load()
	if !holds(next.base == made && len(next.above) == 1,
		"the next snapshot: %d batches above, on the overlay the last read made: %v; want 1, true", len(next.above), next.base == made) {
		return
	}

	// The twin: a snapshot of only the newest batches lacks the event of
	// the batch before, which the read of the run's events finds missing.
	appendTo(t, s, 8, 10)
	s.ovMu.Lock()
	s.ovStale.Store(false)
	base, err := next.overlay()
	if err != nil {
		t.Fatal(err)
	}
	s.publishLocked(&snapshot{txid: s.ckTxid, base: base, above: s.ovNew[1:]})
	s.ovNew = nil
	s.ovMu.Unlock()
	_, _, _, err = readRunA(t, s)
	holds(errors.Is(err, store.ErrDataLoss) && strings.Contains(err.Error(), "event 9"),
		"a snapshot without the batch of version 9: %v; want event 9 missing", err)
}

// TestHaltedStoreStaysHaltedForReads is its twin: a store that halts with
// commits synced since the last snapshot a read took refuses every read;
// the overlay that holds those commits is not published over the halt.
func TestHaltedStoreStaysHaltedForReads(t *testing.T) {
	s, _ := walStore(t, 3)
	assertRunA(t, s, 3)
	appendTo(t, s, 3, 4) // synced, not yet published
	f := withFaultyLog(s)
	f.set(true, false)
	if _, err := s.Append(t.Context(), "run-a", 4, []*reinv1.Event{markedEvent("run-a", 5)}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("append whose sync fails: %v, want ErrUnavailable", err)
	}
	if _, _, _, err := readRunA(t, s); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("read after the halt, with a commit synced before it unpublished: %v, want ErrUnavailable", err)
	}
}

// TestFailedLargeBatchIsNeverRead: a batch of many writes whose record
// could not be written is never read, by a read that publishes the
// overlay after it either: the overlay is as the commits before it left
// it, and the next commit is read as usual.
func TestFailedLargeBatchIsNeverRead(t *testing.T) {
	s, _ := walStore(t, 3)
	const large = 100
	appendTo(t, s, 3, 4) // synced, not yet published
	f := withFaultyLog(s)
	f.set(false, true)
	var evs []*reinv1.Event
	for seq := uint64(5); seq < 5+large; seq++ {
		evs = append(evs, markedEvent("run-a", seq))
	}
	if _, err := s.Append(t.Context(), "run-a", 4, evs); !errors.Is(err, store.ErrDiskFull) {
		t.Fatalf("a large append on a full disk: %v, want ErrDiskFull", err)
	}
	assertRunA(t, s, 4)
	f.set(false, false)
	if _, err := s.Append(t.Context(), "run-a", 4, evs); err != nil {
		t.Fatal(err)
	}
	assertRunA(t, s, 4+large)
}
