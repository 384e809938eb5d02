package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/engine"
	"github.com/reinhq/rein/internal/export"
	"github.com/reinhq/rein/internal/replay"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/tools"
)

// Sizes of the replay scenario at scale 1.
const (
	replayRuns  = 1000
	replaySteps = 100
)

// Replay measures test replay against reconstruction, over the same
// directory of replayRuns recorded runs of replaySteps read steps each
// (written first, untimed, as export files by the engine on a store of the
// backend, without fsync). Both sides do per file what the CLI does:
//
//   - figure (`rein replay DIR`): read the file (export.Read: checksum,
//     decode, and the fold it validates the log with), then replay.Run: the
//     recorded replies and results fed through the harness's step code on a
//     synchronous engine, every event folded into an in-memory log and
//     compared with the recorded one; every run must match;
//   - baseline (reconstruction, `rein inspect FILE`, docs/design.md §8): read the
//     file the same way, then the fold alone (runstate.ApplyAll) over its
//     events.
//
// The rate is recorded events per second. Extra breaks the best round of
// each side down in nanoseconds per event: reading (load_ns_per_event,
// baseline_load_ns_per_event), replay.Run (replay_ns_per_event) and the fold
// (fold_ns_per_event); in_memory_ratio is the ratio without the reading,
// fold over replay.Run.
func Replay(ctx context.Context, o Options) (Result, error) {
	r := Result{Scenario: "replay", Unit: "events/s", Target: 0.5, Extra: map[string]float64{}}
	be, err := o.backend(r.Scenario)
	if err != nil {
		return r, err
	}
	runs := o.scaled(replayRuns, 2)
	steps := o.scaled(replaySteps, 2)
	r.Runs = runs
	dir, err := tempDir(o, "replay")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)

	t0 := time.Now()
	if r.Events, err = recordReplayRuns(ctx, be, dir, runs, steps); err != nil {
		return r, err
	}
	r.Extra["build_seconds"] = time.Since(t0).Seconds()

	// Each side is the reading of every file, then its own work on the
	// events read; the two parts are timed apart for the breakdown.
	var fig, base replayRound
	figure := func(int) (measure, error) {
		round, err := replayFiles(dir, replayWork(ctx))
		if err == nil && (fig.events == 0 || round.total() < fig.total()) {
			fig = round
		}
		return round.measure(), err
	}
	baseline := func(int) (measure, error) {
		round, err := replayFiles(dir, foldWork)
		if err == nil && (base.events == 0 || round.total() < base.total()) {
			base = round
		}
		return round.measure(), err
	}
	if err := alternate(ctx, &r, o.rounds(), figure, baseline); err != nil {
		return r, err
	}
	r.Extra["load_ns_per_event"] = fig.perEvent(fig.load)
	r.Extra["replay_ns_per_event"] = fig.perEvent(fig.work)
	r.Extra["baseline_load_ns_per_event"] = base.perEvent(base.load)
	r.Extra["fold_ns_per_event"] = base.perEvent(base.work)
	if fig.work > 0 {
		r.Extra["in_memory_ratio"] = base.work.Seconds() / fig.work.Seconds()
	}
	return r, nil
}

// replayWork is the figure's work on one recording: replay.Run, which
// must match.
func replayWork(ctx context.Context) func([]*reinv1.Event) error {
	return func(evs []*reinv1.Event) error {
		res, err := replay.Run(ctx, evs, replay.Options{})
		if err != nil {
			return err
		}
		if res.Divergence != nil {
			return fmt.Errorf("replay of run %s diverged: %v", res.RunID, res.Divergence)
		}
		return nil
	}
}

// foldWork is the baseline's work on one recording: the fold alone.
func foldWork(evs []*reinv1.Event) error {
	_, err := runstate.ApplyAll(runstate.State{}, evs)
	return err
}

// replayRound is one timed pass over the directory: how long reading the
// files took, and how long the work on their events.
type replayRound struct {
	events     int
	load, work time.Duration
}

func (x replayRound) total() time.Duration { return x.load + x.work }

func (x replayRound) measure() measure {
	return measure{units: float64(x.events), elapsed: x.total()}
}

func (x replayRound) perEvent(d time.Duration) float64 {
	if x.events == 0 {
		return 0
	}
	return float64(d.Nanoseconds()) / float64(x.events)
}

// replayFiles reads each export file in dir, in name order, and calls work
// on its events.
func replayFiles(dir string, work func([]*reinv1.Event) error) (replayRound, error) {
	var round replayRound
	start := time.Now()
	files, err := filepath.Glob(filepath.Join(dir, "*.rein"))
	if err != nil {
		return round, err
	}
	for _, f := range files {
		x, err := readExport(f)
		if err != nil {
			return round, err
		}
		read := time.Now()
		round.load += read.Sub(start)
		if err := work(x.GetEvents()); err != nil {
			return round, fmt.Errorf("%s: %w", f, err)
		}
		start = time.Now()
		round.work += start.Sub(read)
		round.events += len(x.GetEvents())
	}
	return round, nil
}

func readExport(path string) (*reinv1.RunExport, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return export.Read(f, path)
}

// recordReplayRuns runs n scripted runs of steps reads each through the
// engine on a store of the backend (in dir, without fsync: the recording is
// not timed) and writes each log as an export file. It returns how many
// events the files hold.
func recordReplayRuns(ctx context.Context, be Backend, dir string, n, steps int) (int, error) {
	fixtures := tools.NewFixtures(map[string][]tools.FixtureResult{"lookup": {{Output: structpb.NewStringValue("a row of the table, about fifty bytes of output text")}}})
	script := make([]*reinv1.ScriptedReply, 0, steps+1)
	for i := 0; i < steps; i++ {
		args, _ := structpb.NewStruct(map[string]any{"row": float64(i)})
		script = append(script, &reinv1.ScriptedReply{Reply: &reinv1.ScriptedReply_Decision{Decision: &reinv1.Decision{
			Action: &reinv1.Decision_ToolCall{ToolCall: &reinv1.ToolCall{Tool: "lookup", CallId: fmt.Sprintf("c%d", i), Arguments: args}}}},
			Usage: &reinv1.Usage{InputTokens: 100, OutputTokens: 10}})
	}
	script = append(script, &reinv1.ScriptedReply{Reply: &reinv1.ScriptedReply_Decision{Decision: &reinv1.Decision{
		Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: "done"}}}}})
	contract := &reinv1.TaskContract{
		Goal:   "read every row",
		Tools:  []*reinv1.ToolGrant{{Name: "lookup", Tier: reinv1.ToolTier_TOOL_TIER_READ}},
		Budget: &reinv1.Budget{MaxSteps: uint32(steps + 1)},
		Model:  &reinv1.ModelSpec{Provider: "script", Script: script},
	}
	db := filepath.Join(dir, "recording.db")
	defer os.Remove(db)
	st, err := be.Open(db, true)
	if err != nil {
		return 0, err
	}
	defer st.Close()
	e := engine.New(engine.Config{Store: st, Tools: fixtures, Workers: 2})
	defer e.Close()
	events := 0
	for i := 0; i < n; i++ {
		run, _, err := e.Start(ctx, engine.StartRequest{RequestID: fmt.Sprintf("r%d", i), Contract: contract, Principal: "bench", Tenant: "bench"})
		if err != nil {
			return 0, err
		}
		if err := e.Wait(ctx, run.RunID); err != nil {
			return 0, err
		}
		evs, err := st.Events(ctx, run.RunID, 0, 4*steps+16)
		if err != nil {
			return 0, err
		}
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("run-%05d.rein", i)))
		if err != nil {
			return 0, err
		}
		x, err := export.New(ctx, run.RunID, evs, st)
		if err == nil {
			x.ExportedBy = "rein-bench replay"
			err = export.Write(f, x)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return 0, err
		}
		events += len(evs)
	}
	return events, nil
}
