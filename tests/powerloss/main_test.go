// Package powerloss_test cuts the power under a real `rein serve`: its --db
// lives on lossyfs (tests/internal/lossyfs), a FUSE file system served by
// this test process that forgets what was not synced, and the test cuts
// the power at chosen operations: a store sync, the first log write after a
// checkpoint, the log's creation, a scrub's rename, a sync during the next
// server's recovery. A cut kills the server with SIGKILL while its
// operation is still unanswered, drops (or tears: keeps a prefix of) every
// unsynced write and directory change, and mounts the disk again as the
// machine's next boot would see it.
//
// Each case drives a few scripted runs from the Go client and records
// every commit the server acknowledged: the version StartRun answered and
// every event a watch handed over. After the last cut the server is
// started again and must hold every acknowledged event as it was seen,
// `rein check --db FILE` must pass the files the cut left, and every run
// must resume to its end. TestLyingDiskIsCaught is the twin: syncs that
// lie lose acknowledged commits, and the same checks say so.
//
// The short set runs in the normal test command; -powerloss.long (or
// REIN_POWERLOSS_LONG=1) adds a sweep that cuts at every sync of the
// workload and of a recovery. Where FUSE cannot be mounted (no root, no
// /dev/fuse, no fusermount3) the tests skip, or fail with
// REIN_REQUIRE_FUSE=1 (scripts/test.sh).
package powerloss_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/reinhq/rein/tests/internal/lossyfs"
	"github.com/reinhq/rein/tests/internal/reinbin"
)

var (
	longFlag = flag.Bool("powerloss.long", false, "also sweep a cut at every sync of the workload and of a recovery (or REIN_POWERLOSS_LONG=1)")
	seedFlag = flag.Uint64("powerloss.seed", 1, "seed of the torn cuts' choices of what to keep")
)

// reinBin is the rein binary under test, built by TestMain.
var reinBin string

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	tmp, err := os.MkdirTemp("", "rein-powerloss-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	if lossyfs.Available() == nil {
		reinBin = filepath.Join(tmp, "rein")
		if err := reinbin.Build(reinBin); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return m.Run()
}

// requireFUSE skips the test where FUSE cannot be mounted, or fails it
// with REIN_REQUIRE_FUSE=1.
func requireFUSE(t *testing.T) {
	t.Helper()
	if err := lossyfs.Available(); err != nil {
		if os.Getenv("REIN_REQUIRE_FUSE") == "1" {
			t.Fatalf("REIN_REQUIRE_FUSE=1, but the power-loss tests cannot mount FUSE: %v", err)
		}
		t.Skipf("skipped: the power-loss tests mount FUSE, and here %v", err)
	}
}

func long() bool { return *longFlag || os.Getenv("REIN_POWERLOSS_LONG") == "1" }
