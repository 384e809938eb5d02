package bolt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
)

// Every failure loud (docs/storage.md, "What each failure does"): a log a
// crash left without its header is no log; damage in the middle of the log
// is ErrDataLoss, never a torn end; a failed sync or commit stops the
// writer; creating the log failing is Open's error.

// TestTornHeaderIsNoLog: a log of at most a header's length whose header is
// torn or zeros (a crash as the log was made) holds no record: the store
// opens, the log is made anew, and rein check notes it without a problem.
// Its twin: a longer log without rein's header may hold commits, and is
// refused.
func TestTornHeaderIsNoLog(t *testing.T) {
	s, path := walStore(t, 4)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	header := append([]byte(walMagic), bytes.Repeat([]byte{7}, storeIDLen)...)
	for name, log := range map[string][]byte{
		"empty":         {},
		"zeros":         make([]byte, walHeaderLen),
		"a few zeros":   make([]byte, 5),
		"half a header": header[:11],
		"a torn magic":  append([]byte("rein-"), make([]byte, 11)...),
	} {
		if err := os.WriteFile(WALPath(path), log, 0o600); err != nil {
			t.Fatal(err)
		}
		problems, err := Check(path, Options{})
		if err != nil || len(problems) != 1 || !problems[0].Note || !strings.Contains(problems[0].Text, "no whole header") {
			t.Errorf("%s: check: %v, %v; want one note of a log without its header", name, problems, err)
		}
		c, err := Open(path, Options{})
		if err != nil {
			t.Fatalf("%s: open beside a log of %d bytes without its header: %v", name, len(log), err)
		}
		if got := readFile(t, WALPath(path)); len(got) != walHeaderLen || string(got[:len(walMagic)]) != walMagic {
			t.Errorf("%s: the log was not made anew: %q", name, got)
		}
		assertRunA(t, c, 4)
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// The twin: past a header's length, a log that does not start with
	// one may hold records, and is refused.
	if err := os.WriteFile(WALPath(path), make([]byte, walHeaderLen+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, Options{}); !errors.Is(err, store.ErrDataLoss) {
		t.Fatalf("open beside %d zero bytes for a log: %v, want ErrDataLoss", walHeaderLen+1, err)
	}
}

// recordOffsets is where each whole record of the log at path starts.
func recordOffsets(t *testing.T, path string) []int {
	t.Helper()
	data := readFile(t, path)
	var offs []int
	for off := walHeaderLen; ; {
		if _, ok := recordAt(data, off); !ok {
			return offs
		}
		offs = append(offs, off)
		off += walRecordHdr + int(binary.BigEndian.Uint32(data[off:off+4]))
	}
}

// TestDamagedRecordIsDataLoss: one byte flipped in a record the log's end
// does not explain (whole records follow it) is ErrDataLoss naming the
// record: the records before it are applied, the log is kept as
// FILE-wal.broken-TIME, never cut, and the store is refused until it is
// moved away; rein check reports the record. Its twin is
// TestTornRecordIsNotApplied: a bad last record is a torn write.
func TestDamagedRecordIsDataLoss(t *testing.T) {
	s, _ := walStore(t, 20)
	image := crashImage(t, s)
	offs := recordOffsets(t, WALPath(image))
	if len(offs) != 20 {
		t.Fatalf("the log holds %d records, want the create's and the 19 appends'", len(offs))
	}
	log := readFile(t, WALPath(image))
	// Record 10 of the log holds the append of version 10.
	log[offs[9]+walRecordHdr+walNumberLen+20] ^= 0xff
	if err := os.WriteFile(WALPath(image), log, 0o600); err != nil {
		t.Fatal(err)
	}
	checked := filepath.Join(t.TempDir(), "rein.db")
	for _, p := range []string{image, WALPath(image)} {
		to := checked
		if p != image {
			to = WALPath(checked)
		}
		if err := os.WriteFile(to, readFile(t, p), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	problems, err := Check(checked, Options{})
	if err != nil || !mentionsText(problems, "record 10 of the store's log") {
		t.Errorf("check a log damaged in record 10: %v, %v; want the record named", problems, err)
	}
	if _, err := Open(checked, Options{ReadOnly: true}); !errors.Is(err, store.ErrDataLoss) {
		t.Errorf("read-only open beside a damaged log: %v, want ErrDataLoss", err)
	}

	_, err = Open(image, Options{})
	if !errors.Is(err, store.ErrDataLoss) || !strings.Contains(err.Error(), "record 10 ") {
		t.Fatalf("open beside a log damaged in record 10: %v, want ErrDataLoss naming record 10", err)
	}
	kept, _ := filepath.Glob(WALPath(image) + brokenSuffix + "*")
	if len(kept) != 1 || !bytes.Equal(readFile(t, kept[0]), log) {
		t.Fatalf("the damaged log was not kept whole: %v", kept)
	}
	if _, err := Open(image, Options{}); !errors.Is(err, store.ErrDataLoss) || !strings.Contains(err.Error(), kept[0]) {
		t.Fatalf("open again beside the kept log: %v, want ErrDataLoss naming it", err)
	}
	if problems, _ := Check(image, Options{}); !mentionsText(problems, kept[0]) {
		t.Errorf("check beside the kept log: %v, want it named", problems)
	}
	if err := os.Rename(kept[0], filepath.Join(t.TempDir(), "broken")); err != nil {
		t.Fatal(err)
	}
	c, err := Open(image, Options{})
	if err != nil {
		t.Fatalf("open once the kept log is moved away: %v", err)
	}
	defer c.Close()
	assertRunA(t, c, 9) // every commit before the damaged record
}

// faultyLog is the log's file, failing as told: a sync, or a write.
type faultyLog struct {
	logDisk
	mu        sync.Mutex
	failSync  bool
	failWrite bool
}

func (f *faultyLog) set(sync, write bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failSync, f.failWrite = sync, write
}

func (f *faultyLog) Datasync() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failSync {
		return syscall.EIO
	}
	return f.logDisk.Datasync()
}

func (f *faultyLog) WriteAt(b []byte, off int64) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failWrite {
		return 0, syscall.ENOSPC
	}
	return f.logDisk.WriteAt(b, off)
}

// withFaultyLog puts a faultyLog under s's log and returns it.
func withFaultyLog(s *Store) *faultyLog {
	s.txMu.Lock()
	defer s.txMu.Unlock()
	f := &faultyLog{logDisk: s.wal.f}
	s.wal.f = f
	return f
}

// assertHalted checks s stopped taking writes and reads with
// ErrUnavailable naming cause, that Failed is closed, and that Close
// reports it.
func assertHalted(t *testing.T, s *Store, version uint64, cause string) {
	t.Helper()
	select {
	case <-s.Failed():
	default:
		t.Fatal("Failed is not closed")
	}
	if err := s.Failure(); !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), cause) {
		t.Fatalf("Failure: %v, want ErrUnavailable naming %q", err, cause)
	}
	if _, err := s.Append(t.Context(), "run-a", version, []*reinv1.Event{markedEvent("run-a", version+1)}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("an append after the failure: %v, want ErrUnavailable", err)
	}
	if _, err := s.Load(t.Context(), "run-a"); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("a read after the failure: %v, want ErrUnavailable", err)
	}
	if err := s.Close(); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Close after the failure: %v, want ErrUnavailable", err)
	}
}

// TestFailedSyncHalts: a sync of the log that fails (its data may or may not
// be on disk, and Linux forgets the failure once reported) stops the
// writer: that append and every later one is ErrUnavailable naming the
// cause, reads too, Close reports it, and the next Open recovers every
// acknowledged append from the log. So does a failed sync of the cut of a
// record whose write failed (its callers were told nothing was stored).
// The twin: a write that fails and whose cut syncs stored nothing, is
// ErrDiskFull, and the store goes on.
func TestFailedSyncHalts(t *testing.T) {
	for _, tc := range []struct {
		name              string
		failSync, failCut bool
		failWrite, goesOn bool
	}{
		{name: "a record's sync", failSync: true},
		{name: "the cut of a record whose write failed", failWrite: true, failCut: true},
		{name: "a write whose cut syncs", failWrite: true, goesOn: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, path := walStore(t, 5)
			f := withFaultyLog(s)
			f.set(tc.failSync || tc.failCut, tc.failWrite)
			_, err := s.Append(t.Context(), "run-a", 5, []*reinv1.Event{markedEvent("run-a", 6)})
			f.set(false, false)
			if tc.goesOn {
				if !errors.Is(err, store.ErrDiskFull) {
					t.Fatalf("an append whose write failed: %v, want ErrDiskFull", err)
				}
				appendTo(t, s, 5, 7)
				assertRunA(t, s, 7)
				return
			}
			if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "input/output error") {
				t.Fatalf("an append whose %s failed: %v, want ErrUnavailable naming the cause", tc.name, err)
			}
			assertHalted(t, s, 6, "input/output error")
			if _, err := os.Stat(WALPath(path)); err != nil {
				t.Fatalf("the log is gone after the failure: %v", err)
			}
			c, err := Open(path, Options{})
			if err != nil {
				t.Fatalf("open after the failure: %v", err)
			}
			defer c.Close()
			// The append whose sync failed may be there or not: it was
			// never acknowledged. Every acknowledged one is.
			st, err := c.Load(t.Context(), "run-a")
			if err != nil || st.Version < 5 {
				t.Fatalf("after the failure: run-a at version %d, %v; want at least 5", st.Version, err)
			}
		})
	}
}

// TestErasureWhoseCutFailsFails: a deletion returns success only once the
// log no longer holds the run: a failed sync of the log's cut fails it,
// and halts the store.
func TestErasureWhoseCutFailsFails(t *testing.T) {
	s, _ := walStore(t, 4)
	ended := &reinv1.Event{RunId: "run-a", Sequence: 5, RecordedAt: timestamppb.Now(), Actor: "harness",
		Payload: &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{
			From: reinv1.RunStatus_RUN_STATUS_RUNNING, To: reinv1.RunStatus_RUN_STATUS_COMPLETED,
		}}}
	if _, err := s.Append(t.Context(), "run-a", 4, []*reinv1.Event{ended}); err != nil {
		t.Fatal(err)
	}
	f := withFaultyLog(s)
	f.set(true, false)
	_, deleted, err := s.Delete(t.Context(), &reinv1.RunDeletion{RunId: "run-a", DeletedBy: "principal:test", DeletedAt: timestamppb.Now()})
	if err == nil || deleted || !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("a deletion whose cut of the log failed: deleted %v, %v; want ErrUnavailable", deleted, err)
	}
	select {
	case <-s.Failed():
	default:
		t.Fatal("the store goes on after a failed cut of its log")
	}
}

// mountFull mounts a tmpfs of size on a new directory for the test.
func mountFull(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", dir).Run() })
	return dir
}

// fillUp writes a file at path until the disk is full.
func fillUp(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for buf := make([]byte, 4096); ; {
		if _, err := f.Write(buf); err != nil {
			return
		}
	}
}

// TestFailedCheckpointHalts: a checkpoint whose bbolt commit fails (a full
// disk) stops the writer (bbolt promises nothing of a transaction after a
// failed commit), Close reports it and leaves the log; an Open on the
// still-full disk fails with an error (it panicked once, abandoning a log
// it had not yet opened); with room, every acknowledged append is back.
func TestFailedCheckpointHalts(t *testing.T) {
	dir := mountFull(t, "4M")
	path := filepath.Join(dir, "rein.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Create(t.Context(), startEvent("run-a")); err != nil {
		t.Fatal(err)
	}
	// Enough to need pages the file does not have.
	appendTo(t, s, 1, 120)
	filler := filepath.Join(dir, "filler")
	fillUp(t, filler)
	if err := s.checkpoint(); !errors.Is(err, store.ErrUnavailable) || !errors.Is(s.Failure(), store.ErrUnavailable) {
		t.Fatalf("a checkpoint on a full disk: %v, want ErrUnavailable", err)
	}
	assertHalted(t, s, 120, "disk is full")
	if _, err := os.Stat(WALPath(path)); err != nil {
		t.Fatalf("the log is gone after the failed checkpoint: %v", err)
	}
	if c, err := Open(path, Options{}); err == nil {
		_ = c.Close()
		t.Fatal("open on the still-full disk applied the log")
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	c, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("open with room again: %v", err)
	}
	defer c.Close()
	assertRunA(t, c, 120)
}

// TestLogThatCannotBeMadeFailsOpen: a store that cannot make its log does
// not open, rather than commit through bbolt on a log it never made. Its
// twin: with room, it opens.
func TestLogThatCannotBeMadeFailsOpen(t *testing.T) {
	dir := mountFull(t, "1M")
	path := filepath.Join(dir, "rein.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(dir, "filler")
	fillUp(t, filler)
	if c, err := Open(path, Options{}); err == nil || !errors.Is(err, store.ErrDiskFull) || !strings.Contains(err.Error(), WALPath(path)) {
		if c != nil {
			_ = c.Close()
		}
		t.Fatalf("open with no room for the log: %v, want ErrDiskFull naming the log", err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	c, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("open with room: %v", err)
	}
	_ = c.Close()
}

// TestCheckAppliesTheLog: rein check applies the log's records as Open does
// (applyRecords), so a record that does not apply is a problem, as it is a
// refused Open; the twin, a record that applies, is none.
func TestCheckAppliesTheLog(t *testing.T) {
	s, _ := walStore(t, 3)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		expected uint64
		problem  bool
	}{{expected: 9, problem: true}, {expected: 3}} {
		logRecord(t, s.path, tc.expected)
		problems, err := Check(s.path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got := mentionsText(problems, "does not apply"); got != tc.problem {
			t.Errorf("check with a record of an append at version %d: %v; want a record that does not apply: %v", tc.expected, problems, tc.problem)
		}
	}
}

// logRecord writes beside the closed store at path a log of one record: an
// append to run-a at version expected.
func logRecord(t *testing.T, path string, expected uint64) {
	t.Helper()
	if err := os.Remove(WALPath(path)); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	c, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	id, applied, err := walMeta(path, c.db)
	_ = c.Close()
	if err != nil {
		t.Fatal(err)
	}
	wal, err := createRequestsWAL(WALPath(path), id)
	if err != nil {
		t.Fatal(err)
	}
	defer wal.close()
	ev := markedEvent("run-a", expected+1)
	req := &writeReq{runID: "run-a", expected: expected, events: []*reinv1.Event{ev}, encoded: [][]byte{sealed(t, ev)}}
	rec, _ := appendBatch(wal.record(), []*writeReq{req}, []writeRes{{}})
	if err := wal.append(applied+1, rec); err != nil {
		t.Fatal(err)
	}
}
