package bolt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/store/seal"
)

// walStore opens a store in a new directory with run-a created and appended
// to up to version v (marked events), and returns it with its path.
func walStore(t *testing.T, v uint64) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rein.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if _, _, err := s.Create(t.Context(), startEvent("run-a")); err != nil {
		t.Fatal(err)
	}
	appendTo(t, s, 1, v)
	return s, path
}

// appendTo appends run-a's marked events from version from to version to,
// one append each.
func appendTo(t *testing.T, s *Store, from, to uint64) {
	t.Helper()
	for seq := from + 1; seq <= to; seq++ {
		if _, err := s.Append(t.Context(), "run-a", seq-1, []*reinv1.Event{markedEvent("run-a", seq)}); err != nil {
			t.Fatalf("append %d: %v", seq, err)
		}
	}
}

// crashImage copies the store's file and log as a crash of the process
// would leave them now (what the writer wrote is in the page cache, which
// the copy reads), into a new directory, and returns the copy's path. It
// holds the writer's transaction meanwhile, so that no checkpoint runs
// during the copy.
func crashImage(t *testing.T, s *Store) string {
	t.Helper()
	s.txMu.Lock()
	defer s.txMu.Unlock()
	return crashImageHeld(t, s)
}

// crashImageHeld is crashImage for a caller that holds the writer.
func crashImageHeld(t *testing.T, s *Store) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "rein.db")
	for _, p := range []string{s.path, WALPath(s.path)} {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		to := dst
		if p != s.path {
			to = WALPath(dst)
		}
		if err := os.WriteFile(to, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

func sealed(t *testing.T, ev *reinv1.Event) []byte {
	t.Helper()
	b, err := seal.Seal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// assertRunA checks run-a's log in the store at path holds exactly the
// marked events up to version v.
func assertRunA(t *testing.T, s *Store, v uint64) {
	t.Helper()
	st, err := s.Load(t.Context(), "run-a")
	if err != nil || st.Version != v {
		t.Fatalf("run-a: version %d, %v; want %d", st.Version, err, v)
	}
	evs, err := s.Events(t.Context(), "run-a", 1, 1<<20)
	if err != nil || uint64(len(evs)) != v-1 {
		t.Fatalf("run-a: %d events after its start, %v; want %d", len(evs), err, v-1)
	}
	for _, ev := range evs {
		if got, want := markerOf(ev), marker("run-a", ev.GetSequence()); got != want {
			t.Fatalf("run-a event %d holds %q, want %q", ev.GetSequence(), got, want)
		}
	}
}

// TestAppendIsDurableInTheLog: an acknowledged append is in the log, not
// yet in the file, and a crash then loses none of it: the next Open applies
// the log and checkpoints, and so does the Open after the next crash.
func TestAppendIsDurableInTheLog(t *testing.T) {
	s, _ := walStore(t, 21)
	image := crashImage(t, s)
	if s.logged == 0 {
		t.Fatal("20 appends wrote no record to the log")
	}
	if recs, err := walRecords(WALPath(image)); err != nil || len(recs) == 0 {
		t.Fatalf("the crash image's log: %d records, %v; want the appends", len(recs), err)
	}
	c, err := Open(image, Options{})
	if err != nil {
		t.Fatalf("open the crash image: %v", err)
	}
	assertRunA(t, c, 21)
	if recs, err := walRecords(WALPath(image)); err != nil || len(recs) != 0 {
		t.Errorf("after Open applied the log, it holds %d records (%v), want none", len(recs), err)
	}
	appendTo(t, c, 21, 23) // and it goes on, in the log made anew
	second := crashImage(t, c)
	if c2, err := Open(second, Options{}); err != nil {
		t.Fatalf("open the second crash image: %v", err)
	} else {
		assertRunA(t, c2, 23)
		_ = c2.Close()
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c, err = Open(image, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	assertRunA(t, c, 23)
}

// TestTornRecordIsNotApplied: a record the crash cut short (its sync never
// returned, so its append was never acknowledged) is not applied; the ones
// before it are.
func TestTornRecordIsNotApplied(t *testing.T) {
	s, _ := walStore(t, 9)
	image := crashImage(t, s)
	log := readFile(t, WALPath(image))
	if err := os.WriteFile(WALPath(image), log[:len(log)-5], 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Open(image, Options{})
	if err != nil {
		t.Fatalf("open with a torn last record: %v", err)
	}
	defer c.Close()
	assertRunA(t, c, 8)
}

// TestReadOnlyOpenSeesTheLog: a read-only open of a crashed store reads
// every acknowledged append, from a private copy, and changes neither the
// file nor its log; the copy is gone at Close.
func TestReadOnlyOpenSeesTheLog(t *testing.T) {
	s, _ := walStore(t, 12)
	image := crashImage(t, s)
	file, log := readFile(t, image), readFile(t, WALPath(image))
	c, err := Open(image, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	assertRunA(t, c, 12)
	if _, err := c.Append(t.Context(), "run-a", 12, []*reinv1.Event{markedEvent("run-a", 13)}); !errors.Is(err, store.ErrReadOnly) {
		t.Fatalf("append to a read-only store: %v, want ErrReadOnly", err)
	}
	copied := c.copied
	if copied == "" {
		t.Fatal("the read-only open made no copy, yet the file lacks the log's records")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(copied); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the copy %s outlived Close (%v)", copied, err)
	}
	if !bytes.Equal(file, readFile(t, image)) || !bytes.Equal(log, readFile(t, WALPath(image))) {
		t.Fatal("a read-only open changed the file or its log")
	}
	// The twin: a cleanly closed store is read in place.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	c, err = Open(s.path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.copied != "" {
		t.Errorf("a read-only open of a cleanly closed store made a copy")
	}
	assertRunA(t, c, 12)
}

// TestCheckpointEmptiesTheLog: at the checkpoint the file takes what the
// log held; Close removes the log, and a store that was only read writes
// neither file.
func TestCheckpointEmptiesTheLog(t *testing.T) {
	s, path := walStore(t, 6)
	before := readFile(t, path)
	if err := s.checkpoint(); err != nil {
		t.Fatal(err)
	}
	if s.applied != s.logged {
		t.Fatalf("after a checkpoint the file holds records up to %d, the log up to %d", s.applied, s.logged)
	}
	if bytes.Equal(before, readFile(t, path)) {
		t.Fatal("a checkpoint with records to take left the file as it was")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(WALPath(path)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Close left the log (%v)", err)
	}
	file := readFile(t, path)
	c, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	assertRunA(t, c, 6)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(file, readFile(t, path)) {
		t.Fatal("opening, reading and closing the store changed the file")
	}
}

// TestErasureCutsTheLog: a run's deletion is checkpointed and the log cut,
// so that no record of the run's events is left in it.
func TestErasureCutsTheLog(t *testing.T) {
	s, path := walStore(t, 4)
	ended := &reinv1.Event{RunId: "run-a", Sequence: 5, RecordedAt: timestamppb.Now(), Actor: "harness",
		Payload: &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{
			From: reinv1.RunStatus_RUN_STATUS_RUNNING, To: reinv1.RunStatus_RUN_STATUS_COMPLETED,
		}}}
	if _, err := s.Append(t.Context(), "run-a", 4, []*reinv1.Event{ended}); err != nil {
		t.Fatal(err)
	}
	m := marker("run-a", 3)
	if !bytes.Contains(readFile(t, WALPath(path)), []byte(m)) {
		t.Fatalf("before the deletion the log does not hold %q: the twin cannot fail", m)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, deleted, err := s.Delete(ctx, &reinv1.RunDeletion{RunId: "run-a", DeletedBy: "principal:test", DeletedAt: timestamppb.Now()}); err != nil || !deleted {
		t.Fatalf("Delete: %v, %v", deleted, err)
	}
	if bytes.Contains(readFile(t, WALPath(path)), []byte(m)) {
		t.Fatalf("after the run's deletion the log still holds %q", m)
	}
	if s.applied != s.logged {
		t.Fatalf("the deletion was not checkpointed: the file holds records up to %d, the log %d", s.applied, s.logged)
	}
}

// TestCheckReadsTheLog: rein check finds no problem in a crashed store whose
// log holds commits the file lacks, and reports a log that is another
// store's.
func TestCheckReadsTheLog(t *testing.T) {
	s, _ := walStore(t, 7)
	image := crashImage(t, s)
	if problems, err := Check(image, Options{}); err != nil || len(problems) != 0 {
		t.Fatalf("check a crashed store with its log: %v, %v; want no problem", problems, err)
	}
	other, _ := walStore(t, 2)
	otherImage := crashImage(t, other)
	if err := os.WriteFile(WALPath(otherImage), readFile(t, WALPath(image)), 0o600); err != nil {
		t.Fatal(err)
	}
	problems, err := Check(otherImage, Options{})
	if err != nil || len(problems) != 1 || !strings.Contains(problems[0].Text, "another store's") {
		t.Fatalf("check beside another store's log: %v, %v; want the one problem naming it", problems, err)
	}
}

// TestCompactKeepsTheLog: a crashed store compacted offline keeps its log,
// which applies to the compacted file at the next Open as it would have to
// the old one.
func TestCompactKeepsTheLog(t *testing.T) {
	s, _ := walStore(t, 11)
	image := crashImage(t, s)
	if _, err := Compact(image, CompactOptions{}); err != nil {
		t.Fatalf("compact a crashed store: %v", err)
	}
	if recs, err := walRecords(WALPath(image)); err != nil || len(recs) == 0 {
		t.Fatalf("after the compaction the log holds %d records (%v), want the crash's", len(recs), err)
	}
	c, err := Open(image, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	assertRunA(t, c, 11)
}

// TestListThroughTheOpenTransaction: a listing newest first, read through
// the writer's open transaction after ends emptied whole leaves of the
// status index (bbolt rebalances them only at the commit), lists every run
// in each status.
func TestListThroughTheOpenTransaction(t *testing.T) {
	s, _ := walStore(t, 1)
	ctx := t.Context()
	const runs, ended = 3000, 1500
	id := func(i int) string { return fmt.Sprintf("run-%05d", i) }
	for i := range runs {
		ev := startEvent(id(i))
		ev.GetRunStarted().RequestId = ""
		if _, _, err := s.Create(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.checkpoint(); err != nil {
		t.Fatal(err)
	}
	running := reinv1.RunStatus_RUN_STATUS_RUNNING
	if st, err := s.Load(ctx, id(0)); err != nil || st.Status != running {
		t.Fatalf("a created run: %v, %v; want it running", st.Status, err)
	}
	// The middle half of the runs ends: whole leaves of the running
	// index empty, in the transaction that holds the log's records.
	for i := runs / 4; i < runs/4+ended; i++ {
		end := &reinv1.Event{RunId: id(i), Sequence: 2, RecordedAt: timestamppb.Now(), Actor: "harness",
			Payload: &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{From: running, To: reinv1.RunStatus_RUN_STATUS_COMPLETED}}}
		if _, err := s.Append(ctx, id(i), 1, []*reinv1.Event{end}); err != nil {
			t.Fatal(err)
		}
	}
	if s.tx == nil {
		t.Fatal("the ends were checkpointed: the listing would not read through the open transaction")
	}
	count := func(status reinv1.RunStatus, pageSize int) int {
		n, after := 0, ""
		for {
			page, err := s.List(ctx, store.Filter{Statuses: []reinv1.RunStatus{status}, Limit: pageSize, After: after})
			if err != nil {
				t.Fatal(err)
			}
			n += len(page.Runs)
			if page.Next == "" {
				return n
			}
			after = page.Next
		}
	}
	for _, size := range []int{1, 7, 1000} {
		// run-a of walStore is running too.
		if got := count(running, size); got != runs-ended+1 {
			t.Errorf("pages of %d: %d running runs listed, want %d", size, got, runs-ended+1)
		}
		if got := count(reinv1.RunStatus_RUN_STATUS_COMPLETED, size); got != ended {
			t.Errorf("pages of %d: %d completed runs listed, want %d", size, got, ended)
		}
	}
}

// TestCrashAfterCheckpoint: a crash after a checkpoint's commit, before the
// log is written from its start again, leaves a log whose records the file
// holds: Open applies none of them again, and the appends after the crash
// image's go on from the file.
func TestCrashAfterCheckpoint(t *testing.T) {
	s, _ := walStore(t, 8)
	var image string
	s.afterCheckpoint = func() { image = crashImageHeld(t, s) }
	if err := s.checkpoint(); err != nil {
		t.Fatal(err)
	}
	s.afterCheckpoint = nil
	if recs, err := walRecords(WALPath(image)); err != nil || len(recs) == 0 {
		t.Fatalf("the image's log holds %d records (%v): the test cannot tell a second apply", len(recs), err)
	}
	c, err := Open(image, Options{})
	if err != nil {
		t.Fatalf("open a crash after a checkpoint: %v", err)
	}
	defer c.Close()
	assertRunA(t, c, 8) // each append once: a second apply would be refused at Open
	appendTo(t, c, 8, 10)
	assertRunA(t, c, 10)
}

// walRecords is the whole records of the log at path.
func walRecords(path string) ([]walRecord, error) {
	l, err := readWAL(path, 0)
	return l.recs, err
}
