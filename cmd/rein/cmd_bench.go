package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/reinhq/rein/internal/bench"
)

// benchScenarios are the scenarios `rein bench` runs, in the order "all"
// runs them: the bench package's, then watch, which needs a rein server in a
// separate process (benchServer).
var benchScenarios = append(slices.Clone(bench.Scenarios), bench.Scenario{
	Name: "watch",
	Doc:  "1,000 WatchRun streams over loopback TCP following 64 runs that append, against plain gRPC streaming",
	Run:  bench.Watch,
}, bench.Scenario{
	Name: "recovery",
	Doc:  "start rein serve on a store of 10,000 runs (1,000 running, ~1,000,000 events): time to serving, to every running run resumed, and RSS",
	Run:  bench.Recovery,
})

func benchNames() []string {
	names := make([]string, len(benchScenarios))
	for i, s := range benchScenarios {
		names[i] = s.Name
	}
	return names
}

func lookupBench(name string) (bench.Scenario, bool) {
	for _, s := range benchScenarios {
		if s.Name == name {
			return s, true
		}
	}
	return bench.Scenario{}, false
}

// benchServer starts this binary's `serve` on the store at db, for the watch
// scenario's measurement of a server's memory with its streams idle. The
// tests replace it.
var benchServer = func(db string) (*exec.Cmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find the rein binary: %w", err)
	}
	return exec.Command(exe, benchServeArgs(db)...), nil
}

// benchServeArgs serve db on a free loopback port (it logs the address),
// with no rate limit: the scenario opens 1,000 streams at once.
func benchServeArgs(db string) []string {
	return []string{"--db", db, "serve", "--listen", "127.0.0.1:0", "--rate", "0"}
}

type benchOptions struct {
	scale  float64
	rounds int
	dir    string
}

func newBenchCmd(e *env) *cobra.Command {
	o := &benchOptions{}
	cmd := &cobra.Command{
		Use:   "bench SCENARIO",
		Short: "Measure rein against the disk it runs on: " + strings.Join(benchNames(), ", ") + " or all",
		Long: `Measure rein against the disk it runs on. Each scenario times a figure through
rein (the store, the engine, the fold, the watch streams) and a baseline
doing the same work without rein (straight on bbolt; for watch, plain gRPC
streaming from memory), then prints one line: the figure, the baseline, their
ratio and the ratio it must reach. With --json the line is a JSON object.

Scenarios:
` + scenarioHelp() + `  all     every scenario, in that order

Files go in a temporary directory that is removed; --db is not used. The
watch scenario also starts this binary's serve on a temporary store, to
measure the server's memory with every stream open and idle.`,
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
	for _, s := range benchScenarios {
		fmt.Fprintf(&b, "  %-7s %s\n", s.Name, s.Doc)
	}
	return b.String()
}

func (o *benchOptions) run(cmd *cobra.Command, e *env, name string) error {
	var todo []bench.Scenario
	if name == "all" {
		todo = benchScenarios
	} else if s, ok := lookupBench(name); ok {
		todo = []bench.Scenario{s}
	} else {
		return usageError("unknown scenario %q; choose one of: %s, all", name, strings.Join(benchNames(), ", "))
	}
	if o.scale <= 0 {
		return usageError("--scale must be positive, got %v", o.scale)
	}
	if o.rounds <= 0 {
		return usageError("--rounds must be positive, got %d", o.rounds)
	}
	opts := bench.Options{Scale: o.scale, Rounds: o.rounds, Dir: o.dir}
	bench.WatchServer = benchServer
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
	fmt.Fprintf(w, "%-6s %.0f %s, baseline %.0f, ratio %.2f (target ≥ %.2f, %s); %d events, %d runs, %.2fs; rounds %s vs %s%s\n",
		r.Scenario, r.Figure, r.Unit, r.Baseline, r.Ratio, r.Target, verdict, r.Events, r.Runs, r.Seconds,
		rates(r.Figures), rates(r.Baselines), benchDetail(r))
}

// benchDetail is what a scenario's line adds to the rates: for watch, the
// other targets; for replay, what each side spends per event.
func benchDetail(r bench.Result) string {
	if r.Scenario == "recovery" {
		x := r.Extra
		return fmt.Sprintf("; serving in %.2fs (target ≤ 2s; an empty store: %.3fs), every running run resumed in %.2fs, peak RSS %.0f MiB (target ≤ 256 MiB; the process's own %.0f MiB)",
			x["serving_seconds"], x["baseline_serving_seconds"], x["all_resumed_seconds"], x["rss_peak_mib"], x["rss_anon_mib"])
	}
	if r.Scenario == "replay" {
		x := r.Extra
		return fmt.Sprintf("; per event: read %.0f ns + replay %.0f ns, against read %.0f ns + fold %.0f ns (without the reading, ratio %.3f)",
			x["load_ns_per_event"], x["replay_ns_per_event"], x["baseline_load_ns_per_event"], x["fold_ns_per_event"], x["in_memory_ratio"])
	}
	if r.Scenario != "watch" {
		return ""
	}
	x := r.Extra
	rss := "unmeasured"
	if v := x["rss_idle_mib"]; v > 0 {
		rss = fmt.Sprintf("%.0f MiB", v)
	}
	return fmt.Sprintf("; %.0f streams, p99 %.1f ms vs %.1f ms at %.0f deliveries/s (ratio %.2f, target ≤ %.0f), p50 %.2f ms vs %.2f ms; %.0f gaps, %.0f duplicates; idle server %s (target ≤ %.0f MiB)",
		x["streams"], x["p99_ms"], x["baseline_p99_ms"], x["paced_offered_deliveries_per_s"], x["p99_ratio"], x["p99_ratio_target"],
		x["p50_ms"], x["baseline_p50_ms"], x["gaps"], x["duplicates"], rss, x["rss_target_mib"])
}

func rates(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf("%.0f", x)
	}
	return "[" + strings.Join(s, " ") + "]"
}
