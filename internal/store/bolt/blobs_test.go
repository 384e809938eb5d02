package bolt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	bbolt "go.etcd.io/bbolt"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
)

// TestBlobsKeptWithTheirRun: an append's blobs are stored with its run,
// under the sequence of the append's first event, so a run's blobs sort in
// the order they came: a small one in the run's events bucket, right after
// the event it starts with (the log reads as its events alone), a large one
// in the run's blobs bucket; none goes to the store-wide bucket. Another
// run does not find them.
func TestBlobsKeptWithTheirRun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rein.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, id := range []string{"run-a", "run-b"} {
		if _, _, err := s.Create(ctx, startEvent(id)); err != nil {
			t.Fatal(err)
		}
	}
	var contents [][]byte
	large := bytes.Repeat([]byte("a large tool output "), inlineBlobBytes/10)
	for i := range 20 {
		c := fmt.Appendf(nil, "the observation of step %d", i)
		contents = append(contents, c)
		ev := stepEvent("run-a", uint64(i+2))
		ev.GetModelRequested().Resumed = i > 0 // the same call, sent again
		blobs := blobSet(c)
		if i == 10 {
			blobs = blobSet(c, large)
		}
		if _, err := s.Append(ctx, "run-a", uint64(i+1), []*reinv1.Event{ev}, store.WithBlobs(blobs)); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := s.Events(ctx, "run-a", 0, 100)
	if err != nil || len(evs) != 21 {
		t.Fatalf("Events(run-a) = %d events, %v; want the 21 appended and no blob", len(evs), err)
	}
	for i, ev := range evs {
		if ev.GetSequence() != uint64(i+1) {
			t.Fatalf("event %d has sequence %d", i, ev.GetSequence())
		}
	}
	for _, check := range benchBlobChecks {
		check(t, s)
	}
	got, err := s.Blobs(ctx, "run-a", []string{store.BlobHash(large), store.BlobHash(contents[19]), store.BlobHash(contents[0])})
	if err != nil || !bytes.Equal(got[store.BlobHash(large)], large) || !bytes.Equal(got[store.BlobHash(contents[0])], contents[0]) {
		t.Errorf("Blobs(run-a: the large one and two small) = %d blobs, %v", len(got), err)
	}
	if _, err := s.Blobs(ctx, "run-b", []string{store.BlobHash(contents[0])}); !errors.Is(err, store.ErrNoBlob) {
		t.Errorf("Blobs(run-b, run-a's blob): %v, want ErrNoBlob", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.View(func(tx *bbolt.Tx) error {
		if n := tx.Bucket(bucketBlobs).Stats().KeyN; n != 0 {
			t.Errorf("the store-wide blobs bucket holds %d blobs, want 0", n)
		}
		var keys, values [][]byte
		_ = runBucket(tx, "run-a").Bucket(keyEvents).ForEach(func(k, v []byte) error {
			keys, values = append(keys, bytes.Clone(k)), append(values, bytes.Clone(v))
			return nil
		})
		// The blobs of the append at 12 are the small one and the large
		// one: each has its place among them in hash order.
		at12 := []string{store.BlobHash(contents[10]), store.BlobHash(large)}
		slices.Sort(at12)
		var want, wantValues [][]byte
		for seq := uint64(1); seq <= 21; seq++ {
			want, wantValues = append(want, seqKey(seq)), append(wantValues, nil)
			if seq >= 2 {
				c := contents[seq-2]
				place := 0
				if seq == 12 {
					place = slices.Index(at12, store.BlobHash(c))
				}
				want, wantValues = append(want, blobKey(seq, place)), append(wantValues, blobValue(store.BlobHash(c), c))
			}
		}
		if len(keys) != len(want) {
			t.Fatalf("run-a's events bucket holds %d keys, want %d (each event, then its append's small blob)", len(keys), len(want))
		}
		for i := range want {
			if !bytes.Equal(keys[i], want[i]) {
				t.Errorf("key %d of run-a's events bucket is %x, want %x", i, keys[i], want[i])
			}
			if len(want[i]) != 8 && len(keys[i]) > 10 {
				t.Errorf("blob key %x is %d bytes; a short key is the sequence and a place", keys[i], len(keys[i]))
			}
			if wantValues[i] != nil && !bytes.Equal(values[i], wantValues[i]) {
				t.Errorf("blob %x holds %x, want its SHA-256 then its content", keys[i], values[i])
			}
		}
		bb := runBucket(tx, "run-a").Bucket(keyBlobs)
		if bb == nil || bb.Stats().KeyN != 1 {
			t.Fatal("run-a's blobs bucket does not hold the one large blob")
		}
		h := store.BlobHash(large)
		if v := bb.Get(blobKey(12, slices.Index(at12, h))); !bytes.Equal(v, blobValue(h, large)) {
			t.Errorf("the large blob is not under its append's sequence and place")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestBlobsOfAnOlderFile: a blob in the store-wide bucket (where files
// written before blobs were kept with their runs hold them) is still found
// through any run, beside one kept with the run; one damaged there is
// ErrDataLoss, and rein check names it.
func TestBlobsOfAnOlderFile(t *testing.T) {
	kept := []byte("kept with the run")
	path := fileWithBlob(t, kept)
	ctx := context.Background()
	old, damagedBlob := []byte("stored by an older rein"), []byte("damaged since")
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bbolt.Tx) error {
		bb := tx.Bucket(bucketBlobs)
		if err := bb.Put([]byte(store.BlobHash(old)), old); err != nil {
			return err
		}
		return bb.Put([]byte(store.BlobHash(damagedBlob)), []byte("not what was stored"))
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Blobs(ctx, "run-a", []string{store.BlobHash(kept), store.BlobHash(old)})
	if err != nil || !bytes.Equal(got[store.BlobHash(kept)], kept) || !bytes.Equal(got[store.BlobHash(old)], old) {
		t.Errorf("Blobs(kept, old) = %q, %v; want both", got, err)
	}
	if _, err := s.Blobs(ctx, "run-a", []string{store.BlobHash(damagedBlob)}); !errors.Is(err, store.ErrDataLoss) {
		t.Errorf("Blobs(damaged) = %v, want ErrDataLoss", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	problems, err := Check(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) != 1 || !strings.Contains(problems[0].Text, store.BlobHash(damagedBlob)) {
		t.Errorf("Check found %v; want the damaged blob alone", problems)
	}
}

// TestCheckFindsADamagedRunBlob: a blob kept with its run whose content no
// longer hashes to its key is a problem of that run, and reads as
// ErrDataLoss; the twin, the same file before the damage, has none.
func TestCheckFindsADamagedRunBlob(t *testing.T) {
	for _, tc := range []struct {
		name   string
		blob   []byte
		bucket []byte // where the run keeps it
	}{
		{"small", []byte("a step's input"), keyEvents},
		{"large", bytes.Repeat([]byte("a large tool output "), inlineBlobBytes/10), keyBlobs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := fileWithBlob(t, tc.blob)
			ctx := context.Background()
			if problems, err := Check(path, Options{}); err != nil || len(problems) != 0 {
				t.Fatalf("Check of a healthy store: %v, %v", problems, err)
			}
			db, err := bbolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			key := blobKey(2, 0)
			if err := db.Update(func(tx *bbolt.Tx) error {
				b := runBucket(tx, "run-a").Bucket(tc.bucket)
				v := bytes.Clone(b.Get(key))
				if v == nil {
					t.Fatalf("the %d-byte blob is not in the run's %s bucket", len(tc.blob), tc.bucket)
				}
				v[len(v)-1] ^= 0xff // the content changed, its hash kept
				return b.Put(key, v)
			}); err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			problems, err := Check(path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if len(problems) != 1 || problems[0].RunID != "run-a" || !strings.Contains(problems[0].Text, store.BlobHash(tc.blob)) {
				t.Errorf("Check found %v; want run-a's damaged blob", problems)
			}
			s, err := Open(path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if _, err := s.Blobs(ctx, "run-a", []string{store.BlobHash(tc.blob)}); !errors.Is(err, store.ErrDataLoss) {
				t.Errorf("Blobs(damaged) = %v, want ErrDataLoss", err)
			}
		})
	}
}

// fileWithBlob is the path of a closed store holding run-a, whose second
// event's append brought blob (none when blob is nil).
func fileWithBlob(t *testing.T, blob []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rein.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, _, err := s.Create(ctx, startEvent("run-a")); err != nil {
		t.Fatal(err)
	}
	var opts []store.AppendOption
	if blob != nil {
		opts = append(opts, store.WithBlobs(blobSet(blob)))
	}
	if _, err := s.Append(ctx, "run-a", 1, []*reinv1.Event{stepEvent("run-a", 2)}, opts...); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// setFormat writes format as the file's store format marker.
func setFormat(t *testing.T, path string, format []byte) {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bbolt.Tx) error { return tx.Bucket(bucketMeta).Put(keyFormat, format) }); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// forgetStoreFormat deletes the file's meta/store_format, as a build from
// before store formats left it.
func forgetStoreFormat(t *testing.T, path string) {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bbolt.Tx) error { return tx.Bucket(bucketMeta).Delete(keyStoreFormat) }); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// formatOf reads the file's store format marker.
func formatOf(t *testing.T, path string) string {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var f string
	_ = db.View(func(tx *bbolt.Tx) error { f = string(tx.Bucket(bucketMeta).Get(keyFormat)); return nil })
	return f
}

// TestFormatMarkedByTheFirstBlobInTheLog: a file of the first format opens
// (in a build that writes store format 6, as the builds that wrote such
// files did) and takes appends unchanged in format; the first append that
// keeps a blob in a run's log marks it rein-store-3, which a rein that
// knows only an earlier format refuses to open rather than read the blob
// keys as events or as damage. This build marks every file it opens
// rein-store-4 (format.go).
func TestFormatMarkedByTheFirstBlobInTheLog(t *testing.T) {
	path := fileWithBlob(t, []byte("made by this rein"))
	if got := formatOf(t, path); got != string(formatV4) {
		t.Fatalf("a file this build made is format %q, want %q", got, formatV4)
	}
	setFormat(t, path, formatV1) // as a rein of the first format left it (with no blob in a log)
	forgetStoreFormat(t, path)
	s, err := Open(path, Options{Formats: baseOnly})
	if err != nil {
		t.Fatalf("Open of a first-format file: %v", err)
	}
	ctx := context.Background()
	if _, err := s.Append(ctx, "run-a", 2, []*reinv1.Event{markedEvent("run-a", 3)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := formatOf(t, path); got != string(formatV1) {
		t.Fatalf("after an append with no blob the file is format %q, want it left %q", got, formatV1)
	}
	if s, err = Open(path, Options{Formats: baseOnly}); err != nil {
		t.Fatal(err)
	}
	ev := stepEvent("run-a", 4)
	blob := []byte("the next call's input")
	if _, err := s.Append(ctx, "run-a", 3, []*reinv1.Event{ev}, store.WithBlobs(blobSet(blob))); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := formatOf(t, path); got != string(formatV3) {
		t.Fatalf("after an append with a blob the file is format %q, want %q", got, formatV3)
	}
}

// TestBlobsOfASecondFormatFile: a rein-store-2 file keyed a blob in a run's
// log by its sequence and SHA-256, the value its content alone. Such a
// file opens; its log reads as its events, its blob is found, rein check
// finds nothing; the first blob put then marks it rein-store-3, and both
// blobs read. The twin: that old blob damaged is ErrDataLoss.
func TestBlobsOfASecondFormatFile(t *testing.T) {
	old := []byte("kept under its hash, as rein-store-2 did")
	legacy := func(t *testing.T, content []byte) string {
		path := fileWithBlob(t, nil)
		db, err := bbolt.Open(path, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		key := append(seqKey(2), blobValue(store.BlobHash(old), nil)...)
		if err := db.Update(func(tx *bbolt.Tx) error {
			if len(key) != legacyBlobKeyLen {
				t.Fatalf("legacy key of %d bytes", len(key))
			}
			return runBucket(tx, "run-a").Bucket(keyEvents).Put(key, content)
		}); err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		setFormat(t, path, formatV2)
		return path
	}
	path := legacy(t, old)
	if problems, err := Check(path, Options{}); err != nil || len(problems) != 0 {
		t.Fatalf("Check of a healthy rein-store-2 file: %v, %v", problems, err)
	}
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	evs, err := s.Events(ctx, "run-a", 0, 10)
	if err != nil || len(evs) != 2 {
		t.Fatalf("Events(run-a) = %d, %v; want its 2 events", len(evs), err)
	}
	added := []byte("put by this rein")
	if _, err := s.Append(ctx, "run-a", 2, []*reinv1.Event{markedEvent("run-a", 3)}, store.WithBlobs(blobSet(added))); err != nil {
		t.Fatal(err)
	}
	got, err := s.Blobs(ctx, "run-a", []string{store.BlobHash(old), store.BlobHash(added)})
	if err != nil || !bytes.Equal(got[store.BlobHash(old)], old) || !bytes.Equal(got[store.BlobHash(added)], added) {
		t.Errorf("Blobs(the old one, the new one) = %q, %v", got, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if f := formatOf(t, path); f != string(formatV3) {
		t.Errorf("after a blob put the file is %q, want %q", f, formatV3)
	}

	damagedPath := legacy(t, []byte("not what its key says"))
	if problems, err := Check(damagedPath, Options{}); err != nil || len(problems) != 1 || !strings.Contains(problems[0].Text, store.BlobHash(old)) {
		t.Errorf("Check of the damaged old blob: %v, %v; want it named", problems, err)
	}
	if s, err = Open(damagedPath, Options{}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Blobs(ctx, "run-a", []string{store.BlobHash(old)}); !errors.Is(err, store.ErrDataLoss) {
		t.Errorf("Blobs(the damaged old one) = %v, want ErrDataLoss", err)
	}
}

// TestNewerFormatRefused: a file a newer rein marked with a format this one
// does not know is refused at Open, saying so, and left unchanged.
func TestNewerFormatRefused(t *testing.T) {
	path := fileWithBlob(t, []byte("x"))
	setFormat(t, path, []byte("rein-store-9"))
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, Options{}); err == nil || !strings.Contains(err.Error(), "newer rein") {
		t.Fatalf("Open of a rein-store-9 file: %v, want a refusal naming a newer rein", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Error("the refused file was changed")
	}
}

// TestBlobCutShort: a blob whose stored value is too short to hold its
// hash is a problem rein check names, and reads as ErrDataLoss.
func TestBlobCutShort(t *testing.T) {
	blob := []byte("a step's input")
	path := fileWithBlob(t, blob)
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bbolt.Tx) error {
		return runBucket(tx, "run-a").Bucket(keyEvents).Put(blobKey(2, 0), []byte("short"))
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	problems, err := Check(path, Options{})
	if err != nil || len(problems) != 1 || !strings.Contains(problems[0].Text, "too short") {
		t.Errorf("Check = %v, %v; want the blob cut short named", problems, err)
	}
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Blobs(context.Background(), "run-a", []string{store.BlobHash(blob)}); !errors.Is(err, store.ErrDataLoss) {
		t.Errorf("Blobs(cut short) = %v, want ErrDataLoss", err)
	}
}
