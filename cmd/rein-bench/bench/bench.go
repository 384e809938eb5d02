// Package bench measures rein against the disk it runs on. Each scenario
// times a figure through rein's own code (the store, the engine, the fold)
// and a baseline that does the same storage work without rein's logic: the
// storage backend's raw ceiling (a Backend's Ceiling, such as straight bbolt
// Updates in a fresh file of the same layout), or for watch plain gRPC
// streaming. The ratio figure/baseline says how much of the disk's (or
// decoder's) speed rein keeps; a scenario's target is the ratio it must
// reach.
//
// The bench names no storage engine: the caller gives it one (Options'
// Backend), so every scenario runs the same way against any backend.
//
// Every scenario works in a temporary directory it removes. Rounds alternate
// figure and baseline, and the best of each is kept, to reduce noise from
// other load on the machine. Nothing here runs before a scenario is asked
// for: no package-level state is built at start.
//
// The package lies under cmd/rein-bench, above the server it drives, so
// that nothing under internal/ imports the server (tests/layering checks
// it) and the product binary holds no benchmark (scripts/test.sh checks
// that).
package bench

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Result is one scenario's measurement. Fields are added, never renamed.
type Result struct {
	Scenario string `json:"scenario"`
	// Figure is the best rate measured through rein, in Unit.
	Figure float64 `json:"figure"`
	Unit   string  `json:"unit"`
	// Baseline is the best rate of the same work done without rein: the
	// backend's ceiling (or, for watch, plain gRPC).
	Baseline float64 `json:"baseline"`
	// Ratio is Figure / Baseline.
	Ratio  float64 `json:"ratio"`
	Target float64 `json:"target"`
	// Met is Ratio >= Target.
	Met bool `json:"met"`
	// Events is how many events one timed round handles; Runs how many runs.
	Events int `json:"events"`
	Runs   int `json:"runs"`
	// Seconds is the duration of the best figure round; BaselineSeconds of
	// the best baseline round.
	Seconds         float64 `json:"seconds"`
	BaselineSeconds float64 `json:"baseline_seconds"`
	// Rounds is how many times each side ran; Figures and Baselines are
	// every round's rate, in order (their spread is the noise).
	Rounds    int       `json:"rounds"`
	Figures   []float64 `json:"figures"`
	Baselines []float64 `json:"baselines"`
	// Ratios is each round's figure/baseline: the two sides of a round ran
	// back to back, so under changing load these vary less than the rates.
	Ratios []float64 `json:"ratios"`
	// Extra holds scenario-specific context, such as commits per round or
	// bytes per event.
	Extra map[string]float64 `json:"extra,omitempty"`
}

// Options size a bench run.
type Options struct {
	// Scale multiplies each scenario's size (events, steps); 0 means 1, the
	// full size. Tests use a small scale.
	Scale float64
	// Rounds is how many times the figure and the baseline each run,
	// alternating; 0 means 3.
	Rounds int
	// Dir is where temporary files go; "" means os.TempDir().
	Dir string
	// Backend is the storage engine the scenarios run on; required.
	Backend Backend
	// Runs is how many concurrent runs the steps-runs scenario drives; 0
	// means stepsRunsDefault.
	Runs int
	// Traces builds the steps scenarios' spans as rein serve --otel does
	// (telemetry.Tracer on the engine's publish hook), exported to an
	// exporter that drops them, to measure what tracing costs a step.
	Traces bool
	// WatchServer, when set, returns the command of a rein server for the
	// watch scenario's memory measurement: it must serve the store at db on
	// a free loopback port, without a rate limit and without tokens, and
	// log its address on stderr as `rein serve` does (msg="rein serving"
	// addr=HOST:PORT). rein-bench sets it to the rein binary's `serve`. Nil
	// skips the measurement; then rss_idle_mib is -1 and the scenario's
	// targets are not met.
	WatchServer func(db string) (*exec.Cmd, error)
	// Rein is the rein binary the recovery scenario starts; "" builds one
	// from the module (it needs the go tool and the module's source).
	Rein string
}

func (o Options) scale() float64 {
	if o.Scale <= 0 {
		return 1
	}
	return o.Scale
}

func (o Options) rounds() int {
	if o.Rounds <= 0 {
		return 3
	}
	return o.Rounds
}

// scaled is n × scale, at least min.
func (o Options) scaled(n, min int) int {
	v := int(math.Round(float64(n) * o.scale()))
	if v < min {
		return min
	}
	return v
}

// Scenario is one named benchmark.
type Scenario struct {
	Name string
	// Group, when set, is the name that also runs this scenario: asking
	// for steps runs steps and steps-runs.
	Group string
	// What it measures, in a line.
	Doc string
	Run func(ctx context.Context, o Options) (Result, error)
}

// Scenarios are the benchmarks, in the order "all" runs them. The table is
// built when asked for, not at the program's start.
func Scenarios() []Scenario {
	return []Scenario{
		{Name: "append", Doc: "64 concurrent runs appending 3-event steps of ~300-byte events, durable, through the store", Run: Append},
		{Name: "steps", Doc: "one run of 5,000 scripted tool-call steps through the engine, durable", Run: Steps},
		{Name: "steps-runs", Group: "steps", Doc: "16 concurrent runs (--runs) of 500 scripted tool-call steps each, every run reading files of its own, through the engine, durable", Run: StepsRuns},
		{Name: "steps-stream", Group: "steps", Doc: "steps' one run of 5,000 steps, watched through the server's hub, with every model reply streamed in 8 chunks of 36 bytes to a watcher of its output, against the same without streaming", Run: StepsStream},
		{Name: "webhooks", Doc: "steps-runs' 16 runs with 3 webhook subscriptions on every event, delivered as the runs go to a local receiver, against the same runs with none: the step rate kept", Run: Webhooks},
		{Name: "fold", Doc: "rebuild a 1,000,000-event run from the store: scan, decode, fold", Run: Fold},
		{Name: "replay", Doc: "read and replay a directory of 1,000 recorded runs of 100 steps through the harness, against reading and folding them", Run: Replay},
		{Name: "reads", Doc: "16 runs appending while 16 readers page through 10,000 runs (List, 100 a page), against the appends alone: commits a second kept; and, with 64 runs appending, ListRuns and a watcher's catch-up read, p50 and p99", Run: Reads},
		{Name: "watch", Doc: "1,000 WatchRun streams over loopback TCP following 64 runs that append, against plain gRPC streaming", Run: Watch},
		{Name: "delegate", Doc: "200 delegations, one after the other, of a scripted parent to 2 children, durable, against the same model calls in as many runs without a tree; the fan-out and fan-in overhead", Run: Delegate},
		{Name: "admission", Doc: "2,000 one-step runs queued under --max-running 64 and started as slots free, against the same runs started without a limit; and the time from a slot freeing to the next queued run's start", Run: Admission},
		{Name: "mcp", Doc: "get_run through the MCP face (/mcp, the Go SDK's client, 8 sessions) against GetRun through Connect on the same rein serve: calls per server CPU-second", Run: MCP},
		{Name: "cache-cost", Doc: "the refund and invoice examples and a 30-step task through the engine against stand-in Anthropic and OpenAI APIs that cache, with prompt caching on and off: tokens billed and USD (in rein's repository: it reads examples/)", Run: CacheCost},
		{Name: "recovery", Doc: "start rein serve on a store of 10,000 runs (1,000 running, ~1,000,000 events): time to serving, to every running run resumed, and RSS", Run: Recovery},
	}
}

// Names are the scenario names, in order.
func Names() []string {
	var names []string
	for _, s := range Scenarios() {
		names = append(names, s.Name)
	}
	return names
}

// Lookup returns the scenarios name selects: the one called name and those
// of its group; "all" is every scenario. It reports false for none.
func Lookup(name string) ([]Scenario, bool) {
	all := Scenarios()
	if name == "all" {
		return all, true
	}
	var out []Scenario
	for _, s := range all {
		if s.Name == name || s.Group == name {
			out = append(out, s)
		}
	}
	return out, len(out) > 0
}

// measure is one timed side of a round: the count of units done and the time
// taken.
type measure struct {
	units   float64
	elapsed time.Duration
}

func (m measure) rate() float64 {
	if m.elapsed <= 0 {
		return 0
	}
	return m.units / m.elapsed.Seconds()
}

// alternate runs figure and baseline rounds times each, alternating, and
// fills r's rates with the best of each.
func alternate(ctx context.Context, r *Result, rounds int, figure, baseline func(round int) (measure, error)) error {
	return alternateOrder(ctx, r, rounds, false, figure, baseline)
}

// alternateOrder is alternate; with swap, every other round (the second,
// the fourth…) runs the baseline first, so that neither side always runs
// right after the other.
func alternateOrder(ctx context.Context, r *Result, rounds int, swap bool, figure, baseline func(round int) (measure, error)) error {
	var bestF, bestB measure
	for i := 0; i < rounds; i++ {
		var f, b measure
		runF := func() error {
			if err := ctx.Err(); err != nil {
				return err
			}
			var err error
			if f, err = figure(i); err != nil {
				return fmt.Errorf("%s: figure, round %d: %w", r.Scenario, i+1, err)
			}
			return nil
		}
		runB := func() error {
			if err := ctx.Err(); err != nil {
				return err
			}
			var err error
			if b, err = baseline(i); err != nil {
				return fmt.Errorf("%s: baseline, round %d: %w", r.Scenario, i+1, err)
			}
			return nil
		}
		first, second := runF, runB
		if swap && i%2 == 1 {
			first, second = runB, runF
		}
		if err := first(); err != nil {
			return err
		}
		if err := second(); err != nil {
			return err
		}
		r.Figures = append(r.Figures, f.rate())
		r.Baselines = append(r.Baselines, b.rate())
		if b.rate() > 0 {
			r.Ratios = append(r.Ratios, f.rate()/b.rate())
		}
		if f.rate() > bestF.rate() {
			bestF = f
		}
		if b.rate() > bestB.rate() {
			bestB = b
		}
	}
	r.Rounds = rounds
	r.Figure, r.Seconds = bestF.rate(), bestF.elapsed.Seconds()
	r.Baseline, r.BaselineSeconds = bestB.rate(), bestB.elapsed.Seconds()
	if r.Baseline > 0 {
		r.Ratio = r.Figure / r.Baseline
	}
	r.Met = r.Ratio >= r.Target
	return nil
}

// tempDir makes a directory for one scenario's files; the caller removes it.
func tempDir(o Options, name string) (string, error) {
	dir, err := os.MkdirTemp(o.Dir, "rein-bench-"+name+"-*")
	if err != nil {
		return "", fmt.Errorf("bench %s: make a temporary directory: %w", name, err)
	}
	return dir, nil
}

// writtenBytes is how many bytes this process has written so far (Linux's
// /proc/self/io wchar), and whether it could tell. The bench uses it to
// report bytes written per commit, which shows write amplification.
func writtenBytes() (int64, bool) {
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "wchar:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// writeMeter measures the bytes written from startWrites to bytes.
type writeMeter struct {
	start int64
	ok    bool
}

func startWrites() writeMeter {
	n, ok := writtenBytes()
	return writeMeter{start: n, ok: ok}
}

// bytes is how many bytes were written since start, or -1 when unknown.
func (m writeMeter) bytes() float64 {
	end, ok := writtenBytes()
	if !m.ok || !ok {
		return -1
	}
	return float64(end - m.start)
}

// perCommit divides written bytes by commits, keeping -1 for unknown.
func perCommit(bytes, commits float64) float64 {
	if bytes < 0 || commits <= 0 {
		return -1
	}
	return bytes / commits
}

// cpuTime is the CPU time (user and system) this process used so far, from
// getrusage (microseconds), or 0 when it cannot tell.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// bestOf keeps the best (largest) value seen under key in extra.
func bestOf(extra map[string]float64, key string, v float64) {
	if old, ok := extra[key]; !ok || v > old {
		extra[key] = v
	}
}

// minOf is the smallest of vs, or 0 for none.
func minOf(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	return slices.Min(vs)
}

// meanOf is the mean of vs, or 0 for none.
func meanOf(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	sum := 0.0
	for _, v := range vs {
		sum += v
	}
	return sum / float64(len(vs))
}
