// Package crash_test crashes a real `rein serve` process and checks, over
// the histories it leaves behind, that nothing acknowledged was lost and
// that every approved write happened exactly once (docs/design.md §3, §5, §7).
//
//   - TestSIGKILL drives many scripted runs (a read, a write that needs
//     approval, a question for a person, a final answer) from client
//     goroutines while the server is killed with SIGKILL at random moments
//     and restarted on the same database, fixture ledger and address. The
//     seed of the kill schedule is logged and settable with -crash.seed.
//   - TestFailpoints is its deterministic twin: one run per failpoint
//     (REIN_FAILPOINTS), crashed at the exact moment the point names, then
//     carried to its end by a restarted server.
//
// Both build the rein binary once (TestMain), with the build tag
// failpoints (a normal build has none), and talk to it only through the
// generated client, the fixture ledger and, after the process is gone, the
// bbolt file opened read-only. TestFailpointsNeedTheTag checks that a
// normal build has no failpoints.
package crash_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/reinhq/rein/tests/internal/reinbin"
)

var (
	seedFlag  = flag.Int64("crash.seed", 0, "seed of TestSIGKILL's kill schedule; 0 picks one from the clock (it is logged)")
	runsFlag  = flag.Int("crash.runs", 200, "runs TestSIGKILL drives")
	killsFlag = flag.Int("crash.kills", 20, "SIGKILLs TestSIGKILL sends")
)

// reinBin is the rein binary under test, built by TestMain with the
// failpoints tag.
var reinBin string

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	tmp, err := os.MkdirTemp("", "rein-crash-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	reinBin = filepath.Join(tmp, "rein")
	if err := reinbin.Build(reinBin, "-tags", "failpoints"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}
