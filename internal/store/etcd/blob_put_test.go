package etcd

import (
	"bytes"
	"maps"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reinhq/rein/internal/store"
)

// blobKeys is the ModRevision and the value of every key of the blob
// under hash.
func blobKeys(t *testing.T, s *Store, hash string) (map[string]int64, map[string]string) {
	t.Helper()
	resp, err := shared.Get(t.Context(), s.keys.blob(hash), clientv3.WithPrefix())
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
		if err := s.Append(ctx, "run-1", version, evs, store.WithBlobs(m)); err != nil {
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
	if len(revs) != 1 || revs[s.keys.blob(hs)] <= smallRevs[s.keys.blob(hs)] {
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
