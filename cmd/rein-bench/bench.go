//go:build reinbench

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/reinhq/rein/cmd/rein-bench/bench"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/store/bolt"
)

// benchStores are the storage backends --store can name.
const benchStores = "bolt, etcd"

// benchBackend is the storage backend `rein-bench --store name` runs the
// scenarios on: how to open its store and, for the baselines, its ceiling.
// etcd's needs a cluster: run opens it (bench_etcd.go).
func benchBackend(name string) (bench.Backend, error) {
	switch name {
	case "etcd":
		return bench.Backend{Name: "etcd"}, nil
	case "bolt":
		return bench.Backend{
			Name: "bolt",
			Open: func(path string, noSync bool) (bench.Store, error) {
				s, err := bolt.Open(path, bolt.Options{NoSync: noSync})
				if err != nil {
					return nil, err
				}
				return s, nil
			},
			OpenOutbox: func(path string, outbox store.Outbox) (bench.Store, error) {
				s, err := bolt.Open(path, bolt.Options{Outbox: outbox})
				if err != nil {
					return nil, err
				}
				return s, nil
			},
			Size:    bolt.Size,
			Ceiling: bolt.Ceiling{},
		}, nil
	}
	return bench.Backend{}, usageError("unknown --store %q; the storage backends are: %s", name, benchStores)
}

// benchServe is the command of the rein binary's `serve` on the store at
// db, for the watch scenario's measurement of a server's memory with its
// streams idle.
func (o *benchOptions) benchServe(db string) (*exec.Cmd, error) {
	exe, err := o.reinBinary()
	if err != nil {
		return nil, err
	}
	return exec.Command(exe, benchServeArgs(db)...), nil
}

// reinBinary is the rein binary whose `rein serve` the watch, failover and
// scale scenarios start: --rein, else rein beside this binary, else rein on
// $PATH.
func (o *benchOptions) reinBinary() (string, error) {
	if o.rein != "" {
		if fi, err := os.Stat(o.rein); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return "", usageError("--rein %s is not an executable file: give the rein binary (go build -o .bin/rein ./cmd/rein)", o.rein)
		}
		return o.rein, nil
	}
	if exe, err := os.Executable(); err == nil {
		near := filepath.Join(filepath.Dir(exe), "rein")
		if fi, err := os.Stat(near); err == nil && fi.Mode().IsRegular() {
			return near, nil
		}
	}
	if p, err := exec.LookPath("rein"); err == nil {
		return p, nil
	}
	return "", &exitErr{code: exitUnavailable, err: errors.New("no rein binary to start `rein serve` from: none beside rein-bench, none on $PATH; build one (go build -o .bin/rein ./cmd/rein) and give it with --rein PATH")}
}

// benchServeArgs serve db on a free loopback port (it logs the address),
// with no rate limit: the scenario opens 1,000 streams at once.
func benchServeArgs(db string) []string {
	return []string{"--db", db, "serve", "--listen", "127.0.0.1:0", "--rate", "0"}
}

type benchOptions struct {
	scale  float64
	rounds int
	runs   int
	traces bool
	dir    string
	store  string
	etcd   benchEtcdFlags
	// rein is the rein binary the watch, failover and scale scenarios
	// start.
	rein string
	// replicas are the replica counts the scale scenario measures.
	replicas []int
	// json is --json: a JSON object a line.
	json bool
	// archive and svg are the lifecycle scenario's.
	archive, svg string
}

const benchLong = `Measure rein against the disk it runs on. Each scenario times a figure through
rein (the store, the engine, the fold, the watch streams) and a baseline
doing the same work without rein (the storage backend's raw ceiling, such as
straight bbolt Updates; for watch, plain gRPC streaming from memory), then
prints one line: the figure, the baseline, their ratio and the ratio it must
reach. With --json the line is a JSON object.

Scenarios (steps runs steps, steps-runs and steps-stream):
%s  all          every scenario, in that order
  failover     three rein serve --etcd replicas of --rein (lease TTL 2s):
               the time from killing one (SIGKILL, 10 times) to its runs carried
               on by the others, and runs/s with 1, 2 and 3 replicas; on the
               bench's etcd (--etcd, or one it starts); not part of all
  scale        1, 2, 4 and 8 (--replicas) rein serve --etcd replicas of --rein
               (lease TTL 2s, --max-runs 16) with 1,000 runs paused for
               approval: 8 clients drive 4,000 steps (4-step runs) through
               replicas 1..N-1 while replica 0, the observer, gets no request;
               per replica its CPU (/proc) and the bytes its etcd client
               received (rein_etcd_received_bytes_total), idle and busy; the
               observer's CPU and etcd bytes per 1,000 steps driven elsewhere
               against its idle rate over the same time (target ≤ 1.05), CPU
               per driven step across N; then its idle cost before and after
               100,000 finished runs are added (target ≤ 1.05); on the bench's
               etcd (--etcd, or one it starts); not part of all
  lifecycle    finished runs archived by the keeper (runs/s, the median of
               --rounds) against raw puts of the same exports to the same
               archive, rounds alternating; GetRun and ListEvents
               p50/p99 of an archived run (its cache cold and warm) against a
               live one through the gRPC server; the live store's size over a
               steady workload with and without archiving and retention (--svg
               plots it); on --archive (default: a temporary directory; the
               objects it writes are deleted); bolt only; not part of all

Files go in a temporary directory that is removed; --db is not used. The
watch scenario also starts rein serve (the rein binary of --rein) on a
temporary store, to measure the server's memory with every stream open and
idle.

With --store etcd the scenarios whose baseline is the backend's ceiling run
(append, steps, steps-runs, fold; all means those, steps
steps and steps-runs), against raw etcd
transactions from the same client: for steps and steps-runs, putting the
same bytes as the store's appends (each commit's events, the run's snapshot
and the blobs of the model call's input; the ratio to the events alone is
printed beside it); for append, the events. --etcd ENDPOINTS
names a cluster to run on, under a fresh prefix below --etcd-prefix that is
deleted at the end; without it the bench starts one durable etcd member from
the pinned binary (bash scripts/tools.sh builds .bin/etcd; or --etcd-bin)
in a temporary directory and stops it after.`

func newRootCmd(e *env) *cobra.Command {
	o := &benchOptions{}
	cmd := &cobra.Command{
		Use: "rein-bench SCENARIO",
		Example: `  rein-bench steps
  rein-bench steps --runs 64 --rounds 3
  rein-bench all --scale 0.1 --json
  rein-bench append --store etcd
  rein-bench fold --store etcd --etcd 127.0.0.1:2379 --scale 0.1
  rein-bench failover --rein .bin/rein
  rein-bench scale --rein .bin/rein --scale 0.1 --replicas 1,2,4`,
		Short: "Measure rein against the disk it runs on (rein-bench --help lists the scenarios)",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError("give one scenario (rein-bench --help lists them); got %d arguments", len(args))
			}
			return nil
		},
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			e.json = o.json
			return o.run(cmd, e, args[0])
		},
	}
	// The scenario table is built for the help only when it is asked for,
	// not each time the binary starts.
	help := cmd.HelpFunc()
	cmd.SetHelpFunc(func(c *cobra.Command, args []string) {
		c.Long = fmt.Sprintf(benchLong, scenarioHelp())
		help(c, args)
	})
	cmd.Flags().Float64Var(&o.scale, "scale", 1, "multiply each scenario's size by this (such as 0.1 for a quick run)")
	cmd.Flags().IntVar(&o.rounds, "rounds", 3, "rounds of figure and baseline, alternating; the best of each is kept")
	cmd.Flags().IntVar(&o.runs, "runs", 16, "how many concurrent runs steps-runs drives, 500 steps each")
	cmd.Flags().BoolVar(&o.traces, "traces", false, "steps and steps-runs: build the runs' spans as rein serve --otel does (dropped, not exported), to measure what tracing costs")
	cmd.Flags().StringVar(&o.dir, "dir", "", "directory for the temporary files (default: the system's)")
	cmd.Flags().StringVar(&o.store, "store", "bolt", "storage backend to run on: "+benchStores)
	cmd.Flags().StringVar(&o.archive, "archive", "", "lifecycle: the archive to measure, file:///DIR or s3://BUCKET?endpoint=…&region=… (credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY); default: a temporary directory")
	cmd.Flags().StringVar(&o.svg, "svg", "", "lifecycle: write the plot of the live store's size to this SVG file")
	cmd.Flags().StringVar(&o.rein, "rein", "", "the rein binary whose rein serve watch, failover and scale start (default: rein beside rein-bench, else on $PATH)")
	cmd.Flags().IntSliceVar(&o.replicas, "replicas", defaultScaleReplicas, "scale: the replica counts to measure, in order (comma-separated)")
	cmd.Flags().BoolVar(&o.json, "json", false, "print each scenario's result as a JSON object on a line")
	o.etcd.register(cmd.Flags())
	return cmd
}

func scenarioHelp() string {
	var b strings.Builder
	for _, s := range bench.Scenarios() {
		fmt.Fprintf(&b, "  %-12s %s\n", s.Name, s.Doc)
	}
	return b.String()
}

func (o *benchOptions) run(cmd *cobra.Command, e *env, name string) error {
	if cmd.Flags().Changed("replicas") && name != "scale" {
		return usageError("--replicas is the scale scenario's")
	}
	switch name {
	case "failover":
		return o.benchFailover(cmd, e)
	case "scale":
		return o.benchScale(cmd, e)
	}
	todo, ok := bench.Lookup(name)
	if !ok && name != "lifecycle" {
		return usageError("unknown scenario %q; choose one of: %s, all; or, not part of all, failover, lifecycle, scale", name, strings.Join(bench.Names(), ", "))
	}
	if o.scale <= 0 {
		return usageError("--scale must be positive, got %v", o.scale)
	}
	if o.rounds <= 0 {
		return usageError("--rounds must be positive, got %d", o.rounds)
	}
	if o.runs <= 0 {
		return usageError("--runs must be positive, got %d", o.runs)
	}
	backend, err := benchBackend(o.store)
	if err != nil {
		return err
	}
	if name == "lifecycle" {
		if o.store != "bolt" {
			return usageError("lifecycle runs on --store bolt: it measures the store's file")
		}
		r, err := bench.RunLifecycle(cmd.Context(), bench.Options{Scale: o.scale, Rounds: o.rounds, Dir: o.dir, Backend: backend}, bench.Lifecycle{Archive: o.archive, SVG: o.svg})
		if err != nil {
			return fmt.Errorf("bench lifecycle: %w", err)
		}
		if e.json {
			return writeJSON(e.stdout, r)
		}
		return r.WriteText(e.stdout)
	}
	if err := o.etcd.check(cmd.Flags(), o.store); err != nil {
		return err
	}
	if o.store == "etcd" {
		if todo, err = etcdScenarios(name, todo); err != nil {
			return err
		}
		b, err := openBenchEtcd(cmd.Context(), &o.etcd, o.dir, e.stderr)
		if err != nil {
			return err
		}
		defer b.close()
		backend = b.backend(cmd.Context())
	}
	opts := bench.Options{Scale: o.scale, Rounds: o.rounds, Dir: o.dir, Backend: backend, Runs: o.runs, Traces: o.traces, WatchServer: o.benchServe}
	if o.rein != "" || slices.ContainsFunc(todo, func(s bench.Scenario) bool { return s.Name == "recovery" }) {
		// recovery starts rein too; without one to give it builds one.
		if opts.Rein, err = o.reinBinary(); err != nil && o.rein != "" {
			return err
		}
	}
	for _, s := range todo {
		r, err := s.Run(cmd.Context(), opts)
		if err != nil {
			return fmt.Errorf("bench %s: %w", s.Name, err)
		}
		if e.json {
			if err := writeJSON(e.stdout, r); err != nil {
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
	if r.Scenario == "cache-cost" {
		printCacheCost(w, r)
		return
	}
	verdict := "met"
	if !r.Met {
		verdict = "MISSED"
	}
	fmt.Fprintf(w, "%-6s %.0f %s, baseline %.0f, ratio %.2f (target ≥ %.2f, %s); %d events, %d runs, %.2fs; rounds %s vs %s%s\n",
		r.Scenario, r.Figure, r.Unit, r.Baseline, r.Ratio, r.Target, verdict, r.Events, r.Runs, r.Seconds,
		rates(r.Figures), rates(r.Baselines), benchDetail(r))
}

// benchDetail is what a scenario's line adds to the rates: for watch, the
// other targets; for replay, what each side spends per event; for steps, the
// CPU and the bytes each side spends.
func benchDetail(r bench.Result) string {
	x := r.Extra
	switch r.Scenario {
	case "steps", "steps-runs":
		s := fmt.Sprintf("; CPU per step %.0f µs vs %.0f µs; written per step %s vs %s",
			x["cpu_us_per_step"], x["baseline_cpu_us_per_step"], kib(x["bytes_written_per_step"]), kib(x["baseline_bytes_written_per_step"]))
		if v, ok := x["baseline_bytes_written_per_commit"]; ok {
			s += fmt.Sprintf(", per commit %s vs %s", kib(x["bytes_written_per_commit"]), kib(v))
		} else {
			s += fmt.Sprintf(", per commit %s (%.2f commits a step)", kib(x["bytes_written_per_commit"]), x["commits_per_step"])
		}
		if v, ok := x["events_baseline"]; ok {
			s += fmt.Sprintf("; the baseline puts the same bytes as the store (events, snapshot, blobs); the events alone: baseline %.0f, ratio %.2f",
				v, x["events_ratio"])
		}
		if n, ok := x["spans"]; ok {
			s += fmt.Sprintf("; traced: %.0f spans built", n)
		}
		return s
	case "steps-stream":
		return fmt.Sprintf("; streaming %.0f chunks of %.0f bytes a step against none, one watcher each (it took %.0f pieces of output, %.0f bytes); CPU per step %.0f µs vs %.0f µs (ratio %.2f); written per step %s vs %s, %.2f vs %.2f commits a step; median of the rounds' ratios %.2f",
			x["chunks_per_step"], x["chunk_bytes"], x["outputs"], x["output_bytes"], x["cpu_us_per_step"], x["baseline_cpu_us_per_step"], x["cpu_ratio"],
			kib(x["bytes_written_per_step"]), kib(x["baseline_bytes_written_per_step"]), x["commits_per_step"], x["baseline_commits_per_step"], x["ratio_median"])
	case "delegate":
		return fmt.Sprintf("; overhead per delegation of %.0f children: fan-out (delegate reply → last child's first model call) p50 %.2f ms, max %.2f ms; fan-in (last child's end → parent's next model call) p50 %.2f ms, max %.2f ms",
			x["children_per_tree"], x["fanout_ms_p50"], x["fanout_ms_max"], x["fanin_ms_p50"], x["fanin_ms_max"])
	case "recovery":
		return fmt.Sprintf("; serving in %.2fs (target ≤ 2s; an empty store: %.3fs), every running run resumed in %.2fs, peak RSS %.0f MiB (target ≤ 256 MiB): the process's own (anonymous) %.0f MiB, peak %.0f MiB (target ≤ %.0f MiB), and %.0f MiB of the store's file pages mapped (page cache)",
			x["serving_seconds"], x["baseline_serving_seconds"], x["all_resumed_seconds"], x["rss_peak_mib"],
			x["rss_anon_mib"], x["rss_anon_peak_mib"], x["rss_anon_target_mib"], x["rss_file_mib"])
	case "replay":
		return fmt.Sprintf("; per event: read %.0f ns + replay %.0f ns, against read %.0f ns + fold %.0f ns (without the reading, ratio %.3f)",
			x["load_ns_per_event"], x["replay_ns_per_event"], x["baseline_load_ns_per_event"], x["fold_ns_per_event"], x["in_memory_ratio"])
	case "reads":
		return fmt.Sprintf("; %.0f pages/s read; with %.0f runs appending (%.0f commits/s): ListRuns p50 %.2f ms, p99 %.2f ms; a watcher's catch-up read p50 %.2f ms, p99 %.2f ms",
			x["pages_per_s"], float64(64), x["latency_commits_per_s"], x["list_ms_p50"], x["list_ms_p99"], x["watch_read_ms_p50"], x["watch_read_ms_p99"])
	case "watch":
		rss := "unmeasured"
		if v := x["rss_idle_mib"]; v > 0 {
			rss = fmt.Sprintf("%.0f MiB", v)
		}
		return fmt.Sprintf("; %.0f streams, p99 %.1f ms vs %.1f ms at %.0f deliveries/s (ratio %.2f, target ≤ %.0f), p50 %.2f ms vs %.2f ms; %.0f gaps, %.0f duplicates; idle server %s (target ≤ %.0f MiB)",
			x["streams"], x["p99_ms"], x["baseline_p99_ms"], x["paced_offered_deliveries_per_s"], x["p99_ratio"], x["p99_ratio_target"],
			x["p50_ms"], x["baseline_p50_ms"], x["gaps"], x["duplicates"], rss, x["rss_target_mib"])
	}
	return ""
}

// kib is a byte count in KiB, or "unknown" for a negative one.
func kib(b float64) string {
	if b < 0 {
		return "unknown"
	}
	return fmt.Sprintf("%.1f KiB", b/1024)
}

func rates(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf("%.0f", x)
	}
	return "[" + strings.Join(s, " ") + "]"
}

// printCacheCost writes the cache-cost scenario's result: a line a run
// (tokens billed of each kind and USD, caching on and off), then the sums.
func printCacheCost(w io.Writer, r bench.Result) {
	x := r.Extra
	fmt.Fprintf(w, "%-28s %-4s %9s %11s %10s %7s %9s\n", "cache-cost", "", "input", "cache write", "cache read", "output", "USD")
	for _, run := range bench.CacheCostRuns() {
		for _, side := range []string{"on", "off"} {
			k := run + "/" + side + "/"
			fmt.Fprintf(w, "%-28s %-4s %9.0f %11.0f %10.0f %7.0f %9.4f\n", run, side, x[k+"input"], x[k+"cache_write"], x[k+"cache_read"], x[k+"output"], x[k+"usd"])
		}
		fmt.Fprintf(w, "%-28s ratio %.2f\n", run, x[run+"/on/usd"]/x[run+"/off/usd"])
	}
	verdict := "met"
	if !r.Met {
		verdict = "MISSED"
	}
	fmt.Fprintf(w, "cache-cost: $%.4f with caching, $%.4f without, ratio %.2f (target ≤ %.2f, %s)\n", r.Figure, r.Baseline, r.Ratio, r.Target, verdict)
}
