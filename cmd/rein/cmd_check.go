package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/reinhq/rein/internal/store/bolt"
	"github.com/reinhq/rein/internal/storeformat"
)

func newCheckCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "check",
		Example: `  rein check --db /var/lib/rein/rein.db
  rein check --db rein.db --json`,
		Short: "Check the --db store for damage, read-only, and report every problem",
		Long: `Read the whole --db file read-only (it is never written) and report every
problem found, one a line on stdout (a JSON object with --json):

  - bbolt's consistency check: every page reachable once and of the right
    type, keys in order, the free list consistent;
  - rein's own: every stored event, snapshot and contract's checksum; every
    run's events stored under sequences 1, 2, 3, … with no gap, folding to
    the run's snapshot; the status and request indexes naming stored runs;
    every blob matching its SHA-256;
  - the store's log (FILE-wal): another store's, or not following on from
    the file; a damaged record with whole ones after it (a crash tears the
    last record at most); a damaged log kept aside (FILE-wal.broken-TIME);
    and its records applied, as the next start applies them, to a private
    copy of the file: a record that does not apply is a problem, and the
    checks above read the copy. A log a crash left without its header is
    a note ("note: ..."), not a problem: it holds no record.

It prints the store format the file was last written with (docs/upgrading.md);
a file in a format this rein cannot read is refused with exit 2, naming it.

Exit 0 when the file is clean (notes alone), 1 when a problem was found, 2 when the file is
in a newer store format, 3 when there is no file, 5 when another process
holds it (a rein serve: stop it first).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if e.server != "" {
				return usageError("rein check reads a --db file itself, not a --server: run it where the file is, with the server stopped")
			}
			if !exists(e.db) {
				return &exitErr{code: exitNotFound, err: fmt.Errorf("no rein store at %s: pass --db", e.db)}
			}
			// The format first: a file this rein cannot read is not
			// checked by it. One whose format cannot be read is checked,
			// and the check says why.
			format, err := bolt.ReadStoreFormat(e.db, bolt.Options{})
			if err == nil {
				if err := storeformat.This().Serves(format, "the file "+e.db); err != nil {
					return &exitErr{code: exitUsage, err: err}
				}
			}
			formatText := "unknown"
			if format > 0 {
				formatText = fmt.Sprint(format)
			}
			problems, err := checkStore(e.db)
			if errors.Is(err, os.ErrNotExist) {
				return &exitErr{code: exitNotFound, err: fmt.Errorf("no rein store at %s: pass --db", e.db)}
			}
			if err != nil {
				return &exitErr{code: exitUnavailable, err: err}
			}
			clean := true
			for _, p := range problems {
				clean = clean && p.Note
			}
			if e.json {
				type out struct {
					DB          string    `json:"db"`
					OK          bool      `json:"ok"`
					Problems    []problem `json:"problems"`
					StoreFormat int       `json:"store_format"`
				}
				if err := writeJSON(e.stdout, out{DB: e.db, OK: clean, Problems: problems, StoreFormat: int(format)}, false); err != nil {
					return err
				}
			} else {
				for _, p := range problems {
					fmt.Fprintln(e.stdout, p.String())
				}
			}
			if !clean {
				return &exitErr{code: exitError, err: fmt.Errorf("%s (store format %s): %d problems found (the file was not changed)", e.db, formatText, len(problems))}
			}
			fmt.Fprintf(e.stderr, "rein: %s: store format %s; no problem found\n", e.db, formatText)
			return nil
		},
	}
}
