package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/spf13/cobra"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/policy"
	"github.com/reinhq/rein/internal/replay"
)

func newReplayCmd(e *env) *cobra.Command {
	var policyFile string
	cmd := &cobra.Command{
		Use: "replay RUN_ID|FILE|DIR",
		Example: `  rein replay testdata/recordings
  rein replay run_01M8…
  rein replay --policy new-policy.toml run_01M8…`,
		Short: "Replay recorded runs through this rein's harness and report the first divergence",
		Long: `Feed each recorded run's model replies, tool results and people's decisions, in
order and on the recorded clock, through this rein's harness into an in-memory
log, and compare the new events with the recorded ones. No model and no tool is
called. A run is a stored RUN_ID (on --db or --server), an export FILE (binary,
as rein export writes it, or text, as the recordings under testdata/ are), or
every *.rein file in DIR. A delegating run is replayed with its children's
recorded results (a tree, as rein export --tree writes it), and each child on
its own. Exit 0 when every run matches; 1 at the first
divergence, printed as the sequence, the first field that differs, the
expected event and the event the harness made.

With --policy FILE the runs are replayed under that policy file's rules (as
rein serve --policy reads it) in place of the server's rules they were
recorded under: the divergence is the first call the new rules decide
otherwise. A policy service's answers always come from the recording.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			var rules *policy.Holder
			if policyFile != "" {
				var err error
				if rules, err = policy.NewHolder(policyFile); err != nil {
					return usageError("--policy: %v", err)
				}
			}
			runs, err := replaySources(args[0])
			if err != nil {
				return err
			}
			if runs == nil { // a stored run, with its blobs and its tree, as rein export reads it
				x, _, err := treeExport(ctx, e, args[0])
				if err != nil {
					return err
				}
				runs = map[string]*reinv1.RunExport{}
				addTree(runs, args[0], x)
			}
			names := make([]string, 0, len(runs))
			for n := range runs {
				names = append(names, n)
			}
			sort.Strings(names)
			failed := 0
			for _, name := range names {
				x := runs[name]
				res, err := replay.Run(ctx, x.GetEvents(), replay.Options{Blobs: x.GetBlobs(), Children: replay.TreeChildren(x), Policy: rules})
				if err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
				if e.json {
					out := map[string]any{"source": name, "run_id": res.RunID, "events": res.Events, "match": res.Divergence == nil}
					if d := res.Divergence; d != nil {
						out["sequence"] = d.Sequence
						out["field"] = d.Field
						out["expected"] = eventOrNil(d.Expected)
						out["got"] = eventOrNil(d.Got)
					}
					if err := writeJSON(e.stdout, out, false); err != nil {
						return err
					}
				} else if d := res.Divergence; d != nil {
					fmt.Fprintf(e.stdout, "DIVERGED %s (run %s) at sequence %d\n", name, res.RunID, d.Sequence)
					if d.Field != "" {
						fmt.Fprintf(e.stdout, "  field:    %s\n", d.Field)
					}
					fmt.Fprintf(e.stdout, "  expected: %s\n  got:      %s\n", lineOrNone(d.Expected), lineOrNone(d.Got))
				} else {
					fmt.Fprintf(e.stdout, "ok %s (run %s, %d events)\n", name, res.RunID, res.Events)
				}
				if res.Divergence != nil {
					failed++
				}
			}
			if failed > 0 {
				return &exitErr{code: exitError, err: fmt.Errorf("%d of %d runs diverged", failed, len(runs))}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&policyFile, "policy", "", "replay under this policy file's server rules (TOML, as rein serve --policy) instead of those recorded")
	return cmd
}

// replaySources reads an export file or a directory of them, by file name;
// nil, nil when arg names neither (a stored run's ID). A tree's children
// are replayed each on its own too, as "FILE#RUN_ID".
func replaySources(arg string) (map[string]*reinv1.RunExport, error) {
	info, err := os.Stat(arg)
	if err != nil {
		return nil, nil
	}
	files := []string{arg}
	if info.IsDir() {
		if files, err = filepath.Glob(filepath.Join(arg, "*.rein")); err != nil {
			return nil, err
		}
		if len(files) == 0 {
			return nil, usageError("%s holds no *.rein files", arg)
		}
	}
	out := map[string]*reinv1.RunExport{}
	for _, f := range files {
		x, err := readExportFile(f)
		if err != nil {
			return nil, err
		}
		addTree(out, f, x)
	}
	return out, nil
}

// addTree adds x under name, and each run of its tree under name#RUN_ID:
// a parent is replayed with its children's recorded results, and each
// child on its own.
func addTree(out map[string]*reinv1.RunExport, name string, x *reinv1.RunExport) {
	out[name] = x
	for _, c := range x.GetChildren() {
		if len(c.GetBlobs()) == 0 {
			c.Blobs = x.GetBlobs()
		}
		addTree(out, name+"#"+c.GetRunId(), c)
	}
}

func eventOrNil(ev *reinv1.Event) any {
	if ev == nil {
		return nil
	}
	return eventJSON(ev)
}

func lineOrNone(ev *reinv1.Event) string {
	if ev == nil {
		return "(no event)"
	}
	return eventLine(ev)
}
