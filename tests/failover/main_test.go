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
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/reinhq/rein/tests/internal/reinbin"
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
	if err := reinbin.Build(reinBin); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}
