package etcd

// Tests that Archive and Delete take a run's blobs with it (P rblob/<run
// id>/, blob.go), apart from lifecycle_test.go to keep that file short.

import (
	"bytes"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
)

// marked is a small and a chunked blob that carry marker at both ends.
func marked(marker string, seed uint32) (small, large []byte) {
	small = []byte("a step's observation " + marker)
	large = append([]byte(marker), blobOf(ChunkBytes+1000, seed)...)
	return small, append(large, marker...)
}

// namingRun is the keys under prefix (less it) with a segment that is id,
// or id inverted as the listing indexes key it.
func namingRun(t *testing.T, prefix, id string) []string {
	t.Helper()
	var out []string
	for _, k := range slices.Sorted(maps.Keys(dump(t, shared, prefix))) {
		k = strings.TrimPrefix(k, prefix)
		if slices.Contains(strings.Split(k, "/"), id) || strings.Contains(k, invert(id)) {
			out = append(out, k)
		}
	}
	return out
}

// holding is the keys under prefix (less it) whose value holds marker.
func holding(t *testing.T, prefix, marker string) []string {
	t.Helper()
	resp, err := shared.Get(t.Context(), prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, kv := range resp.Kvs {
		if bytes.Contains(kv.Value, []byte(marker)) {
			out = append(out, strings.TrimPrefix(string(kv.Key), prefix))
		}
	}
	return out
}

// under reports whether every key of keys begins with p, and there is one.
func under(keys []string, p string) bool {
	return len(keys) > 0 && !slices.ContainsFunc(keys, func(k string) bool { return !strings.HasPrefix(k, p) })
}

// TestDeleteTakesTheRunsBlobs: after Delete of a run that brought a small
// and a chunked blob of its own and two another run brought too, no key
// names the run but its deletion record's, no value holds its own blobs'
// content, and the shared blobs' content is only under the other run's
// keys. The twins: before the Delete the same scans find the run's blob
// keys and content (so the scans can see them); the other run, whose ID
// the deleted one's begins (run-1, run-10), still reads every blob. The
// same holds of Archive: the stub keeps no blob.
func TestDeleteTakesTheRunsBlobs(t *testing.T) {
	ctx := t.Context()
	prefix := prefixOf(t.TempDir())
	s := openShared(t, prefix)
	defer s.Close()
	ownSmall, ownLarge := marked("<own blob of run-1>", 3)
	sharedSmall, sharedLarge := marked("<blob run-1 and run-10 brought>", 5)
	archSmall, archLarge := marked("<own blob of run-2>", 7)
	endRun(t, s, "run-1", time.Hour, ownSmall, ownLarge, sharedSmall, sharedLarge)
	endRun(t, s, "run-10", 2*time.Hour, sharedSmall, sharedLarge)
	st2 := endRun(t, s, "run-2", 3*time.Hour, archSmall, archLarge, sharedSmall)

	// The twin: stored, the run's blobs are keys naming it that hold their
	// content.
	if got := holding(t, prefix, "<own blob of run-1>"); !under(got, "rblob/run-1/") {
		t.Fatalf("before Delete, the keys holding run-1's own blobs are %q; want keys under rblob/run-1/", got)
	}
	blobKeys := 0
	for _, k := range namingRun(t, prefix, "run-1") {
		if strings.HasPrefix(k, "rblob/run-1/") {
			blobKeys++
		}
	}
	if blobKeys != 8 { // two small blobs; two large ones, each two chunks and a header
		t.Fatalf("before Delete, run-1 has %d blob keys; want 8", blobKeys)
	}

	if _, deleted, err := s.Delete(ctx, &reinv1.RunDeletion{RunId: "run-1", Reason: "erase"}); err != nil || !deleted {
		t.Fatalf("Delete(run-1) = %v, %v", deleted, err)
	}
	if got := namingRun(t, prefix, "run-1"); !slices.Equal(got, []string{"deleted/run-1"}) {
		t.Errorf("after Delete, the keys naming run-1 are %q; want its deletion record's only", got)
	}
	if got := holding(t, prefix, "<own blob of run-1>"); len(got) > 0 {
		t.Errorf("after Delete, keys %q hold the content of run-1's own blobs", got)
	}
	// run-2 brought the small one of them too.
	for _, k := range holding(t, prefix, "<blob run-1 and run-10 brought>") {
		if !strings.HasPrefix(k, "rblob/run-10/") && !strings.HasPrefix(k, "rblob/run-2/") {
			t.Errorf("after Delete, key %q holds the shared blobs' content; want run-10's and run-2's keys only", k)
		}
	}
	if _, err := s.Blobs(ctx, "run-1", []string{store.BlobHash(ownSmall)}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Blobs of the deleted run: %v, want ErrNotFound", err)
	}
	for _, b := range [][]byte{sharedSmall, sharedLarge} {
		if got, err := readBlob(ctx, s, "run-10", store.BlobHash(b)); err != nil || !bytes.Equal(got, b) {
			t.Fatalf("run-10's blob of %d bytes after run-1's Delete = %d bytes, %v", len(b), len(got), err)
		}
	}

	// Archive: the stub's keys hold no blob.
	if _, err := s.Archive(ctx, "run-2", st2.Version, archiveRec("run-2")); err != nil {
		t.Fatal(err)
	}
	want := []string{"contract/run-2", s.keys.ended(st2)[len(prefix):], "run/run-2",
		strings.TrimPrefix(s.keys.newest("run-2"), prefix), strings.TrimPrefix(s.keys.status(st2.Status, "run-2"), prefix)}
	slices.Sort(want)
	if got := namingRun(t, prefix, "run-2"); !slices.Equal(got, want) {
		t.Errorf("after Archive, the keys naming run-2 are %q; want the stub's %q", got, want)
	}
	if got := holding(t, prefix, "<own blob of run-2>"); len(got) > 0 {
		t.Errorf("after Archive, keys %q hold the content of run-2's own blobs", got)
	}
	if got := holding(t, prefix, "<blob run-1 and run-10 brought>"); !under(got, "rblob/run-10/") {
		t.Errorf("after Archive, the shared blobs' content is under %q; want run-10's keys only", got)
	}
	if got, err := readBlob(ctx, s, "run-10", store.BlobHash(sharedSmall)); err != nil || !bytes.Equal(got, sharedSmall) {
		t.Fatalf("run-10's blob after run-2's Archive = %q, %v", got, err)
	}
}

// TestDeletedRunIDNotUsedAgain: Create and Import of a deleted run's ID
// are ErrExists saying so, and write nothing. The twins: a new ID is
// created and imported.
func TestDeletedRunIDNotUsedAgain(t *testing.T) {
	ctx := t.Context()
	prefix := prefixOf(t.TempDir())
	s := openShared(t, prefix)
	defer s.Close()
	blob := []byte("an observation")
	endRun(t, s, "run-1", time.Hour, blob)
	log, err := s.Events(ctx, "run-1", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Delete(ctx, &reinv1.RunDeletion{RunId: "run-1"}); err != nil {
		t.Fatal(err)
	}

	before := dump(t, shared, prefix)
	if _, _, err := s.Create(ctx, started("run-1")); !errors.Is(err, store.ErrExists) || !strings.Contains(err.Error(), "deleted run's ID is not used again") {
		t.Fatalf("Create of a deleted run's ID: %v; want ErrExists saying it was deleted", err)
	}
	assertUnchanged(t, "a Create of a deleted run's ID", before, dump(t, shared, prefix))
	blobs := map[string][]byte{store.BlobHash(blob): blob}
	if _, err := s.Import(ctx, log, blobs); !errors.Is(err, store.ErrExists) || !strings.Contains(err.Error(), "deleted run's ID is not used again") {
		t.Fatalf("Import of a deleted run's ID: %v; want ErrExists saying it was deleted", err)
	}
	assertUnchanged(t, "an Import of a deleted run's ID", before, dump(t, shared, prefix))

	mustCreate(t, s, "run-2")
	again := make([]*reinv1.Event, len(log))
	for i, ev := range log {
		again[i] = proto.Clone(ev).(*reinv1.Event)
		again[i].RunId = "run-3"
	}
	again[0].GetRunStarted().RequestId = "req-run-3"
	if _, err := s.Import(ctx, again, blobs); err != nil {
		t.Fatalf("Import of a new ID: %v", err)
	}
	if got, err := readBlob(ctx, s, "run-3", store.BlobHash(blob)); err != nil || !bytes.Equal(got, blob) {
		t.Fatalf("the imported run's blob = %q, %v", got, err)
	}
}
