package lifecycle_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/reinhq/rein/internal/lifecycle"
	"github.com/reinhq/rein/internal/store/bolt"
)

// TestLiveStoreStaysBounded: runs that start, end, are archived at once and
// deleted after their retention keep the bbolt file's size bounded however
// many go through it; without a lifecycle the same workload grows it with
// every run (the twin).
func TestLiveStoreStaysBounded(t *testing.T) {
	const rounds, perRound = 16, 25
	grow := func(policy lifecycle.Policy) []int64 {
		f := newFixture(t)
		f.policy = policy
		var sizes []int64
		n := 0
		for r := 0; r < rounds; r++ {
			for i := 0; i < perRound; i++ {
				n++
				f.runSized(fmt.Sprintf("run-%05d", n), 8<<10)
			}
			f.now = f.now.Add(time.Minute)
			f.sweep()
			size, err := bolt.Size(f.path) // the file and its log
			if err != nil {
				t.Fatal(err)
			}
			sizes = append(sizes, size)
		}
		return sizes
	}
	kept := grow(lifecycle.Policy{ArchiveOn: true, RetainOn: true, Retain: 30 * time.Second})
	all := grow(lifecycle.Policy{})
	// What stays of a deleted run is its deletion record and its status
	// changes, a few hundred bytes, against the 8 KiB each run carried.
	// The runs stored between the third size and the last.
	const runs = (rounds - 3) * perRound
	if perRun := (kept[len(kept)-1] - kept[2]) / runs; perRun > 1<<10 {
		t.Fatalf("with retention the file grew %d bytes a run deleted: %v", perRun, kept)
	}
	// Without one it grows by about what each run carried: bbolt grows
	// the file by whole allocations and reuses the pages a checkpoint
	// frees, and the log between checkpoints holds what the file does
	// not yet, so the figure is some of the 8 KiB, never a few hundred
	// bytes.
	if perRun := (all[len(all)-1] - all[2]) / runs; perRun < 4<<10 {
		t.Fatalf("without a lifecycle the file grew only %d bytes a run; the workload does not test the bound: %v", perRun, all)
	}
	t.Logf("file size by round, with retention: %v", kept)
	t.Logf("file size by round, without: %v", all)
}

// runSized stores a run that ended whose answer is size bytes.
func (f *fixture) runSized(id string, size int) {
	f.t.Helper()
	f.run(id, "", false)
	f.end(id, strings.Repeat("x", size))
}
