package bolt

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, dir string) store.Store {
		s, err := Open(filepath.Join(dir, "rein.db"), Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func startEvent(runID string) *reinv1.Event {
	return &reinv1.Event{
		RunId: runID, Sequence: 1, RecordedAt: timestamppb.Now(), Actor: "harness",
		Payload: &reinv1.Event_RunStarted{RunStarted: &reinv1.RunStarted{
			Contract: &reinv1.TaskContract{Goal: "g"}, Tenant: "t", RequestId: "req-" + runID,
		}},
	}
}

func stepEvent(runID string, seq uint64) *reinv1.Event {
	return &reinv1.Event{
		RunId: runID, Sequence: seq, RecordedAt: timestamppb.Now(), Actor: "harness",
		Payload: &reinv1.Event_ModelRequested{ModelRequested: &reinv1.ModelRequested{Step: 1}},
	}
}

// populated makes a store file with a few runs and returns its path.
func populated(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rein.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		if _, _, err := s.Create(context.Background(), startEvent(fmt.Sprintf("run-%04d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestOpenRefusesDamagedFiles: a file that is not a healthy rein store is
// refused at open with an error naming the path, and left byte-for-byte
// unchanged.
func TestOpenRefusesDamagedFiles(t *testing.T) {
	cases := []struct {
		name string
		make func(t *testing.T) string
		want string
	}{
		{"truncated", func(t *testing.T) string {
			// Cut into the pages the file's header says hold data (the
			// file may have room preallocated beyond them).
			path := populated(t)
			db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			var used int64
			_ = db.View(func(tx *bbolt.Tx) error { used = tx.Size(); return nil })
			_ = db.Close()
			if err := os.Truncate(path, used-4096); err != nil {
				t.Fatal(err)
			}
			return path
		}, "truncated"},
		{"truncated to one page", func(t *testing.T) string {
			path := populated(t)
			data, _ := os.ReadFile(path)
			if err := os.WriteFile(path, data[:4096], 0o600); err != nil {
				t.Fatal(err)
			}
			return path
		}, "not a valid rein store"},
		{"random bytes", func(t *testing.T) string {
			path := filepath.Join(t.TempDir(), "rein.db")
			data := make([]byte, 64<<10)
			_, _ = rand.Read(data)
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
			return path
		}, "not a valid rein store"},
		{"text file", func(t *testing.T) string {
			path := filepath.Join(t.TempDir(), "notes.txt")
			if err := os.WriteFile(path, []byte(strings.Repeat("not a database\n", 1000)), 0o600); err != nil {
				t.Fatal(err)
			}
			return path
		}, "not a valid rein store"},
		{"empty file", func(t *testing.T) string {
			path := filepath.Join(t.TempDir(), "rein.db")
			if err := os.WriteFile(path, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			return path
		}, "empty"},
		{"another program's bbolt file", func(t *testing.T) string {
			path := filepath.Join(t.TempDir(), "other.db")
			db, err := bbolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Update(func(tx *bbolt.Tx) error {
				b, err := tx.CreateBucket([]byte("widgets"))
				if err != nil {
					return err
				}
				return b.Put([]byte("k"), []byte("v"))
			}); err != nil {
				t.Fatal(err)
			}
			_ = db.Close()
			return path
		}, "not a rein store"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.make(t)
			before, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			s, err := Open(path, Options{})
			if err == nil {
				s.Close()
				t.Fatal("Open accepted a damaged file")
			}
			if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q should name %s and say %q", err, path, tc.want)
			}
			after, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(before, after) {
				t.Errorf("the refused file changed: %d bytes before, %d after", len(before), len(after))
			}
		})
	}
}

// TestOpenHealthyFile is the twin: a healthy file opens and keeps its runs.
func TestOpenHealthyFile(t *testing.T) {
	path := populated(t)
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	page, err := s.List(context.Background(), store.Filter{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Runs) != 50 {
		t.Fatalf("got %d runs after reopen, want 50", len(page.Runs))
	}
}

func TestOpenLockedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rein.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	second, err := Open(path, Options{LockTimeout: 50 * time.Millisecond})
	if err == nil {
		second.Close()
		t.Fatal("a second Open of a file in use succeeded")
	}
	if !strings.Contains(err.Error(), "locked") || !strings.Contains(err.Error(), path) {
		t.Errorf("error %q should say the file %s is locked", err, path)
	}
}

func TestOpenDirectory(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(dir, Options{}); err == nil || !strings.Contains(err.Error(), "directory") {
		t.Fatalf("Open(dir) = %v, want an error saying it is a directory", err)
	}
}

// TestGroupCommit: appends that wait while a commit is in progress share
// the next commit.
func TestGroupCommit(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "rein.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	const runs = 64
	for i := 0; i < runs; i++ {
		if _, _, err := s.Create(ctx, startEvent(fmt.Sprintf("run-%04d", i))); err != nil {
			t.Fatal(err)
		}
	}
	release := make(chan struct{})
	var held atomic.Int64 // the size of the batch the writer holds
	var once sync.Once
	s.beforeCommit = func(n int) {
		once.Do(func() {
			held.Store(int64(n))
			<-release
		})
	}
	base := s.commits.Load()

	var wg sync.WaitGroup
	errs := make(chan error, runs)
	for i := 0; i < runs; i++ {
		wg.Add(1)
		go func(id string) {
			defer wg.Done()
			_, err := s.Append(ctx, id, 1, []*reinv1.Event{stepEvent(id, 2)})
			errs <- err
		}(fmt.Sprintf("run-%04d", i))
	}
	// The first batch holds the writer; wait for the rest to queue.
	eventually(t, "every append is held or queued", func() bool { return int(held.Load())+len(s.reqs) == runs })
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := s.commits.Load() - base; got > 2 {
		t.Errorf("%d appends took %d commits, want them to share at most 2", runs, got)
	}
}

// TestBatchIsolation: a refused append in a batch does not fail or tear the
// others that share its commit, and only the blobs of the appends taken are
// stored.
func TestBatchIsolation(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "rein.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	for _, id := range []string{"run-a", "run-b"} {
		if _, _, err := s.Create(ctx, startEvent(id)); err != nil {
			t.Fatal(err)
		}
	}
	release := make(chan struct{})
	entered := make(chan struct{})
	var once sync.Once
	s.beforeCommit = func(int) {
		once.Do(func() {
			close(entered)
			<-release
		})
	}
	first := make(chan error, 1)
	go func() {
		_, err := s.Append(ctx, "run-a", 1, []*reinv1.Event{stepEvent("run-a", 2)})
		first <- err
	}()
	<-entered
	good := make(chan error, 1)
	bad := make(chan error, 1)
	shared, goodOnly, badOnly := []byte("in both appends"), []byte("in the good append"), []byte("in the bad append")
	go func() {
		_, err := s.Append(ctx, "run-b", 1, []*reinv1.Event{stepEvent("run-b", 2)}, store.WithBlobs(blobSet(shared, goodOnly)))
		good <- err
	}()
	go func() {
		// Two events where the second is out of sequence: refused whole.
		_, err := s.Append(ctx, "run-a", 2, []*reinv1.Event{stepEvent("run-a", 3), stepEvent("run-a", 5)}, store.WithBlobs(blobSet(shared, badOnly)))
		bad <- err
	}()
	eventually(t, "both appends queued", func() bool { return len(s.reqs) == 2 })
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-good; err != nil {
		t.Fatalf("the valid append in the batch failed: %v", err)
	}
	if err := <-bad; err == nil {
		t.Fatal("the invalid append was accepted")
	}
	evs, err := s.Events(ctx, "run-a", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 {
		t.Errorf("run-a has %d events, want 2 (nothing of the refused append)", len(evs))
	}
	st, err := s.Load(ctx, "run-b")
	if err != nil || st.Version != 2 {
		t.Errorf("run-b at version %d (%v), want 2", st.Version, err)
	}
	for _, b := range [][]byte{shared, goodOnly} {
		if got, err := s.Blobs(ctx, "run-b", []string{store.BlobHash(b)}); err != nil || !bytes.Equal(got[store.BlobHash(b)], b) {
			t.Errorf("Blobs(run-b, %q) = %q, %v: the good append's blobs must be stored", b, got, err)
		}
	}
	for _, b := range [][]byte{shared, badOnly} {
		if _, err := s.Blobs(ctx, "run-a", []string{store.BlobHash(b)}); !errors.Is(err, store.ErrNoBlob) {
			t.Errorf("Blobs(run-a, %q) of the refused append: %v, want ErrNoBlob", b, err)
		}
	}
}

func blobSet(contents ...[]byte) map[string][]byte {
	m := map[string][]byte{}
	for _, c := range contents {
		m[store.BlobHash(c)] = c
	}
	return m
}

// TestOpenFileWithoutBlobs: a store file written before blobs existed (no
// blobs bucket) opens, keeps its runs, and takes blobs.
func TestOpenFileWithoutBlobs(t *testing.T) {
	path := populated(t)
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bbolt.Tx) error { return tx.DeleteBucket(bucketBlobs) }); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("Open of a file without a blobs bucket: %v", err)
	}
	defer s.Close()
	ctx := context.Background()
	if _, err := s.Blobs(ctx, "run-0000", []string{store.BlobHash(nil)}); !errors.Is(err, store.ErrNoBlob) {
		t.Fatalf("Blobs in the old file: %v, want ErrNoBlob", err)
	}
	blob := []byte("the first blob of an old file")
	if _, err := s.Append(ctx, "run-0000", 1, []*reinv1.Event{stepEvent("run-0000", 2)}, store.WithBlobs(blobSet(blob))); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Blobs(ctx, "run-0000", []string{store.BlobHash(blob)}); err != nil || !bytes.Equal(got[store.BlobHash(blob)], blob) {
		t.Fatalf("Blobs = %q, %v; want %q", got, err, blob)
	}
	page, err := s.List(ctx, store.Filter{Limit: 100})
	if err != nil || len(page.Runs) != 50 {
		t.Fatalf("List: %d runs, %v; want 50", len(page.Runs), err)
	}
}

// eventually polls cond until it holds, failing the test after 10s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}
