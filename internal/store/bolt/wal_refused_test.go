package bolt

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
)

// The store's log refused: another store's, one ahead of its file, a
// record that does not apply, a FIFO, a batch cut short.

// TestForeignLogRefused: a log beside a file of another store (a file
// replaced, or removed and made anew) is refused, with both files left as
// they were; with no record in it, it is not.
func TestForeignLogRefused(t *testing.T) {
	s, _ := walStore(t, 5)
	image := crashImage(t, s)
	other, _ := walStore(t, 3)
	otherImage := crashImage(t, other)
	// The other store's file, with this one's log beside it.
	if err := os.WriteFile(WALPath(otherImage), readFile(t, WALPath(image)), 0o600); err != nil {
		t.Fatal(err)
	}
	file, log := readFile(t, otherImage), readFile(t, WALPath(otherImage))
	_, err := Open(otherImage, Options{})
	if !errors.Is(err, store.ErrDataLoss) || !strings.Contains(err.Error(), "another store's") {
		t.Fatalf("open beside another store's log: %v, want ErrDataLoss naming it", err)
	}
	if !bytes.Equal(file, readFile(t, otherImage)) || !bytes.Equal(log, readFile(t, WALPath(otherImage))) {
		t.Fatal("a refused open changed the file or the log")
	}
	if _, err := Open(otherImage, Options{ReadOnly: true}); !errors.Is(err, store.ErrDataLoss) {
		t.Fatalf("open read-only beside another store's log: %v, want ErrDataLoss", err)
	}
	// The twin: an empty log of another store is no commit lost.
	if err := os.WriteFile(WALPath(otherImage), log[:walHeaderLen], 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Open(otherImage, Options{})
	if err != nil {
		t.Fatalf("open beside another store's empty log: %v", err)
	}
	_ = c.Close()
}

// TestLogAheadOfFileRefused: a file older than its log (a backup restored
// beside the log of a later checkpoint) is refused: the records between are
// missing.
func TestLogAheadOfFileRefused(t *testing.T) {
	s, path := walStore(t, 5)
	if err := s.checkpoint(); err != nil {
		t.Fatal(err)
	}
	old := crashImage(t, s)
	appendTo(t, s, 5, 8)
	if err := s.checkpoint(); err != nil {
		t.Fatal(err)
	}
	appendTo(t, s, 8, 10)
	if err := os.WriteFile(WALPath(old), readFile(t, WALPath(path)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Open(old, Options{})
	if !errors.Is(err, store.ErrDataLoss) || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("open a file older than its log: %v, want ErrDataLoss saying records are missing", err)
	}
	// The twin: the current file with the same log opens with every append.
	c, err := Open(crashImage(t, s), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	assertRunA(t, c, 10)
}

// TestRecordThatDoesNotApplyRefused: a log whose record the file refuses (an
// append at a version the run is not at) is refused at Open, not skipped.
func TestRecordThatDoesNotApplyRefused(t *testing.T) {
	s, _ := walStore(t, 3)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	c, err := Open(s.path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	id, applied, err := walMeta(s.path, c.db)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	wal, err := createRequestsWAL(WALPath(s.path), id)
	if err != nil {
		t.Fatal(err)
	}
	ev := markedEvent("run-a", 10)
	req := &writeReq{runID: "run-a", expected: 9, events: []*reinv1.Event{ev}, encoded: [][]byte{sealed(t, ev)}}
	rec, _ := appendBatch(wal.record(), []*writeReq{req}, []writeRes{{}})
	if err := wal.append(applied+1, rec); err != nil {
		t.Fatal(err)
	}
	_ = wal.close()
	file := readFile(t, s.path)
	if _, err := Open(s.path, Options{}); err == nil || !strings.Contains(err.Error(), "does not apply") {
		t.Fatalf("open with a record that does not apply: %v", err)
	}
	if !bytes.Equal(file, readFile(t, s.path)) {
		t.Fatal("a refused open changed the file")
	}
	// The twin: the record at the run's version applies.
	req.expected, ev.Sequence = 3, 4
	req.encoded = [][]byte{sealed(t, ev)}
	if wal, err = createRequestsWAL(WALPath(s.path), id); err != nil {
		t.Fatal(err)
	}
	rec, _ = appendBatch(wal.record(), []*writeReq{req}, []writeRes{{}})
	if err := wal.append(applied+1, rec); err != nil {
		t.Fatal(err)
	}
	_ = wal.close()
	c, err = Open(s.path, Options{})
	if err != nil {
		t.Fatalf("open with a record that applies: %v", err)
	}
	defer c.Close()
	if st, err := c.Load(t.Context(), "run-a"); err != nil || st.Version != 4 {
		t.Fatalf("run-a at version %d, %v; want 4", st.Version, err)
	}
}

// TestDecodeBatchRefusesDamage: a batch cut anywhere, or of an unknown
// kind, is an error, never a panic or a request made up.
func TestDecodeBatchRefusesDamage(t *testing.T) {
	ev := markedEvent("run-a", 2)
	reqs := []*writeReq{
		{runID: "run-a", expected: 1, events: []*reinv1.Event{ev}, encoded: [][]byte{sealed(t, ev)}, blobs: blobSet([]byte("b1"))},
		{runID: "run-a", acquire: true, owner: "node-1"},
	}
	body, n := appendBatch(nil, reqs, make([]writeRes, 2))
	if n != 2 {
		t.Fatalf("encoded %d requests, want 2", n)
	}
	got, err := decodeBatch(body)
	if err != nil || len(got) != 2 || got[0].expected != 1 || len(got[0].blobs) != 1 || !got[1].acquire || got[1].owner != "node-1" {
		t.Fatalf("decode the whole batch: %v, %+v", err, got)
	}
	for i := range body {
		if _, err := decodeBatch(body[:i]); err == nil {
			t.Fatalf("a batch cut to %d of %d bytes decoded", i, len(body))
		}
	}
	bad := bytes.Clone(body)
	bad[1] = 9 // the first request's kind
	if _, err := decodeBatch(bad); err == nil || !strings.Contains(err.Error(), "kind 9") {
		t.Fatalf("a batch of kind 9: %v", err)
	}
}

// TestHostileLog: a log that is a FIFO is refused at Open without blocking
// on it, and a log grown to 8 GiB (sparse) is read only as far as the
// writer ever writes: its records apply and the rest is not read.
func TestHostileLog(t *testing.T) {
	s, _ := walStore(t, 6)
	image := crashImage(t, s)
	if err := os.Truncate(WALPath(image), 8<<30); err != nil {
		t.Fatal(err)
	}
	c, err := Open(image, Options{})
	if err != nil {
		t.Fatalf("open beside an 8 GiB log: %v", err)
	}
	assertRunA(t, c, 6)
	_ = c.Close()

	fifo := crashImage(t, s)
	if err := os.Remove(WALPath(fifo)); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(WALPath(fifo), 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	if _, err := Open(fifo, Options{}); !errors.Is(err, store.ErrDataLoss) || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("open beside a FIFO for a log: %v, want ErrDataLoss saying it is not a regular file", err)
	}
}
