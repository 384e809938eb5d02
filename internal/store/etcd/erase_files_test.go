package etcd

// What an erasure leaves in an etcd member's files: a member process of
// its own (internal/etcdtest), whose data directory the test reads.

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/etcdtest"
)

// fileHolds reports whether the file at path holds marker.
func fileHolds(t *testing.T, path, marker string) bool {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Contains(data, []byte(marker))
}

// walHolds reports whether any write-ahead log file under dir holds marker.
func walHolds(t *testing.T, dir, marker string) bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "member", "wal", "*.wal"))
	if err != nil || len(files) == 0 {
		t.Fatalf("the member's write-ahead log under %s: %v, %d files", dir, err, len(files))
	}
	for _, f := range files {
		if fileHolds(t, f, marker) {
			return true
		}
	}
	return false
}

// TestErasedRunLeavesTheMembersDatabase is how an erasure on etcd becomes
// complete in the member's database file, as docs/storage.md's "A run's
// lifetime" says: rein deletes the run's keys in one transaction, its
// history compaction (CompactHistory, which compact is one tick of) drops
// the old revisions, and a defragmentation rewrites the file without the
// freed pages. The file is grepped for a marker the run's blobs carried.
// The twins: before the deletion, and after it but before the compaction
// and the defragmentation, the file holds the marker (so the grep can see
// it). The write-ahead log still holds it until etcd rotates it, which the
// page says; the test logs what it finds there.
func TestErasedRunLeavesTheMembersDatabase(t *testing.T) {
	ctx := t.Context()
	c := etcdtest.StartWith(t, etcdtest.Options{Members: 1, Durable: true})
	cli := c.Client()
	s, err := Open(ctx, cli, "/rein/", quotaOptions)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const marker = "<erase me: card 4111 1111 1111 1111>"
	small, large := marked(marker, 11)
	endRun(t, s, "run-1", time.Hour, small, large)
	endRun(t, s, "run-2", time.Hour) // stays
	db := filepath.Join(c.Dir(0), "member", "snap", "db")

	// etcd writes its database file in the background (every 100 ms).
	holds := func() bool { return fileHolds(t, db, marker) }
	if !eventually(holds, true) {
		t.Fatalf("%s does not hold the marker the run carried before any deletion: the grep cannot see it", db)
	}
	if _, deleted, err := s.Delete(ctx, &reinv1.RunDeletion{RunId: "run-1", DeletedBy: "admin", Reason: "erasure request", DeletedAt: timestamppb.New(t0)}); err != nil || !deleted {
		t.Fatalf("Delete(run-1): deleted %v, %v", deleted, err)
	}
	if !holds() {
		t.Fatalf("%s lost the marker on the deletion alone: the deleted revisions should stay until compacted", db)
	}

	rev, err := s.revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.compact(ctx, rev); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Defragment(ctx, c.Endpoint(0)); err != nil {
		t.Fatalf("defragment: %v", err)
	}
	if !eventually(holds, false) {
		t.Fatalf("%s still holds the marker after the deletion, a compaction to revision %d and a defragmentation", db, rev)
	}
	if st, err := s.Load(ctx, "run-2"); err != nil || st.RunID != "run-2" {
		t.Fatalf("run-2 after the compaction and the defragmentation: %v", err)
	}
	t.Logf("the write-ahead log holds the marker until etcd rotates it: %v", walHolds(t, c.Dir(0), marker))
}

// eventually polls cond every 50 ms for up to 10 s until it returns want,
// and reports whether it did.
func eventually(cond func() bool, want bool) bool {
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if cond() == want {
			return true
		}
		select {
		case <-tick.C:
		case <-deadline:
			return cond() == want
		}
	}
}
