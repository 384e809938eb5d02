// Package failover_test runs several `rein serve --etcd` replicas over a
// cluster of etcd member processes (internal/etcdtest, the pinned binary)
// and kills, pauses and restarts them while they carry runs, checking
// through the API, the etcd keys and a fixture ledger outside rein that
// no run is lost, forked or given a write twice (issue: scale-out).
//
//   - TestFailover drives -failover.runs runs that read, propose a write,
//     are approved and complete, while a replica is killed with SIGKILL
//     -failover.kills times (a different one each time, restarted after),
//     and prints the time from each kill to its runs carried on elsewhere.
//   - TestPausedReplicaIsFenced stops a replica with SIGSTOP past its lease
//     TTL, lets the others take its runs, and resumes it with SIGCONT.
package failover_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

var (
	runsFlag  = flag.Int("failover.runs", 100, "runs TestFailover drives")
	killsFlag = flag.Int("failover.kills", 10, "SIGKILLs TestFailover sends")
)

// reinBin is the rein binary under test, built by TestMain.
var reinBin string

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	tmp, err := os.MkdirTemp("", "rein-failover-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	reinBin = filepath.Join(tmp, "rein")
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-o", reinBin, "./cmd/rein")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build ./cmd/rein: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// since is how long ago t was, in a short form for logs.
func since(t time.Time) string { return time.Since(t).Round(time.Millisecond).String() }
