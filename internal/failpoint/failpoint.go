// Package failpoint crashes the process at named points, for crash tests
// that need a crash at an exact moment (between a write's dispatch and its
// commit, say) rather than at a random one. Points are armed with the
// environment variable REIN_FAILPOINTS, a comma-separated list of NAME or
// NAME@N (crash on the Nth time the point is reached; default the first).
// A crash is os.Exit(CrashCode): no deferred function runs and nothing is
// flushed, as with SIGKILL. Unarmed, a point costs one atomic load.
package failpoint

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// CrashCode is the exit code of a crash at a failpoint.
const CrashCode = 77

// The points rein defines.
const (
	// StoreBeforeCommit: a batch of appends is about to be committed.
	StoreBeforeCommit = "store-before-commit"
	// StoreAfterCommit: a batch is durable and not yet acknowledged.
	StoreAfterCommit = "store-after-commit"
	// WriteAfterDispatch: write_dispatched is durable; the write was not sent.
	WriteAfterDispatch = "write-after-dispatch"
	// WriteAfterCommit: the tool committed the write; its receipt is not
	// recorded.
	WriteAfterCommit = "write-after-commit"
)

var (
	armed atomic.Bool
	// mu guards points.
	mu sync.Mutex
	// points maps an armed name to the hits left before it fires.
	points map[string]int
)

func init() { Arm(os.Getenv("REIN_FAILPOINTS")) }

// Arm sets the armed points from a spec as REIN_FAILPOINTS gives it;
// "" disarms every point.
func Arm(spec string) {
	mu.Lock()
	defer mu.Unlock()
	points = map[string]int{}
	for _, item := range strings.Split(spec, ",") {
		name, nth, _ := strings.Cut(strings.TrimSpace(item), "@")
		if name == "" {
			continue
		}
		n, err := strconv.Atoi(nth)
		if err != nil || n < 1 {
			n = 1
		}
		points[name] = n
	}
	armed.Store(len(points) > 0)
}

// Inject crashes the process if name is armed and this is its Nth hit.
func Inject(name string) {
	if !armed.Load() {
		return
	}
	mu.Lock()
	left, ok := points[name]
	if ok {
		left--
		points[name] = left
	}
	mu.Unlock()
	if ok && left == 0 {
		fmt.Fprintf(os.Stderr, "rein: failpoint %s: crashing\n", name)
		os.Exit(CrashCode)
	}
}
