package etcd

import (
	"bytes"
	"encoding/binary"
	"errors"
	"maps"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
)

// blobKeys is the ModRevision and the value of every key of the blob
// under hash.
func blobKeys(t *testing.T, s *Store, hash string) (map[string]int64, map[string]string) {
	t.Helper()
	resp, err := shared.Get(t.Context(), s.keys.blob("run-1", hash), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	revs, values := map[string]int64{}, map[string]string{}
	for _, kv := range resp.Kvs {
		revs[string(kv.Key)], values[string(kv.Key)] = kv.ModRevision, string(kv.Value)
	}
	return revs, values
}

// TestBlobPut: an append bringing a small new blob costs one Txn (no
// look-up first); a small blob already stored, brought again, is put again
// with the same value, one key, and the append is stored. A large blob is
// looked up first (a read, then the Txn), so that it is not sent again,
// and brought again it is not rewritten. A small blob in an append wide
// enough to be nested is stored and reads back.
func TestBlobPut(t *testing.T) {
	ctx := t.Context()
	counts := &rpcCounts{n: map[string]int{}}
	cli, err := countingClient(shared.Endpoints(), counts)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	s, err := Open(ctx, cli, prefixOf(t.TempDir()), testOptions)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mustCreate(t, s, "run-1")

	small, large := blobOf(1000, 3), blobOf(probeBlobBytes+1, 5)
	hs, hl := store.BlobHash(small), store.BlobHash(large)
	version := uint64(1)
	// appendWith appends pairs model calls, the first naming blobs as its
	// input, with the blobs.
	appendWith := func(pairs int, blobs ...[]byte) {
		t.Helper()
		m := map[string][]byte{}
		for _, b := range blobs {
			m[store.BlobHash(b)] = b
		}
		evs := steps("run-1", version+1, 2*pairs)
		evs[0] = step("run-1", version+1, blobs...)
		if _, err := s.Append(ctx, "run-1", version, evs, store.WithBlobs(m)); err != nil {
			t.Fatalf("Append at %d: %v", version, err)
		}
		version += uint64(len(evs))
	}

	counts.take()
	appendWith(1, small)
	if n := counts.take(); n["Txn"] != 1 || n["Range"] != 0 {
		t.Errorf("an append with a small new blob sent %v; want one Txn", n)
	}
	smallRevs, smallValues := blobKeys(t, s, hs)
	if len(smallValues) != 1 {
		t.Fatalf("the small blob is %d keys, want one: %v", len(smallValues), smallRevs)
	}

	appendWith(1, large)
	if n := counts.take(); n["Txn"] != 2 {
		t.Errorf("an append with a large new blob sent %v; want a look-up and a Txn", n)
	}
	largeRevs, _ := blobKeys(t, s, hl)

	appendWith(1, small, large)
	revs, values := blobKeys(t, s, hs)
	if len(revs) != 1 || revs[s.keys.blob("run-1", hs)] <= smallRevs[s.keys.blob("run-1", hs)] {
		t.Errorf("the small blob brought again: revisions %v, were %v; want its one key put again", revs, smallRevs)
	}
	if !maps.Equal(values, smallValues) {
		t.Errorf("the small blob brought again changed: %d keys, want its %d with the same value", len(values), len(smallValues))
	}
	if got, _ := blobKeys(t, s, hl); !equalRevs(got, largeRevs) {
		t.Errorf("the large blob brought again was rewritten: revisions %v, were %v", got, largeRevs)
	}

	// Wide: more puts than MaxTxnOps, so the blob's Txn is nested in one.
	wide := blobOf(2000, 7)
	appendWith(150, wide)
	for _, b := range [][]byte{small, large, wide} {
		if got, err := readBlob(ctx, s, "run-1", store.BlobHash(b)); err != nil || !bytes.Equal(got, b) {
			t.Fatalf("Blob = %d bytes, %v; want the %d stored", len(got), err, len(b))
		}
	}
	evs, err := s.Events(ctx, "run-1", 0, 1000)
	if err != nil || uint64(len(evs)) != version {
		t.Fatalf("Events = %d, %v; want %d", len(evs), err, version)
	}
}

func equalRevs(a, b map[string]int64) bool {
	if len(a) != len(b) || len(a) == 0 {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestLegacySharedBlobReads: a blob an older rein kept once for every run
// (P blob/<hash>, put here with a raw etcd client: small, its content
// after its header; large, its chunks) is read through a run that names
// it, and stays after that run's Delete (nothing records which runs brought
// it). The twins: a hash stored under neither key is ErrNoBlob; a run's
// own copy is read before the legacy key, which here is damaged; a run
// never stored is ErrNotFound though the legacy blob is there.
func TestLegacySharedBlobReads(t *testing.T) {
	ctx := t.Context()
	prefix := prefixOf(t.TempDir())
	s := openShared(t, prefix)
	defer s.Close()
	small, large, own := []byte("an older rein's observation"), blobOf(2*ChunkBytes+5, 3), []byte("run-2's own copy")
	hs, hl, ho := store.BlobHash(small), store.BlobHash(large), store.BlobHash(own)
	header := func(size, count int) string {
		return string(binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint64(nil, uint64(size)), uint32(count)))
	}
	for k, v := range map[string]string{
		prefix + "blob/" + hs:           header(len(small), 0) + string(small),
		prefix + "blob/" + hl:           header(len(large), 3),
		prefix + "blob/" + hl + "/0000": string(large[:ChunkBytes]),
		prefix + "blob/" + hl + "/0001": string(large[ChunkBytes : 2*ChunkBytes]),
		prefix + "blob/" + hl + "/0002": string(large[2*ChunkBytes:]),
		prefix + "blob/" + ho:           header(len(own), 0) + "damaged",
	} {
		if _, err := shared.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	// run-1's events name the legacy blobs, stored before it (no WithBlobs).
	mustCreate(t, s, "run-1")
	if _, err := s.Append(ctx, "run-1", 1, []*reinv1.Event{step("run-1", 2, small, large), step("run-1", 3), finish("run-1", 4, t0)}); err != nil {
		t.Fatal(err)
	}
	for _, b := range [][]byte{small, large} {
		if got, err := readBlob(ctx, s, "run-1", store.BlobHash(b)); err != nil || !bytes.Equal(got, b) {
			t.Fatalf("the legacy blob of %d bytes = %d bytes, %v", len(b), len(got), err)
		}
	}
	if _, err := readBlob(ctx, s, "run-1", store.BlobHash([]byte("stored nowhere"))); !errors.Is(err, store.ErrNoBlob) {
		t.Errorf("a blob stored nowhere: %v, want ErrNoBlob", err)
	}
	mustCreate(t, s, "run-2")
	if _, err := s.Append(ctx, "run-2", 1, []*reinv1.Event{step("run-2", 2, own)}, store.WithBlobs(map[string][]byte{ho: own})); err != nil {
		t.Fatal(err)
	}
	if got, err := readBlob(ctx, s, "run-2", ho); err != nil || !bytes.Equal(got, own) {
		t.Errorf("a run's own copy beside a damaged legacy one = %q, %v; want its own", got, err)
	}
	if _, err := readBlob(ctx, s, "run-99", hs); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Blobs of a run never stored: %v, want ErrNotFound", err)
	}

	if _, _, err := s.Delete(ctx, &reinv1.RunDeletion{RunId: "run-1"}); err != nil {
		t.Fatal(err)
	}
	resp, err := shared.Get(ctx, prefix+"blob/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 6 {
		t.Fatalf("after Delete, %d legacy blob keys, %v; want the 6 put", resp.Count, err)
	}
}
