package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
)

// blobSet is blobs keyed by their hash, as WithBlobs takes them.
func blobSet(contents ...[]byte) map[string][]byte {
	m := make(map[string][]byte, len(contents))
	for _, c := range contents {
		m[store.BlobHash(c)] = c
	}
	return m
}

// bigBlob is n bytes that do not repeat in short cycles.
func bigBlob(n int) []byte {
	b := make([]byte, n)
	x := uint32(2463534242)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

// requestedWith is a model_requested event whose input is blobs.
func requestedWith(id string, seq uint64, blobs ...[]byte) *reinv1.Event {
	e := modelRequested(id, seq, fmt.Sprintf("hash-%d", seq))
	for _, b := range blobs {
		e.GetModelRequested().InputBlobs = append(e.GetModelRequested().InputBlobs, store.BlobHash(b))
	}
	return e
}

// blobOf reads one blob of runID.
func blobOf(t *testing.T, s store.Store, runID, hash string) ([]byte, error) {
	t.Helper()
	got, err := s.Blobs(t.Context(), runID, []string{hash})
	if err != nil {
		return nil, err
	}
	if len(got) != 1 {
		t.Fatalf("Blobs(%s, one hash) returned %d blobs", runID, len(got))
	}
	return got[hash], nil
}

// assertBlob fails unless the store holds content under its hash for runID.
func assertBlob(t *testing.T, s store.Store, runID string, content []byte) {
	t.Helper()
	hash := store.BlobHash(content)
	got, err := blobOf(t, s, runID, hash)
	if err != nil {
		t.Fatalf("Blobs(%s, %.12s…): %v", runID, hash, err)
	}
	if !bytes.Equal(got, content) {
		t.Fatalf("Blobs(%s, %.12s…): %d bytes, not the %d stored", runID, hash, len(got), len(content))
	}
}

// assertNoBlob fails unless the store holds nothing under content's hash
// that runID finds.
func assertNoBlob(t *testing.T, s store.Store, runID string, content []byte) {
	t.Helper()
	hash := store.BlobHash(content)
	if got, err := blobOf(t, s, runID, hash); !errors.Is(err, store.ErrNoBlob) {
		t.Fatalf("Blobs(%s, %.12s…) = %d bytes, %v; want ErrNoBlob: the blob must not be stored", runID, hash, len(got), err)
	}
}

// testBlobsAppendThenRead: blobs appended with events are read back whole,
// a large one and an empty one included, and survive a reopen; neither the
// caller's slices nor the returned ones alias what is stored.
func testBlobsAppendThenRead(t *testing.T, h *harness) {
	sp := newSpec(1)
	mustCreate(t, h.s, runStarted(sp))
	goal, empty, big := []byte("the goal: read every invoice"), []byte{}, bigBlob(3<<20+17)
	ev := requestedWith(sp.id, 2, goal, empty, big)
	if _, err := h.s.Append(t.Context(), sp.id, 1, []*reinv1.Event{ev}, store.WithBlobs(blobSet(goal, empty, big))); err != nil {
		t.Fatalf("Append with blobs: %v", err)
	}
	log := []*reinv1.Event{runStarted(sp), ev}
	assertLog(t, h.s, sp.id, log)
	want := bytes.Clone(goal)
	goal[0] = 'X' // the caller's slice, changed after the append
	got, err := blobOf(t, h.s, sp.id, store.BlobHash(want))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("Blobs(goal) = %q, %v; want %q", got, err, want)
	}
	got[0] = 'Y' // the returned slice, changed by the reader
	assertBlob(t, h.s, sp.id, want)
	assertBlob(t, h.s, sp.id, empty)
	assertBlob(t, h.s, sp.id, big)

	// A second append of the run with more blobs, and one WithBlobs per
	// blob: options add up.
	obs := []byte("an observation")
	more := []*reinv1.Event{modelReturned(sp.id, 3), requestedWith(sp.id, 4, want, obs)}
	if _, err := h.s.Append(t.Context(), sp.id, 2, more, store.WithBlobs(blobSet(want)), store.WithBlobs(blobSet(obs))); err != nil {
		t.Fatalf("Append with two WithBlobs: %v", err)
	}
	log = append(log, more...)

	h.reopen()
	assertLog(t, h.s, sp.id, log)
	for _, b := range [][]byte{want, empty, big, obs} {
		assertBlob(t, h.s, sp.id, b)
	}
	// All of them at once, a hash asked twice among them.
	hashes := []string{store.BlobHash(obs), store.BlobHash(big), store.BlobHash(want), store.BlobHash(empty), store.BlobHash(obs)}
	all, err := h.s.Blobs(t.Context(), sp.id, hashes)
	if err != nil || len(all) != 4 {
		t.Fatalf("Blobs(four hashes, one twice) = %d blobs, %v; want 4", len(all), err)
	}
	for _, b := range [][]byte{want, empty, big, obs} {
		if got, ok := all[store.BlobHash(b)]; !ok || !bytes.Equal(got, b) {
			t.Errorf("Blobs(four hashes)[%.12s…] = %d bytes (%v), want the %d stored", store.BlobHash(b), len(got), ok, len(b))
		}
	}
}

// testBlobsDedup: a blob appended again (by the same run, by another run, by
// appends sharing one commit) is taken every time and read as stored.
func testBlobsDedup(t *testing.T, h *harness) {
	shared := []byte("a prefix every call sends")
	a, b := newSpec(1), newSpec(2)
	mustCreate(t, h.s, runStarted(a))
	mustCreate(t, h.s, runStarted(b))
	mustAppendOpts(t, h.s, a.id, 1, []*reinv1.Event{requestedWith(a.id, 2, shared)}, store.WithBlobs(blobSet(shared)))
	mustAppendOpts(t, h.s, a.id, 2, []*reinv1.Event{modelReturned(a.id, 3), requestedWith(a.id, 4, shared)}, store.WithBlobs(blobSet(shared)))
	mustAppendOpts(t, h.s, b.id, 1, []*reinv1.Event{requestedWith(b.id, 2, shared)}, store.WithBlobs(blobSet(shared)))
	assertBlob(t, h.s, a.id, shared)
	assertBlob(t, h.s, b.id, shared)

	// Many runs appending the same blob at once (a backend with group
	// commit puts several of them in one transaction).
	const runs = 16
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range runs {
		sp := newSpec(10 + i)
		mustCreate(t, h.s, runStarted(sp))
		wg.Go(func() {
			<-start
			own := []byte("the input of " + sp.id)
			_, err := h.s.Append(t.Context(), sp.id, 1, []*reinv1.Event{requestedWith(sp.id, 2, shared, own)}, store.WithBlobs(blobSet(shared, own)))
			if err != nil {
				t.Errorf("Append(%s) with a shared blob: %v", sp.id, err)
			}
		})
	}
	close(start)
	wg.Wait()
	for i := range runs {
		sp := newSpec(10 + i)
		assertBlob(t, h.s, sp.id, shared)
		assertBlob(t, h.s, sp.id, []byte("the input of "+sp.id))
		assertLog(t, h.s, sp.id, []*reinv1.Event{runStarted(sp), requestedWith(sp.id, 2, shared, []byte("the input of "+sp.id))})
	}
	h.reopen()
	assertBlob(t, h.s, a.id, shared)
	assertBlob(t, h.s, newSpec(10).id, shared)
}

// testBlobsInvalid: a blob whose key is not its content's hash refuses the
// whole append: no event, no blob (not even the valid ones beside it).
func testBlobsInvalid(t *testing.T, h *harness) {
	sp := newSpec(1)
	mustCreate(t, h.s, runStarted(sp))
	good, other := []byte("a good blob"), []byte("other content")
	upper := strings.ToUpper(store.BlobHash(good))
	for _, tc := range []struct {
		name  string
		blobs map[string][]byte
	}{
		{"another blob's hash", map[string][]byte{store.BlobHash(good): other}},
		{"beside a valid blob", map[string][]byte{store.BlobHash(good): good, store.BlobHash(other): []byte("tampered")}},
		{"upper-case hex", map[string][]byte{upper: good}},
		{"not hex", map[string][]byte{"blob-1": good}},
		{"empty key", map[string][]byte{"": good}},
		{"a hash cut short", map[string][]byte{store.BlobHash(good)[:63]: good}},
	} {
		_, err := h.s.Append(t.Context(), sp.id, 1, []*reinv1.Event{requestedWith(sp.id, 2, good)}, store.WithBlobs(tc.blobs))
		if !errors.Is(err, store.ErrInvalidBlob) {
			t.Errorf("Append(%s): err = %v, want ErrInvalidBlob", tc.name, err)
		}
		assertLog(t, h.s, sp.id, []*reinv1.Event{runStarted(sp)})
		assertNoBlob(t, h.s, sp.id, good)
		assertNoBlob(t, h.s, sp.id, other)
	}
	// The twin: the same append with the right keys is taken.
	mustAppendOpts(t, h.s, sp.id, 1, []*reinv1.Event{requestedWith(sp.id, 2, good)}, store.WithBlobs(blobSet(good)))
	assertBlob(t, h.s, sp.id, good)
	assertNoBlob(t, h.s, sp.id, other)
}

// testBlobsRefusedAppend: an append refused for its version, its events,
// its run or its lease stores none of its blobs; the twin that is taken
// stores them.
func testBlobsRefusedAppend(t *testing.T, h *harness) {
	ctx := t.Context()
	sp := newSpec(1)
	mustCreate(t, h.s, runStarted(sp))
	mustAppend(t, h.s, sp.id, 1, steps(sp.id, 2, 2)...)
	log := append([]*reinv1.Event{runStarted(sp)}, steps(sp.id, 2, 2)...)
	epoch, err := h.s.Acquire(ctx, sp.id, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.s.Acquire(ctx, sp.id, "node-b"); err != nil {
		t.Fatal(err)
	}
	missing := runID(2)
	for _, tc := range []struct {
		name     string
		runID    string
		expected uint64
		events   []*reinv1.Event
		opts     []store.AppendOption
		want     error // nil: any error
	}{
		{"stale version", sp.id, 2, []*reinv1.Event{requestedWith(sp.id, 3)}, nil, store.ErrConflict},
		{"ahead of the log", sp.id, 4, []*reinv1.Event{requestedWith(sp.id, 5)}, nil, store.ErrConflict},
		{"rejected by the fold", sp.id, 3, []*reinv1.Event{modelReturned(sp.id, 4)}, nil, nil},
		{"bad last event", sp.id, 3, []*reinv1.Event{requestedWith(sp.id, 4), requestedWith(sp.id, 5)}, nil, nil},
		{"fenced", sp.id, 3, []*reinv1.Event{requestedWith(sp.id, 4)}, []store.AppendOption{store.WithEpoch(epoch)}, store.ErrFenced},
		{"missing run", missing, 1, []*reinv1.Event{requestedWith(missing, 2)}, nil, store.ErrNotFound},
	} {
		content := []byte("the input of the append " + tc.name)
		opts := append([]store.AppendOption{store.WithBlobs(blobSet(content))}, tc.opts...)
		_, err := h.s.Append(ctx, tc.runID, tc.expected, tc.events, opts...)
		switch {
		case err == nil:
			t.Errorf("Append(%s): err = nil, want an error", tc.name)
		case tc.want != nil && !errors.Is(err, tc.want):
			t.Errorf("Append(%s): err = %v, want %v", tc.name, err, tc.want)
		}
		assertNoBlob(t, h.s, sp.id, content)
		assertLog(t, h.s, sp.id, log)
	}
	// The twin: the append at the run's version by its current owner stores
	// its blob.
	content := []byte("the input of the append taken")
	mustAppendOpts(t, h.s, sp.id, 3, []*reinv1.Event{requestedWith(sp.id, 4, content)}, store.WithBlobs(blobSet(content)), store.WithEpoch(epoch+1))
	assertBlob(t, h.s, sp.id, content)
	h.reopen()
	assertBlob(t, h.s, sp.id, content)
	assertNoBlob(t, h.s, sp.id, []byte("the input of the append stale version"))
}

// testBlobNotFound: Blobs of a hash never stored is ErrNoBlob (even beside
// one that is), of a string that is no hash ErrInvalidBlob, and of a run not
// stored ErrNotFound, in a store with no blob and in one with blobs.
func testBlobNotFound(t *testing.T, h *harness) {
	sp := newSpec(1)
	mustCreate(t, h.s, runStarted(sp))
	stored := []byte("x")
	unknown := store.BlobHash([]byte("never stored"))
	check := func(when string, first string) {
		t.Helper()
		for _, hashes := range [][]string{{unknown}, {store.BlobHash(stored), unknown}} {
			missing := first
			if len(hashes) == 1 {
				missing = unknown
			}
			if got, err := h.s.Blobs(t.Context(), sp.id, hashes); !errors.Is(err, store.ErrNoBlob) || !strings.Contains(err.Error(), missing) {
				t.Errorf("%s: Blobs(%d hashes) = %d blobs, %v; want ErrNoBlob naming %.12s…", when, len(hashes), len(got), err, missing)
			}
		}
		for _, hash := range []string{"", "abc", strings.ToUpper(store.BlobHash([]byte("x"))), store.BlobHash([]byte("x")) + "0"} {
			if _, err := h.s.Blobs(t.Context(), sp.id, []string{hash}); !errors.Is(err, store.ErrInvalidBlob) {
				t.Errorf("%s: Blobs(%q): err = %v, want ErrInvalidBlob", when, hash, err)
			}
		}
		if _, err := h.s.Blobs(t.Context(), runID(9), []string{store.BlobHash(stored)}); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s: Blobs(a run not stored): err = %v, want ErrNotFound", when, err)
		}
	}
	check("no blob stored", store.BlobHash(stored))
	mustAppendOpts(t, h.s, sp.id, 1, []*reinv1.Event{requestedWith(sp.id, 2, stored)}, store.WithBlobs(blobSet(stored)))
	check("a blob stored", unknown)
	assertBlob(t, h.s, sp.id, stored) // the twin
}
