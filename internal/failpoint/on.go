//go:build failpoints

package failpoint

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
