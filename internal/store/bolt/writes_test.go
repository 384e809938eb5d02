package bolt

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"

	bbolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
)

// dump is every bucket's sequence and every key and value of the file at
// path, by bucket path, without meta/wal-applied (which a checkpoint sets).
func dump(t *testing.T, path string) map[string]string {
	t.Helper()
	db, err := bbolt.Open(path, 0o400, &bbolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	out := map[string]string{}
	var walk func(prefix string, b *bbolt.Bucket) error
	walk = func(prefix string, b *bbolt.Bucket) error {
		out[prefix+" sequence"] = fmt.Sprint(b.Sequence())
		return b.ForEach(func(k, v []byte) error {
			if v == nil {
				return walk(prefix+"/"+string(k), b.Bucket(k))
			}
			if prefix == "/meta" && string(k) == string(keyWALApplied) {
				return nil
			}
			out[prefix+"/"+string(k)] = string(v)
			return nil
		})
	}
	if err := db.View(func(tx *bbolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bbolt.Bucket) error { return walk("/"+string(name), b) })
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRecoveryIsWhatWasWritten: the log holds what each commit wrote, so a
// crash image opened (its records put again, blind) holds byte for byte what
// the same store holds after its last checkpoint: creates, appends with small and
// large blobs, a lease taken, a run ending (the status index, the ended
// index, a status change and its sequence). A write the log missed would
// differ here.
func TestRecoveryIsWhatWasWritten(t *testing.T) {
	s, path := walStore(t, 5)
	ctx := t.Context()
	small, large := []byte("a small blob"), bytes.Repeat([]byte("L"), inlineBlobBytes+1)
	blobs := blobSet(small, large)
	if _, err := s.Append(ctx, "run-a", 5, []*reinv1.Event{markedEvent("run-a", 6)}, store.WithBlobs(blobs)); err != nil {
		t.Fatal(err)
	}
	var epoch uint64
	if _, err := s.Append(ctx, "run-a", 6, []*reinv1.Event{markedEvent("run-a", 7)}, store.WithAcquire("node-1", &epoch)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Create(ctx, startEvent("run-b")); err != nil {
		t.Fatal(err)
	}
	ended := &reinv1.Event{RunId: "run-b", Sequence: 2, RecordedAt: timestamppb.Now(), Actor: "harness",
		Payload: &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{
			From: reinv1.RunStatus_RUN_STATUS_RUNNING, To: reinv1.RunStatus_RUN_STATUS_COMPLETED,
		}}}
	if _, err := s.Append(ctx, "run-b", 1, []*reinv1.Event{ended}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, "run-b", "node-2"); err != nil {
		t.Fatal(err)
	}
	image := crashImage(t, s)
	if recs, err := walRecords(WALPath(image)); err != nil || len(recs) < 10 {
		t.Fatalf("the image's log: %d records, %v; want every commit since the open", len(recs), err)
	}
	if err := s.Close(); err != nil { // a checkpoint, the last
		t.Fatal(err)
	}
	want := dump(t, path)
	c, err := Open(image, Options{})
	if err != nil {
		t.Fatalf("open the crash image: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	got := dump(t, image)
	keys := map[string]bool{}
	for k := range want {
		keys[k] = true
	}
	for k := range got {
		keys[k] = true
	}
	var diff []string
	for k := range keys {
		if got[k] != want[k] {
			diff = append(diff, fmt.Sprintf("%s: recovered %q, written %q", k, trim(got[k]), trim(want[k])))
		}
	}
	sort.Strings(diff)
	if len(diff) > 0 {
		t.Fatalf("the recovered file is not what was written:\n%s", strings.Join(diff, "\n"))
	}
	if problems, err := Check(image, Options{}); err != nil || len(problems) != 0 {
		t.Fatalf("check the recovered store: %v, %v", problems, err)
	}
}

func trim(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// TestNewBucketIsLogged: a write to a bucket the log knows nothing of (an
// outbox, say), made in a commit's transaction, is in the log and back
// after a crash, with no code of its own; so is its deletion. The twin: a
// record whose bucket is not in the store does not apply, and Open says so.
func TestNewBucketIsLogged(t *testing.T) {
	s, _ := walStore(t, 2)
	commit := func(write func(w *wtx) error) {
		t.Helper()
		s.txMu.Lock()
		defer s.txMu.Unlock()
		if s.tx == nil {
			var err error
			if s.tx, err = s.db.Begin(true); err != nil {
				t.Fatal(err)
			}
		}
		w := &wtx{tx: s.tx, rec: s.wal.record()}
		if err := write(w); err != nil {
			t.Fatal(err)
		}
		if err := s.wal.append(s.logged+1, w.rec); err != nil {
			t.Fatal(err)
		}
		s.logged++
	}
	commit(func(w *wtx) error {
		meta := w.Bucket(bucketMeta)
		outbox, err := meta.CreateBucketIfNotExists([]byte("outbox"))
		if err != nil {
			return err
		}
		for _, k := range []string{"hook-1", "hook-2"} {
			if err := outbox.Put([]byte(k), []byte("deliver "+k)); err != nil {
				return err
			}
		}
		_, err = outbox.NextSequence()
		return err
	})
	commit(func(w *wtx) error { return w.Bucket(bucketMeta).Bucket([]byte("outbox")).Delete([]byte("hook-1")) })
	image := crashImage(t, s)
	c, err := Open(image, Options{})
	if err != nil {
		t.Fatalf("open the crash image: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	got := dump(t, image)
	if got["/meta/outbox/hook-2"] != "deliver hook-2" || got["/meta/outbox sequence"] != "1" {
		t.Fatalf("the outbox after recovery: %v", got)
	}
	if _, ok := got["/meta/outbox/hook-1"]; ok {
		t.Fatal("the deleted hook-1 is back after recovery")
	}

	// The twin: a put into a bucket the store does not hold.
	commit(func(w *wtx) error {
		b := &wbucket{w: w, b: w.tx.Bucket(bucketMeta), path: [][]byte{[]byte("no-such-bucket")}}
		return b.Put([]byte("k"), []byte("v"))
	})
	image = crashImage(t, s)
	file := readFile(t, image)
	if _, err := Open(image, Options{}); err == nil || !strings.Contains(err.Error(), "does not apply") || !strings.Contains(err.Error(), "no-such-bucket") {
		t.Fatalf("open with a record whose bucket is missing: %v, want it refused naming the bucket", err)
	}
	if !bytes.Equal(file, readFile(t, image)) {
		t.Fatal("a refused open changed the file")
	}
}

// TestRequestsLogAppliedOnce: a log of requests that a crash of the previous
// rein left is applied, once, with that format's code, and the log made
// anew holds results; the store then goes on.
func TestRequestsLogAppliedOnce(t *testing.T) {
	s, _ := walStore(t, 3)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	logRecord(t, s.path, 3) // a log of requests: an append at version 3
	c, err := Open(s.path, Options{})
	if err != nil {
		t.Fatalf("open beside a log of requests: %v", err)
	}
	defer c.Close()
	if st, err := c.Load(t.Context(), "run-a"); err != nil || st.Version != 4 {
		t.Fatalf("run-a at version %d, %v; want 4, the logged request's", st.Version, err)
	}
	if got := string(readFile(t, WALPath(s.path))[:len(walMagic)]); got != walMagic {
		t.Fatalf("the log made anew starts %q, want %q", got, walMagic)
	}
	appendTo(t, c, 4, 6)
	image := crashImage(t, c)
	r, err := Open(image, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if st, err := r.Load(t.Context(), "run-a"); err != nil || st.Version != 6 {
		t.Fatalf("after a crash with the new log: run-a at version %d, %v; want 6", st.Version, err)
	}
}

// TestUnknownWriteKindRefused: a record with a write of a kind this rein
// does not know (a newer rein's log) is refused, never skipped.
func TestUnknownWriteKindRefused(t *testing.T) {
	db, err := bbolt.Open(t.TempDir()+"/x.db", 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bbolt.Tx) error {
		if _, err := tx.CreateBucket([]byte("b")); err != nil {
			return err
		}
		good := appendBytes(appendBytes(appendBytes([]byte{writePut, 1}, []byte("b")), []byte("k")), []byte("v"))
		if err := applyWrites(tx, good); err != nil {
			return fmt.Errorf("a put: %w", err)
		}
		if got := string(tx.Bucket([]byte("b")).Get([]byte("k"))); got != "v" {
			return fmt.Errorf("the put stored %q", got)
		}
		bad := append(bytes.Clone(good), 9|writeSamePath)
		if err := applyWrites(tx, bad); err == nil || !strings.Contains(err.Error(), "kind 9") {
			return fmt.Errorf("a write of kind 9: %v, want it refused", err)
		}
		for i := 1; i < len(good); i++ {
			if err := applyWrites(tx, good[:i]); err == nil {
				return fmt.Errorf("a record cut to %d of %d bytes applied", i, len(good))
			}
		}
		return errors.New("roll back")
	})
	if err == nil || err.Error() != "roll back" {
		t.Fatal(err)
	}
}
