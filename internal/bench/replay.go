package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/export"
	"github.com/reinhq/rein/internal/harness"
	"github.com/reinhq/rein/internal/replay"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store/mem"
	"github.com/reinhq/rein/internal/tools"
)

// Sizes of the replay scenario at scale 1.
const (
	replayRuns  = 1000
	replaySteps = 100
)

// Replay measures test replay: a directory of replayRuns recorded runs of
// replaySteps read steps each (written first, untimed, as export files by
// the engine on an in-memory store) is read and replayed through the
// harness with replay.Run, every run checked to match. The baseline is the
// fold alone (runstate.ApplyAll) over the same events, already in memory.
func Replay(ctx context.Context, o Options) (Result, error) {
	r := Result{Scenario: "replay", Unit: "events/s", Target: 0.5, Extra: map[string]float64{}}
	runs := o.scaled(replayRuns, 2)
	steps := o.scaled(replaySteps, 2)
	r.Runs = runs
	dir, err := tempDir(o, "replay")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)

	t0 := time.Now()
	logs, err := recordReplayRuns(ctx, dir, runs, steps)
	if err != nil {
		return r, err
	}
	r.Extra["build_seconds"] = time.Since(t0).Seconds()
	for _, l := range logs {
		r.Events += len(l)
	}

	figure := func(int) (measure, error) {
		start := time.Now()
		files, err := filepath.Glob(filepath.Join(dir, "*.rein"))
		if err != nil {
			return measure{}, err
		}
		n := 0
		for _, f := range files {
			x, err := readExport(f)
			if err != nil {
				return measure{}, err
			}
			res, err := replay.Run(ctx, x.GetEvents(), replay.Options{})
			if err != nil {
				return measure{}, err
			}
			if res.Divergence != nil {
				return measure{}, fmt.Errorf("replay of %s diverged: %v", f, res.Divergence)
			}
			n += res.Events
		}
		return measure{units: float64(n), elapsed: time.Since(start)}, nil
	}
	baseline := func(int) (measure, error) {
		start := time.Now()
		n := 0
		for _, evs := range logs {
			if _, err := runstate.ApplyAll(runstate.State{}, evs); err != nil {
				return measure{}, err
			}
			n += len(evs)
		}
		return measure{units: float64(n), elapsed: time.Since(start)}, nil
	}
	if err := alternate(ctx, &r, o.rounds(), figure, baseline); err != nil {
		return r, err
	}
	return r, nil
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
// engine on an in-memory store and writes each log as an export file.
func recordReplayRuns(ctx context.Context, dir string, n, steps int) ([][]*reinv1.Event, error) {
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
	st := mem.New()
	defer st.Close()
	e := harness.New(harness.Config{Store: st, Tools: fixtures, Workers: 2})
	defer e.Close()
	var logs [][]*reinv1.Event
	for i := 0; i < n; i++ {
		run, _, err := e.Start(ctx, harness.StartRequest{RequestID: fmt.Sprintf("r%d", i), Contract: contract, Principal: "bench", Tenant: "bench"})
		if err != nil {
			return nil, err
		}
		if err := e.Wait(ctx, run.RunID); err != nil {
			return nil, err
		}
		evs, err := st.Events(ctx, run.RunID, 0, 4*steps+16)
		if err != nil {
			return nil, err
		}
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("run-%05d.rein", i)))
		if err != nil {
			return nil, err
		}
		err = export.Write(f, &reinv1.RunExport{FormatVersion: 1, RunId: run.RunID, Events: evs, ExportedBy: "rein bench replay"})
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, err
		}
		logs = append(logs, evs)
	}
	return logs, nil
}
