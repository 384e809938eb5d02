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

// assertBlob fails unless the store holds content under its hash.
func assertBlob(t *testing.T, s store.Store, content []byte) {
	t.Helper()
	hash := store.BlobHash(content)
	got, err := s.Blob(t.Context(), hash)
	if err != nil {
		t.Fatalf("Blob(%.12s…): %v", hash, err)
	}
	if !bytes.Equal(got, content) {
		t.Fatalf("Blob(%.12s…): %d bytes, not the %d stored", hash, len(got), len(content))
	}
}

// assertNoBlob fails unless the store holds nothing under content's hash.
func assertNoBlob(t *testing.T, s store.Store, content []byte) {
	t.Helper()
	hash := store.BlobHash(content)
	if got, err := s.Blob(t.Context(), hash); !errors.Is(err, store.ErrNoBlob) {
		t.Fatalf("Blob(%.12s…) = %d bytes, %v; want ErrNoBlob: the blob must not be stored", hash, len(got), err)
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
	if err := h.s.Append(t.Context(), sp.id, 1, []*reinv1.Event{ev}, store.WithBlobs(blobSet(goal, empty, big))); err != nil {
		t.Fatalf("Append with blobs: %v", err)
	}
	log := []*reinv1.Event{runStarted(sp), ev}
	assertLog(t, h.s, sp.id, log)
	want := bytes.Clone(goal)
	goal[0] = 'X' // the caller's slice, changed after the append
	got, err := h.s.Blob(t.Context(), store.BlobHash(want))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("Blob(goal) = %q, %v; want %q", got, err, want)
	}
	got[0] = 'Y' // the returned slice, changed by the reader
	assertBlob(t, h.s, want)
	assertBlob(t, h.s, empty)
	assertBlob(t, h.s, big)

	// A second append of the run with more blobs, and one WithBlobs per
	// blob: options add up.
	obs := []byte("an observation")
	more := []*reinv1.Event{modelReturned(sp.id, 3), requestedWith(sp.id, 4, want, obs)}
	if err := h.s.Append(t.Context(), sp.id, 2, more, store.WithBlobs(blobSet(want)), store.WithBlobs(blobSet(obs))); err != nil {
		t.Fatalf("Append with two WithBlobs: %v", err)
	}
	log = append(log, more...)

	h.reopen()
	assertLog(t, h.s, sp.id, log)
	for _, b := range [][]byte{want, empty, big, obs} {
		assertBlob(t, h.s, b)
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
	assertBlob(t, h.s, shared)

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
			err := h.s.Append(t.Context(), sp.id, 1, []*reinv1.Event{requestedWith(sp.id, 2, shared, own)}, store.WithBlobs(blobSet(shared, own)))
			if err != nil {
				t.Errorf("Append(%s) with a shared blob: %v", sp.id, err)
			}
		})
	}
	close(start)
	wg.Wait()
	assertBlob(t, h.s, shared)
	for i := range runs {
		sp := newSpec(10 + i)
		assertBlob(t, h.s, []byte("the input of "+sp.id))
		assertLog(t, h.s, sp.id, []*reinv1.Event{runStarted(sp), requestedWith(sp.id, 2, shared, []byte("the input of "+sp.id))})
	}
	h.reopen()
	assertBlob(t, h.s, shared)
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
		err := h.s.Append(t.Context(), sp.id, 1, []*reinv1.Event{requestedWith(sp.id, 2, good)}, store.WithBlobs(tc.blobs))
		if !errors.Is(err, store.ErrInvalidBlob) {
			t.Errorf("Append(%s): err = %v, want ErrInvalidBlob", tc.name, err)
		}
		assertLog(t, h.s, sp.id, []*reinv1.Event{runStarted(sp)})
		assertNoBlob(t, h.s, good)
		assertNoBlob(t, h.s, other)
	}
	// The twin: the same append with the right keys is taken.
	mustAppendOpts(t, h.s, sp.id, 1, []*reinv1.Event{requestedWith(sp.id, 2, good)}, store.WithBlobs(blobSet(good)))
	assertBlob(t, h.s, good)
	assertNoBlob(t, h.s, other)
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
		err := h.s.Append(ctx, tc.runID, tc.expected, tc.events, opts...)
		switch {
		case err == nil:
			t.Errorf("Append(%s): err = nil, want an error", tc.name)
		case tc.want != nil && !errors.Is(err, tc.want):
			t.Errorf("Append(%s): err = %v, want %v", tc.name, err, tc.want)
		}
		assertNoBlob(t, h.s, content)
		assertLog(t, h.s, sp.id, log)
	}
	// The twin: the append at the run's version by its current owner stores
	// its blob.
	content := []byte("the input of the append taken")
	mustAppendOpts(t, h.s, sp.id, 3, []*reinv1.Event{requestedWith(sp.id, 4, content)}, store.WithBlobs(blobSet(content)), store.WithEpoch(epoch+1))
	assertBlob(t, h.s, content)
	h.reopen()
	assertBlob(t, h.s, content)
	assertNoBlob(t, h.s, []byte("the input of the append stale version"))
}

// testBlobNotFound: Blob of a hash never stored is ErrNoBlob, of a string
// that is no hash ErrInvalidBlob, in an empty store and in one with blobs.
func testBlobNotFound(t *testing.T, h *harness) {
	check := func(when string) {
		t.Helper()
		if _, err := h.s.Blob(t.Context(), store.BlobHash([]byte("never stored"))); !errors.Is(err, store.ErrNoBlob) {
			t.Errorf("%s: Blob(unknown hash): err = %v, want ErrNoBlob", when, err)
		}
		for _, hash := range []string{"", "abc", strings.ToUpper(store.BlobHash([]byte("x"))), store.BlobHash([]byte("x")) + "0"} {
			if _, err := h.s.Blob(t.Context(), hash); !errors.Is(err, store.ErrInvalidBlob) {
				t.Errorf("%s: Blob(%q): err = %v, want ErrInvalidBlob", when, hash, err)
			}
		}
	}
	check("empty store")
	sp := newSpec(1)
	mustCreate(t, h.s, runStarted(sp))
	stored := []byte("x")
	mustAppendOpts(t, h.s, sp.id, 1, []*reinv1.Event{requestedWith(sp.id, 2, stored)}, store.WithBlobs(blobSet(stored)))
	check("store with a blob")
	assertBlob(t, h.s, stored) // the twin
}
