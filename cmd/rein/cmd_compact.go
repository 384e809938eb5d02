package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/reinhq/rein/internal/store/bolt"
)

func newCompactCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "compact",
		Example: `  rein compact --db /var/lib/rein/rein.db
  rein compact --db rein.db --json`,
		Short: "Compact the --db store offline: rewrite it without its free pages, verified, in place",
		Long: `Rewrite the --db file without the free pages it keeps after growing (bbolt
never gives them back to the disk), with no server running on it:

  1. lock the file (a running rein serve is refused: stop it first), and
     check it whole, as rein check does: a damaged file, or one that is not a
     rein store, is refused and left unchanged;
  2. write a compacted copy beside it (FILE.compact-*, mode 0600, the file's
     owner) with bbolt's compaction, and fsync it;
  3. check the copy as rein check does, and compare it with the file: the
     same runs, each ending at the same event, and every key and value the
     same;
  4. rename the copy over the file and fsync the directory.

The file stays locked throughout. Until the rename it is not written: any
failure removes the copy and leaves the file as it was. A copy that would not
be smaller is removed and the file left as it was. A crash leaves the file as
it was, and perhaps a FILE.compact-* beside it, which can be removed.

Prints the sizes before and after and the time taken (one JSON object with
--json). Exit 0 when the file was compacted or was compact already, 1 when it
is damaged or not a rein store or the compaction failed (the file unchanged),
3 when there is no file, 5 when another process holds it (a rein serve: stop
it first) or it cannot be written.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if e.server != "" {
				return usageError("rein compact rewrites a --db file itself, not a --server's: run it where the file is, with the server stopped")
			}
			res, err := bolt.Compact(e.db, bolt.CompactOptions{})
			if errors.Is(err, os.ErrNotExist) {
				return &exitErr{code: exitNotFound, err: fmt.Errorf("no rein store at %s: pass --db", e.db)}
			}
			if err != nil {
				return &exitErr{code: compactExitCode(err), err: err}
			}
			if e.json {
				return writeJSON(e.stdout, newCompactReport(res), false)
			}
			printCompact(e.stdout, res)
			return nil
		},
	}
}

// compactExitCode is the exit code of a compaction that failed: as rein
// check's for a file that is held or damaged.
func compactExitCode(err error) int {
	var damaged *bolt.DamagedError
	switch {
	case errors.As(err, &damaged):
		return exitError
	case errors.Is(err, bolt.ErrInUse), errors.Is(err, os.ErrPermission), errors.Is(err, syscall.EROFS):
		return exitUnavailable
	}
	return exitError
}

// compactReport is rein compact's JSON. Fields are added, never renamed or
// removed.
type compactReport struct {
	DB string `json:"db"`
	// Replaced is whether the compacted copy replaced the file; false when
	// it would not have been smaller, and the file is unchanged.
	Replaced    bool  `json:"replaced"`
	BeforeBytes int64 `json:"before_bytes"`
	// AfterBytes is the compacted copy's size, whether or not it replaced
	// the file.
	AfterBytes int64 `json:"after_bytes"`
	// ReclaimedBytes is what the file shrank by: 0 when it was not replaced.
	ReclaimedBytes int64   `json:"reclaimed_bytes"`
	Runs           int     `json:"runs"`
	Events         uint64  `json:"events"`
	TookMS         float64 `json:"took_ms"`
}

func newCompactReport(res bolt.CompactResult) compactReport {
	out := compactReport{DB: res.Path, Replaced: res.Replaced, BeforeBytes: res.Before, AfterBytes: res.After,
		Runs: res.Runs, Events: res.Events, TookMS: float64(res.Took.Microseconds()) / 1000}
	if res.Replaced {
		out.ReclaimedBytes = res.Before - res.After
	}
	return out
}

func printCompact(w io.Writer, res bolt.CompactResult) {
	took := res.Took.Round(time.Millisecond)
	if res.Took < time.Millisecond {
		took = res.Took.Round(time.Microsecond)
	}
	if !res.Replaced {
		fmt.Fprintf(w, "%s is compact already, left unchanged (%s)\n", res.Path, took)
		fmt.Fprintf(w, "  size:      %s (%d bytes)\n", humanBytes(res.Before), res.Before)
		fmt.Fprintf(w, "  compacted: %s (%d bytes), no smaller\n", humanBytes(res.After), res.After)
		return
	}
	fmt.Fprintf(w, "%s compacted in %s\n", res.Path, took)
	fmt.Fprintf(w, "  before: %s (%d bytes)\n", humanBytes(res.Before), res.Before)
	fmt.Fprintf(w, "  after:  %s (%d bytes), %.1f%% smaller\n", humanBytes(res.After), res.After,
		100*float64(res.Before-res.After)/float64(res.Before))
	fmt.Fprintf(w, "  %s and %s, the same in the compacted file, which checks clean\n",
		countOf(uint64(res.Runs), "run"), countOf(res.Events, "event"))
}

// countOf is n and noun, in the plural unless n is 1.
func countOf(n uint64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// humanBytes is n bytes in KiB, MiB, … to one decimal.
func humanBytes(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	f, unit := float64(n)/1024, 0
	for f >= 1024 && unit < 5 {
		f /= 1024
		unit++
	}
	return fmt.Sprintf("%.1f %ciB", f, "KMGTPE"[unit])
}
