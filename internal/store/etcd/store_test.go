package etcd

// Tests of what the conformance suite cannot see: the prefix Open refuses,
// etcd's request and operation limits, the blob chunks, two servers (two
// Stores, two caches) writing one run, and etcd going away.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func started(id string) *reinv1.Event {
	return &reinv1.Event{RunId: id, Sequence: 1, RecordedAt: timestamppb.New(t0), Actor: "principal:alice",
		Payload: &reinv1.Event_RunStarted{RunStarted: &reinv1.RunStarted{
			Contract: &reinv1.TaskContract{Goal: "goal of " + id}, Principal: "alice", Tenant: "acme", RequestId: "req-" + id,
			Deadline: timestamppb.New(t0.Add(time.Hour)),
		}}}
}

// step is the event at seq of a run that only calls the model: even
// sequences request (naming blobs as their input), odd ones return.
func step(id string, seq uint64, blobs ...[]byte) *reinv1.Event {
	e := &reinv1.Event{RunId: id, Sequence: seq, RecordedAt: timestamppb.New(t0.Add(time.Duration(seq) * time.Second)), Actor: "harness"}
	if seq%2 == 0 {
		mr := &reinv1.ModelRequested{Step: uint32(seq / 2), InputHash: fmt.Sprint("hash-", seq), Model: "scripted/test"}
		for _, b := range blobs {
			mr.InputBlobs = append(mr.InputBlobs, store.BlobHash(b))
		}
		e.Payload = &reinv1.Event_ModelRequested{ModelRequested: mr}
		return e
	}
	e.Actor = "model"
	e.Payload = &reinv1.Event_ModelReturned{ModelReturned: &reinv1.ModelReturned{
		Decision: &reinv1.Decision{Action: &reinv1.Decision_ToolCall{ToolCall: &reinv1.ToolCall{Tool: "read_file", CallId: fmt.Sprint("call-", seq)}}},
		Usage:    &reinv1.Usage{InputTokens: 10, OutputTokens: seq},
	}}
	return e
}

func steps(id string, from uint64, n int) []*reinv1.Event {
	var evs []*reinv1.Event
	for i := range uint64(n) {
		evs = append(evs, step(id, from+i))
	}
	return evs
}

// blobOf is a blob of n bytes that do not repeat in short cycles, seeded.
func blobOf(n int, seed uint32) []byte {
	b := make([]byte, n)
	x := seed | 1 // xorshift needs a non-zero state: pass distinct odd seeds
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

// dump is every key under prefix with its value and ModRevision: what
// "nothing was written" is checked against.
func dump(t *testing.T, cli *clientv3.Client, prefix string) map[string]string {
	t.Helper()
	resp, err := cli.Get(context.Background(), prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("read the prefix %s: %v", prefix, err)
	}
	m := make(map[string]string, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		m[string(kv.Key)] = fmt.Sprintf("%d:%q", kv.ModRevision, kv.Value)
	}
	return m
}

func assertUnchanged(t *testing.T, what string, before, after map[string]string) {
	t.Helper()
	if !maps.Equal(before, after) {
		var diff []string
		for _, k := range slices.Sorted(maps.Keys(after)) {
			if before[k] != after[k] {
				diff = append(diff, k)
			}
		}
		for k := range before {
			if _, ok := after[k]; !ok {
				diff = append(diff, "deleted "+k)
			}
		}
		t.Fatalf("%s wrote under the prefix: %v", what, diff)
	}
}

func mustCreate(t *testing.T, s *Store, id string) {
	t.Helper()
	if _, created, err := s.Create(t.Context(), started(id)); err != nil || !created {
		t.Fatalf("Create(%s): created %v, %v", id, created, err)
	}
}

// twoServers opens two Stores on a fresh prefix, as two servers would
// (each with its own cache), closed when the test ends, and creates run-1
// through the first.
func twoServers(t *testing.T) (prefix string, a, b *Store) {
	t.Helper()
	prefix = prefixOf(t.TempDir())
	a, b = openShared(t, prefix), openShared(t, prefix)
	t.Cleanup(func() { a.Close(); b.Close() })
	mustCreate(t, a, "run-1")
	return prefix, a, b
}

// TestOpenRefusesForeignPrefix: a prefix holding keys and no marker, or a
// marker of another layout, is refused with an error saying so, and nothing
// is written; a prefix without a trailing "/" too. The twin: an empty prefix
// opens (and is marked), and opens again.
func TestOpenRefusesForeignPrefix(t *testing.T) {
	ctx := t.Context()
	base := prefixOf(t.TempDir())
	for _, tc := range []struct {
		name, prefix string
		seed         map[string]string // keys under prefix before Open
		want         string
	}{
		{"foreign keys", base + "foreign/", map[string]string{"config/db": "postgres://", "run/x": "not rein's"}, "not a rein store"},
		{"unknown layout", base + "future/", map[string]string{"meta/layout": "rein-etcd-9"}, `its layout is "rein-etcd-9"`},
		{"layout and garbage", base + "garbage/", map[string]string{"meta/layout": "\x00\xff"}, "this rein knows only"},
		{"no trailing slash", base + "noslash", nil, `must be non-empty and end in "/"`},
	} {
		for k, v := range tc.seed {
			if _, err := shared.Put(ctx, tc.prefix+k, v); err != nil {
				t.Fatal(err)
			}
		}
		before := dump(t, shared, tc.prefix)
		s, err := Open(ctx, shared, tc.prefix, testOptions)
		if err == nil {
			s.Close()
			t.Fatalf("%s: Open(%s) = nil error, want it refused", tc.name, tc.prefix)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Open(%s): %v; want it to say %q", tc.name, tc.prefix, err, tc.want)
		}
		assertUnchanged(t, tc.name+": a refused Open", before, dump(t, shared, tc.prefix))
	}
	// A client without a connection of its own is refused before any request.
	if s, err := Open(ctx, clientv3.NewCtxClient(ctx), base+"ctx/", testOptions); err == nil {
		s.Close()
		t.Fatal("Open with a client made by NewCtxClient = nil error, want it refused")
	} else if !strings.Contains(err.Error(), "no connection of its own") {
		t.Errorf("Open with a client made by NewCtxClient: %v; want it to say the client has no connection", err)
	}
	assertUnchanged(t, "Open with a client without a connection", map[string]string{}, dump(t, shared, base+"ctx/"))

	empty := base + "empty/"
	s := openShared(t, empty)
	if got := dump(t, shared, empty); len(got) != 2 || !strings.HasSuffix(got[empty+"meta/layout"], `"`+layoutV2+`"`) || got[empty+"meta/ended"] == "" {
		t.Fatalf("an empty prefix after Open holds %v, want only its layout marker and the ended index's mark (lifecycle.go)", got)
	}
	mustCreate(t, s, "run-1")
	s.Close()
	before := dump(t, shared, empty)
	s = openShared(t, empty) // a rein store: opens, and Open writes nothing
	defer s.Close()
	assertUnchanged(t, "reopening a rein store", before, dump(t, shared, empty))
	if _, err := s.Load(ctx, "run-1"); err != nil {
		t.Fatalf("Load after reopen: %v", err)
	}
}

// TestBlobLimits: a blob over MaxBlobBytes, or blobs that together make a
// Txn over MaxRequestBytes, are refused with ErrInvalidBlob before anything
// is written; the twins, a blob of exactly MaxBlobBytes and the same blobs
// in two appends, are stored and read back.
func TestBlobLimits(t *testing.T) {
	ctx := t.Context()
	prefix := prefixOf(t.TempDir())
	s, err := Open(ctx, shared, prefix, Options{Timeout: testOptions.Timeout, MaxRequestBytes: 1 << 20, MaxBlobBytes: 600 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mustCreate(t, s, "run-1")
	refuse := func(what string, blobs ...[]byte) {
		t.Helper()
		set := map[string][]byte{}
		for _, b := range blobs {
			set[store.BlobHash(b)] = b
		}
		before := dump(t, shared, prefix)
		_, err := s.Append(ctx, "run-1", 1, []*reinv1.Event{step("run-1", 2, blobs...)}, store.WithBlobs(set))
		if !errors.Is(err, store.ErrInvalidBlob) || !strings.Contains(err.Error(), "nothing was stored") {
			t.Fatalf("%s: Append: %v; want ErrInvalidBlob saying nothing was stored", what, err)
		}
		assertUnchanged(t, what, before, dump(t, shared, prefix))
	}
	over, a, b := blobOf(600<<10+1, 1), blobOf(520<<10, 3), blobOf(520<<10, 5)
	refuse("a blob one byte over MaxBlobBytes", over)
	refuse("two blobs over MaxRequestBytes together", a, b)

	atMax := blobOf(600<<10, 7)
	for i, blob := range [][]byte{atMax, a, b} {
		seq := uint64(2 + 2*i)
		evs := []*reinv1.Event{step("run-1", seq, blob), step("run-1", seq+1)}
		if _, err := s.Append(ctx, "run-1", seq-1, evs, store.WithBlobs(map[string][]byte{store.BlobHash(blob): blob})); err != nil {
			t.Fatalf("Append of a %d-byte blob: %v", len(blob), err)
		}
		got, err := readBlob(ctx, s, "run-1", store.BlobHash(blob))
		if err != nil || !bytes.Equal(got, blob) {
			t.Fatalf("Blob(%d bytes) = %d bytes, %v", len(blob), len(got), err)
		}
	}
}

// TestBlobChunks: a blob over one chunk is stored as its chunks (one key
// each, none over ChunkBytes) and read back whole; a chunk lost or changed
// behind the store's back is ErrDataLoss, not a short or wrong blob.
func TestBlobChunks(t *testing.T) {
	ctx := t.Context()
	prefix := prefixOf(t.TempDir())
	s := openShared(t, prefix)
	defer s.Close()
	mustCreate(t, s, "run-1")
	blob := blobOf(3*ChunkBytes+123, 11)
	hash := store.BlobHash(blob)
	if _, err := s.Append(ctx, "run-1", 1, []*reinv1.Event{step("run-1", 2, blob)}, store.WithBlobs(map[string][]byte{hash: blob})); err != nil {
		t.Fatal(err)
	}
	resp, err := shared.Get(ctx, s.keys.blob("run-1", hash)+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 4 {
		t.Fatalf("a blob of 3 chunks and 123 bytes is stored as %d chunks, want 4", len(resp.Kvs))
	}
	for _, kv := range resp.Kvs {
		if len(kv.Value) > ChunkBytes {
			t.Errorf("chunk %s holds %d bytes, more than ChunkBytes", kv.Key, len(kv.Value))
		}
	}
	if got, err := readBlob(ctx, s, "run-1", hash); err != nil || !bytes.Equal(got, blob) {
		t.Fatalf("Blob = %d bytes, %v; want the %d stored", len(got), err, len(blob))
	}

	// Damage behind the store's back: a chunk changed, then one lost.
	chunk1 := s.keys.chunk("run-1", hash, 1)
	if _, err := shared.Put(ctx, chunk1, string(blobOf(ChunkBytes, 9))); err != nil {
		t.Fatal(err)
	}
	if _, err := readBlob(ctx, s, "run-1", hash); !errors.Is(err, store.ErrDataLoss) {
		t.Fatalf("Blob with a chunk changed: %v, want ErrDataLoss", err)
	}
	if _, err := shared.Delete(ctx, chunk1); err != nil {
		t.Fatal(err)
	}
	if _, err := readBlob(ctx, s, "run-1", hash); !errors.Is(err, store.ErrDataLoss) {
		t.Fatalf("Blob with a chunk lost: %v, want ErrDataLoss", err)
	}
}

// TestManyOpsNested: an append of more events than etcd's --max-txn-ops
// (128 in the test etcd) is stored whole, as nested Txns in one; one the
// store cannot fit even nested (MaxTxnOps 8: at most 2 nested Txns of 6, or
// 3 of 5, 15 puts) is refused up front, nothing written.
func TestManyOpsNested(t *testing.T) {
	ctx := t.Context()
	prefix := prefixOf(t.TempDir())
	s := openShared(t, prefix)
	defer s.Close()
	mustCreate(t, s, "run-1")
	evs := steps("run-1", 2, 300)
	if _, err := s.Append(ctx, "run-1", 1, evs); err != nil {
		t.Fatalf("Append of 300 events: %v", err)
	}
	got, err := s.Events(ctx, "run-1", 0, 1000)
	if err != nil || len(got) != 301 {
		t.Fatalf("Events = %d, %v; want 301", len(got), err)
	}

	small, err := Open(ctx, shared, prefix, Options{Timeout: testOptions.Timeout, MaxTxnOps: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	before := dump(t, shared, prefix)
	_, err = small.Append(ctx, "run-1", 301, steps("run-1", 302, 20))
	if err == nil || !strings.Contains(err.Error(), "nothing was stored") {
		t.Fatalf("Append of 20 events with MaxTxnOps 8: %v; want it refused", err)
	}
	assertUnchanged(t, "an append over the nested limit", before, dump(t, shared, prefix))
	if _, err := small.Append(ctx, "run-1", 301, steps("run-1", 302, 10)); err != nil { // the twin: 11 puts fit
		t.Fatalf("Append of 10 events with MaxTxnOps 8: %v", err)
	}
}

// TestTwoServersOneRun: two Stores on one prefix (two servers, each with
// its own cache) append to one run at once, round after round: exactly one
// wins each round, the other gets ErrConflict, and the log is gap-free. A
// lease taken by one fences the other even though its cache still holds
// the old epoch; the fenced one, reloading, goes on at the new epoch.
func TestTwoServersOneRun(t *testing.T) {
	ctx := t.Context()
	prefix, a, b := twoServers(t)
	version := uint64(1)
	for round := range 20 {
		var wg sync.WaitGroup
		errs := make([]error, 2)
		start := make(chan struct{})
		for i, s := range []*Store{a, b} {
			wg.Go(func() {
				<-start
				_, errs[i] = s.Append(ctx, "run-1", version, []*reinv1.Event{step("run-1", version+1)})
			})
		}
		close(start)
		wg.Wait()
		won := 0
		for _, err := range errs {
			switch {
			case err == nil:
				won++
			case !errors.Is(err, store.ErrConflict):
				t.Fatalf("round %d: the loser got %v, want ErrConflict", round, err)
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d appends at version %d were stored, want exactly 1 (%v)", round, won, version, errs)
		}
		version++
	}
	evs, err := b.Events(ctx, "run-1", 0, 100)
	if err != nil || uint64(len(evs)) != version {
		t.Fatalf("Events = %d, %v; want %d", len(evs), err, version)
	}
	for i, ev := range evs {
		if ev.GetSequence() != uint64(i+1) {
			t.Fatalf("event %d has sequence %d: the log has a gap", i, ev.GetSequence())
		}
	}

	first, err := a.Acquire(ctx, "run-1", "server-a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Append(ctx, "run-1", version, steps("run-1", version+1, 1), store.WithEpoch(first)); err != nil {
		t.Fatalf("the owner's append: %v", err)
	}
	version++
	second, err := b.Acquire(ctx, "run-1", "server-b") // b takes the run over
	if err != nil || second <= first {
		t.Fatalf("b's Acquire = %d, %v; want an epoch over %d", second, err, first)
	}
	before := dump(t, shared, prefix)
	if _, err := a.Append(ctx, "run-1", version, steps("run-1", version+1, 1), store.WithEpoch(first)); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("the old owner's append after the takeover: %v, want ErrFenced", err)
	}
	assertUnchanged(t, "a fenced append", before, dump(t, shared, prefix))
	if _, err := b.Append(ctx, "run-1", version, steps("run-1", version+1, 1), store.WithEpoch(second)); err != nil {
		t.Fatalf("the new owner's append: %v", err)
	}
}

// TestEtcdStopped: with etcd gone, reads and writes fail with
// ErrUnavailable naming etcd, within the store's timeout (the test waits
// far longer before it calls that a hang); nothing is half-written; when
// etcd is back on the same data the store serves again and the run goes on
// where it was.
func TestEtcdStopped(t *testing.T) {
	dir := t.TempDir()
	clientURL, peerURL := freeURL(), freeURL()
	e, err := startEtcd(dir, clientURL, peerURL, false)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { e.Close() }()
	cli, err := newClient(e)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := t.Context()
	s, err := Open(ctx, cli, "/rein/", Options{Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mustCreate(t, s, "run-1")
	if _, err := s.Append(ctx, "run-1", 1, steps("run-1", 2, 2)); err != nil {
		t.Fatal(err)
	}

	e.Close()
	calls := map[string]func() error{
		"Append": func() error { _, err := s.Append(ctx, "run-1", 3, steps("run-1", 4, 2)); return err },
		"Create": func() error { _, _, err := s.Create(ctx, started("run-2")); return err },
		"Load":   func() error { _, err := s.Load(ctx, "run-1"); return err },
	}
	for _, name := range slices.Sorted(maps.Keys(calls)) {
		done := make(chan error, 1)
		go func() { done <- calls[name]() }()
		select {
		case err := <-done:
			if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "etcd at ") {
				t.Errorf("%s with etcd stopped: %v; want ErrUnavailable naming etcd", name, err)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("%s with etcd stopped has not returned in 60s (its timeout is 2s)", name)
		}
	}

	if e, err = startEtcd(dir, clientURL, peerURL, false); err != nil {
		t.Fatal(err)
	}
	// The client reconnects on its own: wait until its connection is ready
	// again; from then on the store serves.
	waitCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	conn := cli.ActiveConnection()
	for state := conn.GetState(); state != connectivity.Ready; state = conn.GetState() {
		conn.Connect()
		if !conn.WaitForStateChange(waitCtx, state) {
			t.Fatalf("the etcd client has not reconnected 60s after etcd restarted: its connection is %v", conn.GetState())
		}
	}
	if _, err := s.Load(ctx, "run-1"); err != nil {
		t.Fatalf("Load once the client reconnected: %v", err)
	}
	got, err := s.Events(ctx, "run-1", 0, 100)
	if err != nil || len(got) != 3 {
		t.Fatalf("after the restart the log is %d events, %v; want the 3 stored before", len(got), err)
	}
	if _, err := s.Load(ctx, "run-2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the Create refused while etcd was down: Load = %v, want ErrNotFound", err)
	}
	if _, err := s.Append(ctx, "run-1", 3, steps("run-1", 4, 2)); err != nil {
		t.Fatalf("Append after the restart: %v", err)
	}
	mustCreate(t, s, "run-2")
}

// TestEventsOverRequestLimit: events alone over MaxRequestBytes are refused
// before anything is sent, saying what to do; the twin, fewer of them, is
// stored.
func TestEventsOverRequestLimit(t *testing.T) {
	ctx := t.Context()
	prefix := prefixOf(t.TempDir())
	s, err := Open(ctx, shared, prefix, Options{Timeout: testOptions.Timeout, MaxRequestBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mustCreate(t, s, "run-1")
	before := dump(t, shared, prefix)
	_, err = s.Append(ctx, "run-1", 1, steps("run-1", 2, 1000))
	if err == nil || errors.Is(err, store.ErrInvalidBlob) || !strings.Contains(err.Error(), "append fewer or smaller events") {
		t.Fatalf("Append of 1000 events under a 64 KiB limit: %v; want it refused for its size, not its blobs", err)
	}
	assertUnchanged(t, "an append over the request limit", before, dump(t, shared, prefix))
	if _, err := s.Append(ctx, "run-1", 1, steps("run-1", 2, 100)); err != nil {
		t.Fatalf("Append of 100 events: %v", err)
	}
}

// readBlob reads one blob of a run through Blobs.
func readBlob(ctx context.Context, s *Store, runID, hash string) ([]byte, error) {
	got, err := s.Blobs(ctx, runID, []string{hash})
	if err != nil {
		return nil, err
	}
	return got[hash], nil
}

// TestSmallBlobIsOneKey: a blob of at most ChunkBytes is stored as one key,
// its header with the content after it, and read back; one its header
// mis-sizes, or whose content changed, is ErrDataLoss. A small blob in the
// chunked form (an earlier rein's) still reads.
func TestSmallBlobIsOneKey(t *testing.T) {
	ctx := t.Context()
	prefix := prefixOf(t.TempDir())
	s := openShared(t, prefix)
	defer s.Close()
	mustCreate(t, s, "run-1")
	small, atChunk := []byte("a step's observation"), blobOf(ChunkBytes, 3)
	blobs := map[string][]byte{store.BlobHash(small): small, store.BlobHash(atChunk): atChunk}
	if _, err := s.Append(ctx, "run-1", 1, []*reinv1.Event{step("run-1", 2, small, atChunk)}, store.WithBlobs(blobs)); err != nil {
		t.Fatal(err)
	}
	for _, b := range [][]byte{small, atChunk} {
		hash := store.BlobHash(b)
		resp, err := shared.Get(ctx, s.keys.blob("run-1", hash), clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) != 1 || len(resp.Kvs[0].Value) != 12+len(b) {
			t.Fatalf("a %d-byte blob is stored as %d keys (the first %d bytes); want one of 12+%d", len(b), len(resp.Kvs), len(resp.Kvs[0].Value), len(b))
		}
		if got, err := readBlob(ctx, s, "run-1", hash); err != nil || !bytes.Equal(got, b) {
			t.Fatalf("Blobs = %d bytes, %v; want the %d stored", len(got), err, len(b))
		}
	}

	hash := store.BlobHash(small)
	header := binary.BigEndian.AppendUint64(nil, uint64(len(small)))
	header = binary.BigEndian.AppendUint32(header, 0)
	for _, tc := range []struct{ name, value string }{
		{"content changed", string(header) + "another observation!"},
		{"a byte short", string(header) + string(small[1:])},
		{"a header cut short", string(header[:10])},
	} {
		if _, err := shared.Put(ctx, s.keys.blob("run-1", hash), tc.value); err != nil {
			t.Fatal(err)
		}
		if _, err := readBlob(ctx, s, "run-1", hash); !errors.Is(err, store.ErrDataLoss) {
			t.Errorf("Blobs with %s: %v, want ErrDataLoss", tc.name, err)
		}
	}
	// The chunked form of a small blob, as an earlier rein wrote it.
	chunked := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint64(nil, uint64(len(small))), 1)
	if _, err := shared.Put(ctx, s.keys.blob("run-1", hash), string(chunked)); err != nil {
		t.Fatal(err)
	}
	if _, err := shared.Put(ctx, s.keys.chunk("run-1", hash, 0), string(small)); err != nil {
		t.Fatal(err)
	}
	if got, err := readBlob(ctx, s, "run-1", hash); err != nil || !bytes.Equal(got, small) {
		t.Fatalf("Blobs of the chunked form = %q, %v; want %q", got, err, small)
	}
}

// TestOpenMarksAnOlderLayout: a prefix an older rein marked "rein-etcd-1"
// opens, keeps its runs, and is marked "rein-etcd-2", so that a build that
// knows only the first layout (and not the runs' P rblob/ keys) refuses it.
// The twin, in TestOpenRefusesForeignPrefix: a layout newer than this
// build's is refused with nothing written.
func TestOpenMarksAnOlderLayout(t *testing.T) {
	ctx := t.Context()
	prefix := prefixOf(t.TempDir())
	s := openShared(t, prefix)
	mustCreate(t, s, "run-1")
	s.Close()
	if _, err := shared.Put(ctx, prefix+"meta/layout", layoutV1); err != nil {
		t.Fatal(err)
	}
	s = openShared(t, prefix)
	defer s.Close()
	if got := dump(t, shared, prefix)[prefix+"meta/layout"]; !strings.HasSuffix(got, `"`+layoutV2+`"`) {
		t.Fatalf("the layout marker after Open = %s, want %q", got, layoutV2)
	}
	if _, err := s.Load(ctx, "run-1"); err != nil {
		t.Fatalf("Load after the layout's upgrade: %v", err)
	}
}
