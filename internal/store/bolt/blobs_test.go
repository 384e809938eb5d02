package bolt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	bbolt "go.etcd.io/bbolt"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
)

// TestBlobsKeptWithTheirRun: an append's blobs are stored in its run's
// bucket, under the sequence of the append's first event, so a run's blobs
// sort in the order they came; none goes to the store-wide bucket. Another
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
	for i := range 20 {
		c := fmt.Appendf(nil, "the observation of step %d", i)
		contents = append(contents, c)
		ev := stepEvent("run-a", uint64(i+2))
		ev.GetModelRequested().Resumed = i > 0 // the same call, sent again
		if err := s.Append(ctx, "run-a", uint64(i+1), []*reinv1.Event{ev}, store.WithBlobs(blobSet(c))); err != nil {
			t.Fatal(err)
		}
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
		bb := runBucket(tx, "run-a").Bucket(keyBlobs)
		if bb == nil {
			t.Fatal("run-a has no blobs bucket")
		}
		i := 0
		err := bb.ForEach(func(k, v []byte) error {
			if want := blobKey(uint64(i+2), store.BlobHash(contents[i])); !bytes.Equal(k, want) || !bytes.Equal(v, contents[i]) {
				t.Errorf("blob %d stored under %x (%q), want %x (%q)", i, k, v, want, contents[i])
			}
			i++
			return nil
		})
		if i != len(contents) {
			t.Errorf("run-a's blobs bucket holds %d blobs, want %d", i, len(contents))
		}
		return err
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
	blob := []byte("a step's input")
	path := fileWithBlob(t, blob)
	ctx := context.Background()
	if problems, err := Check(path, Options{}); err != nil || len(problems) != 0 {
		t.Fatalf("Check of a healthy store: %v, %v", problems, err)
	}
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bbolt.Tx) error {
		return runBucket(tx, "run-a").Bucket(keyBlobs).Put(blobKey(2, store.BlobHash(blob)), []byte("changed"))
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
	if len(problems) != 1 || problems[0].RunID != "run-a" || !strings.Contains(problems[0].Text, store.BlobHash(blob)) {
		t.Errorf("Check found %v; want run-a's damaged blob", problems)
	}
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Blobs(ctx, "run-a", []string{store.BlobHash(blob)}); !errors.Is(err, store.ErrDataLoss) {
		t.Errorf("Blobs(damaged) = %v, want ErrDataLoss", err)
	}
}

// fileWithBlob is the path of a closed store holding run-a, whose second
// event's append brought blob.
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
	if err := s.Append(ctx, "run-a", 1, []*reinv1.Event{stepEvent("run-a", 2)}, store.WithBlobs(blobSet(blob))); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}
