package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
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
    every blob matching its SHA-256.

Exit 0 when the file is clean, 1 when a problem was found, 3 when there is
no file, 5 when another process holds it (a rein serve: stop it first).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if e.server != "" {
				return usageError("rein check reads a --db file itself, not a --server: run it where the file is, with the server stopped")
			}
			problems, err := checkStore(e.db)
			if errors.Is(err, os.ErrNotExist) {
				return &exitErr{code: exitNotFound, err: fmt.Errorf("no rein store at %s: pass --db", e.db)}
			}
			if err != nil {
				return &exitErr{code: exitUnavailable, err: err}
			}
			if e.json {
				type out struct {
					DB       string    `json:"db"`
					OK       bool      `json:"ok"`
					Problems []problem `json:"problems"`
				}
				if err := writeJSON(e.stdout, out{DB: e.db, OK: len(problems) == 0, Problems: problems}, false); err != nil {
					return err
				}
			} else {
				for _, p := range problems {
					fmt.Fprintln(e.stdout, p.String())
				}
			}
			if len(problems) > 0 {
				return &exitErr{code: exitError, err: fmt.Errorf("%s: %d problems found (the file was not changed)", e.db, len(problems))}
			}
			fmt.Fprintf(e.stderr, "rein: %s: no problem found\n", e.db)
			return nil
		},
	}
}
