package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/engine"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/telemetry"
	"github.com/reinhq/rein/internal/tools"
)

// stepsToolCalls is how many tool-call steps the steps scenario's run makes
// at scale 1; one more step gives the final answer.
const stepsToolCalls = 5000

// Sizes of the steps-runs scenario at scale 1: stepsRunsDefault runs (unless
// Options.Runs says otherwise) of stepsRunsToolCalls tool-call steps each.
const (
	stepsRunsDefault   = 16
	stepsRunsToolCalls = 500
)

// Steps measures the step loop end to end: one run through engine.Engine
// whose scripted model (no delay) asks for a fixture read tool
// stepsToolCalls times and then answers, each step durable in two commits.
// The figure counts model calls (steps) from Start until the run ends. The
// baseline writes the same events (read back from the figure's store) raw
// into one run's log of a fresh store of the backend's ceiling, grouped as
// the engine commits them: two durable commits per step.
//
// Extra reports, for each side, the process's CPU time per step (user and
// system, from getrusage: the engine, the store and the disk's syscalls, as
// the server would spend them) and the bytes written per commit and per step
// (from /proc/self/io).
func Steps(ctx context.Context, o Options) (Result, error) {
	r := Result{Scenario: "steps", Unit: "steps/s", Target: o.target(0.8), Runs: 1, Extra: map[string]float64{}}
	return runSteps(ctx, o, r, 1, o.scaled(stepsToolCalls, 1))
}

// StepsRuns is Steps with Options.Runs (default stepsRunsDefault) runs at
// once, each making stepsRunsToolCalls tool-call steps, one after the other,
// through one engine (a worker per run). The baseline is the same events
// committed by as many writers, each run's as the engine groups them,
// through the backend's ceiling, whose concurrent commits share
// transactions as the store's group commit does.
func StepsRuns(ctx context.Context, o Options) (Result, error) {
	runs := o.Runs
	if runs <= 0 {
		runs = stepsRunsDefault
	}
	r := Result{Scenario: "steps-runs", Unit: "steps/s", Target: o.target(0.8), Runs: runs, Extra: map[string]float64{}}
	return runSteps(ctx, o, r, runs, o.scaled(stepsRunsToolCalls, 1))
}

func runSteps(ctx context.Context, o Options, r Result, runs, calls int) (Result, error) {
	be, err := o.ceiling(r.Scenario)
	if err != nil {
		return r, err
	}
	contracts := stepsContracts(calls, runs)
	fixtures := tools.NewFixtures(map[string][]tools.FixtureResult{
		"read_file": {{Output: structpb.NewStringValue(fixtureText())}},
	})

	dir, err := tempDir(o, r.Scenario)
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)

	var published func(runstate.State, []*reinv1.Event)
	var spans discardSpans
	if o.Traces {
		spans.n = new(atomic.Int64)
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(spans))
		defer func() {
			if tp.ForceFlush(context.WithoutCancel(ctx)) == nil && r.Extra != nil {
				r.Extra["spans"] = float64(spans.n.Load())
			}
			_ = tp.Shutdown(context.WithoutCancel(ctx))
		}()
		published = telemetry.NewTracer(tp).Observe
	}
	// encoded holds the figure's events, as stored, for the baseline:
	// encoded[i] is run i's. On a StateCeiling the baseline commits the
	// same bytes as the figure's store, state[i] run i's commits, and the
	// events alone are timed after it (eventsRates).
	var encoded [][][]byte
	sc, sameBytes := be.Ceiling.(StateCeiling)
	var state [][]stateCommit
	var eventsRates []float64
	var steps float64
	var commits, figBytes, figStepBytes, baseBytes, baseStepBytes, figCPU, baseCPU []float64
	figure := func(round int) (measure, error) {
		path := filepath.Join(dir, fmt.Sprintf("figure-%d.db", round))
		defer os.Remove(path)
		first := encoded == nil
		fr, err := stepsFigure(ctx, be, path, contracts, fixtures, first, first && sameBytes, published)
		if err != nil {
			return fr.m, err
		}
		if first {
			encoded = fr.encoded
			if sameBytes {
				if state, err = figureCommits(encoded, fr.appends); err != nil {
					return fr.m, err
				}
			}
		}
		steps = fr.m.units
		r.Events = fr.events
		commits = append(commits, fr.commits)
		figBytes = append(figBytes, perCommit(fr.written, fr.commits))
		figStepBytes = append(figStepBytes, perCommit(fr.written, steps))
		figCPU = append(figCPU, fr.cpu.Seconds()*1e6/steps)
		return fr.m, nil
	}
	baseline := func(round int) (measure, error) {
		path := filepath.Join(dir, fmt.Sprintf("baseline-%d.db", round))
		defer os.Remove(path)
		w := startWrites()
		cpu0 := cpuTime()
		var m measure
		var n int
		var err error
		if sameBytes {
			m, n, err = stateBaseline(sc, path, state, steps)
		} else {
			m, n, err = stepsBaseline(be.Ceiling, path, encoded, steps)
		}
		cpu := cpuTime() - cpu0
		written := w.bytes()
		if sameBytes && err == nil {
			// The events alone, outside the round's CPU and bytes.
			events := filepath.Join(dir, fmt.Sprintf("baseline-events-%d.db", round))
			defer os.Remove(events)
			var em measure
			if em, _, err = stepsBaseline(be.Ceiling, events, encoded, steps); err == nil {
				eventsRates = append(eventsRates, em.rate())
			}
		}
		if runs == 1 {
			baseBytes = append(baseBytes, perCommit(written, float64(n)))
		}
		baseStepBytes = append(baseStepBytes, perCommit(written, steps))
		baseCPU = append(baseCPU, cpu.Seconds()*1e6/steps)
		return m, err
	}
	if err := alternate(ctx, &r, o.rounds(), figure, baseline); err != nil {
		return r, err
	}
	x := r.Extra
	if sameBytes {
		// The ratio is against the same bytes; this is the one against
		// the events alone.
		best := slices.Max(eventsRates)
		x["events_baseline"] = best
		x["events_ratio"] = r.Figure / best
	}
	x["steps"] = steps
	x["steps_per_run"] = steps / float64(runs)
	x["events_per_second"] = r.Figure * float64(r.Events) / steps
	size, n := 0, 0
	for _, run := range encoded {
		for _, e := range run[1:] {
			size += len(e)
			n++
		}
	}
	x["event_bytes"] = float64(size) / float64(n)
	x["contract_bytes"] = float64(proto.Size(contracts[0]))
	x["commits"] = meanOf(commits)
	x["commits_per_step"] = meanOf(commits) / steps
	x["bytes_written_per_commit"] = meanOf(figBytes)
	x["bytes_written_per_step"] = meanOf(figStepBytes)
	x["baseline_bytes_written_per_step"] = meanOf(baseStepBytes)
	if runs == 1 {
		// The baseline's commits are its puts; grouped (runs > 1) they
		// are the ceiling's to count.
		x["baseline_bytes_written_per_commit"] = meanOf(baseBytes)
	}
	x["cpu_us_per_step"] = meanOf(figCPU)
	x["baseline_cpu_us_per_step"] = meanOf(baseCPU)
	x["cpu_us_per_step_min"] = minOf(figCPU)
	x["baseline_cpu_us_per_step_min"] = minOf(baseCPU)
	return r, nil
}

// fixtureText is what the read tool returns: a small source file.
func fixtureText() string {
	return "package pkg\n\n// F does the thing the benchmark reads about.\nfunc F(x int) int {\n\treturn x * 2\n}\n" +
		strings.Repeat("// padding line of a small file\n", 4)
}

// stepsContracts is a contract for each of runs runs, whose scripted model
// calls read_file calls times, then gives a final answer. Each run reads
// files of its own (the first run's are src/pkg/file_N.go, the next ones'
// src/runK/pkg/file_N.go, with call IDs of its own), as concurrent runs of
// real tasks do: no two runs' model input is the same, so none of it is
// stored once for every run by a store that keeps a blob once.
func stepsContracts(calls, runs int) []*reinv1.TaskContract {
	out := make([]*reinv1.TaskContract, runs)
	for k := range out {
		out[k] = stepsContract(calls, k)
	}
	return out
}

// stepsContract is run k's contract of stepsContracts.
func stepsContract(calls, k int) *reinv1.TaskContract {
	dir, id, goal := "src/pkg", "call", "read the files the script names, then answer"
	if k > 0 {
		dir, id, goal = fmt.Sprintf("src/run%d/pkg", k), fmt.Sprintf("run%d_call", k), fmt.Sprintf("%s (run %d)", goal, k)
	}
	script := make([]*reinv1.ScriptedReply, 0, calls+1)
	for i := 1; i <= calls; i++ {
		args := &structpb.Struct{Fields: map[string]*structpb.Value{
			"path": structpb.NewStringValue(fmt.Sprintf("%s/file_%d.go", dir, i)),
		}}
		script = append(script, &reinv1.ScriptedReply{
			Reply: &reinv1.ScriptedReply_Decision{Decision: &reinv1.Decision{Action: &reinv1.Decision_ToolCall{
				ToolCall: &reinv1.ToolCall{Tool: "read_file", Arguments: args, CallId: fmt.Sprintf("%s_%d", id, i)},
			}}},
			Usage: &reinv1.Usage{InputTokens: 100, OutputTokens: 20},
		})
	}
	script = append(script, &reinv1.ScriptedReply{
		Reply: &reinv1.ScriptedReply_Decision{Decision: &reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{
			FinalAnswer: &reinv1.FinalAnswer{Text: "done"},
		}}},
		Usage: &reinv1.Usage{InputTokens: 100, OutputTokens: 5},
	})
	return &reinv1.TaskContract{
		Goal:   goal,
		Tools:  []*reinv1.ToolGrant{{Name: "read_file", Description: "read a file", Tier: reinv1.ToolTier_TOOL_TIER_READ}},
		Budget: &reinv1.Budget{MaxSteps: uint32(calls) + 2},
		Model:  &reinv1.ModelSpec{Provider: "script", Name: "bench", Script: script},
	}
}

// stepsFigure runs a run of each of contracts at once through an engine on
// a fresh store, timing the first Start to the last run's end. With collect
// it returns each run's events as stored, and with record each run's
// appends as the engine made them; it counts the commits, the bytes written
// and the CPU time.
func stepsFigure(ctx context.Context, be Backend, path string, contracts []*reinv1.TaskContract, fx tools.Executor, collect, record bool,
	published func(runstate.State, []*reinv1.Event)) (stepsRound, error) {
	var out stepsRound
	runs := len(contracts)
	s, err := be.Open(path, false)
	if err != nil {
		return out, err
	}
	closed := false
	defer func() {
		if !closed {
			s.Close()
		}
	}()
	var engineStore store.Store = s
	var rec *appendRecorder
	if record {
		rec = recordAppends(s)
		engineStore = rec
	}
	e := engine.New(engine.Config{Store: engineStore, Tools: fx, Workers: runs, Published: published})
	defer e.Close()

	w := startWrites()
	cpu0 := cpuTime()
	t0 := time.Now()
	ids := make([]string, runs)
	for i := range ids {
		st, _, err := e.Start(ctx, engine.StartRequest{RequestID: fmt.Sprintf("bench-%d", i), Contract: contracts[i], Principal: "bench"})
		if err != nil {
			return out, err
		}
		ids[i] = st.RunID
	}
	for _, id := range ids {
		if err := e.Wait(ctx, id); err != nil {
			return out, err
		}
	}
	out.m.elapsed = time.Since(t0)
	out.cpu = cpuTime() - cpu0
	out.written = w.bytes()
	out.commits = float64(s.Commits())

	want := uint32(len(contracts[0].GetModel().GetScript()))
	for _, id := range ids {
		st, err := s.Load(ctx, id)
		if err != nil {
			return out, err
		}
		if st.Status != reinv1.RunStatus_RUN_STATUS_COMPLETED || st.Steps != want {
			return out, fmt.Errorf("run %s ended %s (%s, %s) after %d steps; expected completed after %d",
				id, runstate.StatusName(st.Status), st.StatusReason, st.LastError, st.Steps, want)
		}
		out.m.units += float64(st.Steps)
		out.events += int(st.Version)
		if collect {
			evs, err := storedEvents(ctx, s, id, st.Version)
			if err != nil {
				return out, err
			}
			out.encoded = append(out.encoded, evs)
		}
		if rec != nil {
			out.appends = append(out.appends, rec.appends[id])
		}
	}
	e.Close()
	closed = true
	return out, s.Close()
}

// storedEvents reads a run's events up to version from s, marshalled.
func storedEvents(ctx context.Context, s Store, runID string, version uint64) ([][]byte, error) {
	var out [][]byte
	for after := uint64(0); after < version; {
		evs, err := s.Events(ctx, runID, after, 4096)
		if err != nil {
			return nil, err
		}
		if len(evs) == 0 {
			return nil, fmt.Errorf("run %s: no events after %d of %d", runID, after, version)
		}
		for _, ev := range evs {
			b, err := proto.Marshal(ev)
			if err != nil {
				return nil, err
			}
			out = append(out, b)
		}
		after = evs[len(evs)-1].GetSequence()
	}
	return out, nil
}

// stepsRound is what one figure round of a steps scenario found.
type stepsRound struct {
	m       measure
	events  int
	encoded [][][]byte
	// appends are each run's appends, when they were recorded.
	appends [][]recordedAppend
	commits float64
	// written is the bytes written (-1 when unknown), cpu the process's
	// CPU time, over the timed part.
	written float64
	cpu     time.Duration
}

// stepsBaseline writes encoded (each run's events, from sequence 1) raw into
// a fresh store of the ceiling as the engine commits them, one writer per
// run: run_started alone, the first model_requested alone, then two events
// per commit (a step's model_returned+tool_requested, then its tool_returned
// with the next model_requested). It reports steps per second, and how many
// puts it made.
func stepsBaseline(c Ceiling, path string, encoded [][][]byte, steps float64) (measure, int, error) {
	if len(encoded) == 0 || len(encoded[0]) < 2 {
		return measure{}, 0, fmt.Errorf("no events to write")
	}
	put, closeLog, err := c.CreateLog(path, benchRunIDs(len(encoded)))
	if err != nil {
		return measure{}, 0, err
	}
	defer func() { _ = closeLog() }()
	// Each run's puts, made ready before the clock starts.
	type group struct {
		runs []int
		seqs []uint64
		data [][]byte
	}
	plans := make([][]group, len(encoded))
	puts := 0
	for run, evs := range encoded {
		for lo := 0; lo < len(evs); {
			hi := lo + 2
			if lo <= 1 {
				hi = lo + 1
			}
			hi = min(hi, len(evs))
			g := group{data: evs[lo:hi]}
			for i := lo; i < hi; i++ {
				g.runs = append(g.runs, run)
				g.seqs = append(g.seqs, uint64(i+1))
			}
			plans[run] = append(plans[run], g)
			puts++
			lo = hi
		}
	}
	elapsed, err := writeRuns(len(plans), func(run int) error {
		for _, g := range plans[run] {
			if err := put(g.runs, g.seqs, g.data); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return measure{}, 0, err
	}
	return measure{units: steps, elapsed: elapsed}, puts, nil
}

// benchRunIDs are the IDs of n runs in a baseline's log.
func benchRunIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("run_bench_steps_%04d", i)
	}
	return ids
}

// writeRuns calls write for each of runs runs at once, a goroutine each,
// and times them from the start to the last one's end; it returns the
// first error.
func writeRuns(runs int, write func(run int) error) (time.Duration, error) {
	errs := make(chan error, runs)
	var wg sync.WaitGroup
	t0 := time.Now()
	for run := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := write(run); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(t0)
	close(errs)
	return elapsed, <-errs
}

// discardSpans is a span exporter that drops what it is given: the steps
// scenarios' cost of tracing without a collector's.
// It counts them.
type discardSpans struct{ n *atomic.Int64 }

func (d discardSpans) ExportSpans(_ context.Context, s []sdktrace.ReadOnlySpan) error {
	d.n.Add(int64(len(s)))
	return nil
}
func (discardSpans) Shutdown(context.Context) error { return nil }
