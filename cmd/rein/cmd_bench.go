package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/reinhq/rein/internal/bench"
)

type benchOptions struct {
	scale  float64
	rounds int
	dir    string
}

func newBenchCmd(e *env) *cobra.Command {
	o := &benchOptions{}
	cmd := &cobra.Command{
		Use:   "bench SCENARIO",
		Short: "Measure rein against the disk it runs on: " + strings.Join(bench.Names(), ", ") + " or all",
		Long: `Measure rein against the disk it runs on. Each scenario times a figure through
rein (the store, the engine, the fold) and a baseline doing the same storage
work straight on bbolt, then prints one line: the figure, the baseline, their
ratio and the ratio it must reach. With --json the line is a JSON object.

Scenarios:
` + scenarioHelp() + `  all     every scenario, in that order

Files go in a temporary directory that is removed; --db is not used.`,
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd, e, args[0])
		},
	}
	cmd.Flags().Float64Var(&o.scale, "scale", 1, "multiply each scenario's size by this (such as 0.1 for a quick run)")
	cmd.Flags().IntVar(&o.rounds, "rounds", 3, "rounds of figure and baseline, alternating; the best of each is kept")
	cmd.Flags().StringVar(&o.dir, "dir", "", "directory for the temporary files (default: the system's)")
	return cmd
}

func scenarioHelp() string {
	var b strings.Builder
	for _, s := range bench.Scenarios {
		fmt.Fprintf(&b, "  %-7s %s\n", s.Name, s.Doc)
	}
	return b.String()
}

func (o *benchOptions) run(cmd *cobra.Command, e *env, name string) error {
	var todo []bench.Scenario
	if name == "all" {
		todo = bench.Scenarios
	} else if s, ok := bench.Lookup(name); ok {
		todo = []bench.Scenario{s}
	} else {
		return usageError("unknown scenario %q; choose one of: %s, all", name, strings.Join(bench.Names(), ", "))
	}
	if o.scale <= 0 {
		return usageError("--scale must be positive, got %v", o.scale)
	}
	if o.rounds <= 0 {
		return usageError("--rounds must be positive, got %d", o.rounds)
	}
	opts := bench.Options{Scale: o.scale, Rounds: o.rounds, Dir: o.dir}
	for _, s := range todo {
		r, err := s.Run(cmd.Context(), opts)
		if err != nil {
			return fmt.Errorf("bench %s: %w", s.Name, err)
		}
		if e.json {
			if err := writeJSON(e.stdout, r, false); err != nil {
				return err
			}
			continue
		}
		printBench(e.stdout, r)
	}
	return nil
}

// printBench writes a result as one line for a person.
func printBench(w io.Writer, r bench.Result) {
	verdict := "met"
	if !r.Met {
		verdict = "MISSED"
	}
	fmt.Fprintf(w, "%-6s %.0f %s, baseline %.0f, ratio %.2f (target ≥ %.2f, %s); %d events, %d runs, %.2fs; rounds %s vs %s\n",
		r.Scenario, r.Figure, r.Unit, r.Baseline, r.Ratio, r.Target, verdict, r.Events, r.Runs, r.Seconds,
		rates(r.Figures), rates(r.Baselines))
}

func rates(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf("%.0f", x)
	}
	return "[" + strings.Join(s, " ") + "]"
}
