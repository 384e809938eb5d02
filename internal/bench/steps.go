package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	bbolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/harness"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/tools"
)

// stepsToolCalls is how many tool-call steps the steps scenario's run makes
// at scale 1; one more step gives the final answer.
const stepsToolCalls = 5000

// Steps measures the step loop end to end: one run through harness.Engine
// whose scripted model (no delay) asks for a fixture read tool
// stepsToolCalls times and then answers, each step durable in two commits.
// The figure counts model calls (steps) from Start until the run ends. The
// baseline writes the same events (read back from the figure's store) into
// one run's events bucket of a fresh bbolt file, grouped as the engine
// commits them: two fsync'd Updates per step.
func Steps(ctx context.Context, o Options) (Result, error) {
	r := Result{Scenario: "steps", Unit: "steps/s", Target: 0.8, Runs: 1, Extra: map[string]float64{}}
	calls := o.scaled(stepsToolCalls, 1)
	contract := stepsContract(calls)
	fixtures := tools.NewFixtures(map[string][]tools.FixtureResult{
		"read_file": {{Output: structpb.NewStringValue(fixtureText)}},
	})

	dir, err := tempDir(o, "steps")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)

	// encoded holds the figure's events, as stored, for the baseline.
	var encoded [][]byte
	var steps uint32
	var commits, figBytes, baseBytes []float64
	figure := func(round int) (measure, error) {
		path := filepath.Join(dir, fmt.Sprintf("figure-%d.db", round))
		defer os.Remove(path)
		fr, err := stepsFigure(ctx, path, contract, fixtures, encoded == nil)
		if err != nil {
			return fr.m, err
		}
		if encoded == nil {
			encoded = fr.encoded
		}
		steps = fr.st.Steps
		r.Events = int(fr.st.Version)
		commits = append(commits, fr.commits)
		figBytes = append(figBytes, fr.bytesPerCommit)
		return fr.m, nil
	}
	baseline := func(round int) (measure, error) {
		path := filepath.Join(dir, fmt.Sprintf("baseline-%d.db", round))
		defer os.Remove(path)
		w := startWrites()
		m, n, err := stepsBaseline(path, encoded, steps)
		baseBytes = append(baseBytes, perCommit(w.bytes(), float64(n)))
		return m, err
	}
	if err := alternate(ctx, &r, o.rounds(), figure, baseline); err != nil {
		return r, err
	}
	r.Extra["steps"] = float64(steps)
	r.Extra["events_per_second"] = r.Figure * float64(r.Events) / float64(steps)
	size := 0
	for _, e := range encoded[1:] {
		size += len(e)
	}
	r.Extra["event_bytes"] = float64(size) / float64(len(encoded)-1)
	r.Extra["contract_bytes"] = float64(proto.Size(contract))
	r.Extra["commits"] = meanOf(commits)
	r.Extra["bytes_written_per_commit"] = meanOf(figBytes)
	r.Extra["baseline_bytes_written_per_commit"] = meanOf(baseBytes)
	return r, nil
}

// fixtureText is what the read tool returns: a small source file.
var fixtureText = "package pkg\n\n// F does the thing the benchmark reads about.\nfunc F(x int) int {\n\treturn x * 2\n}\n" +
	strings.Repeat("// padding line of a small file\n", 4)

// stepsContract is a contract whose scripted model calls read_file calls
// times, then gives a final answer.
func stepsContract(calls int) *reinv1.TaskContract {
	script := make([]*reinv1.ScriptedReply, 0, calls+1)
	for i := 1; i <= calls; i++ {
		args := &structpb.Struct{Fields: map[string]*structpb.Value{
			"path": structpb.NewStringValue(fmt.Sprintf("src/pkg/file_%d.go", i)),
		}}
		script = append(script, &reinv1.ScriptedReply{
			Reply: &reinv1.ScriptedReply_Decision{Decision: &reinv1.Decision{Action: &reinv1.Decision_ToolCall{
				ToolCall: &reinv1.ToolCall{Tool: "read_file", Arguments: args, CallId: fmt.Sprintf("call_%d", i)},
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
		Goal:   "read the files the script names, then answer",
		Tools:  []*reinv1.ToolGrant{{Name: "read_file", Description: "read a file", Tier: reinv1.ToolTier_TOOL_TIER_READ}},
		Budget: &reinv1.Budget{MaxSteps: uint32(calls) + 2},
		Model:  &reinv1.ModelSpec{Provider: "script", Name: "bench", Script: script},
	}
}

// stepsFigure runs the contract through an engine on a fresh store, timing
// Start to the run's end. It returns the run's final state, and with collect
// its events as stored; it counts the commits and the bytes written.
func stepsFigure(ctx context.Context, path string, c *reinv1.TaskContract, fx tools.Executor, collect bool) (stepsRound, error) {
	var out stepsRound
	s, before, err := openCounted(path)
	if err != nil {
		return out, err
	}
	closed := false
	defer func() {
		if !closed {
			s.Close()
		}
	}()
	e := harness.New(harness.Config{Store: s, Tools: fx, Workers: 1})
	defer e.Close()

	w := startWrites()
	t0 := time.Now()
	st, _, err := e.Start(ctx, harness.StartRequest{RequestID: "bench", Contract: c, Principal: "bench"})
	if err != nil {
		return out, err
	}
	if err := e.Wait(ctx, st.RunID); err != nil {
		return out, err
	}
	out.m.elapsed = time.Since(t0)
	written := w.bytes()

	if st, err = s.Load(ctx, st.RunID); err != nil {
		return out, err
	}
	want := uint32(len(c.GetModel().GetScript()))
	if st.Status != reinv1.RunStatus_RUN_STATUS_COMPLETED || st.Steps != want {
		return out, fmt.Errorf("the run ended %s (%s, %s) after %d steps; expected completed after %d",
			runstate.StatusName(st.Status), st.StatusReason, st.LastError, st.Steps, want)
	}
	out.st, out.m.units = st, float64(st.Steps)
	if collect {
		for after := uint64(0); after < st.Version; {
			evs, err := s.Events(ctx, st.RunID, after, 4096)
			if err != nil {
				return out, err
			}
			if len(evs) == 0 {
				return out, fmt.Errorf("run %s: no events after %d of %d", st.RunID, after, st.Version)
			}
			for _, ev := range evs {
				b, err := proto.Marshal(ev)
				if err != nil {
					return out, err
				}
				out.encoded = append(out.encoded, b)
			}
			after = evs[len(evs)-1].GetSequence()
		}
	}
	e.Close()
	closed = true
	if err := s.Close(); err != nil {
		return out, err
	}
	after, err := txID(path)
	if err != nil {
		return out, err
	}
	out.commits = float64(after - before)
	out.bytesPerCommit = perCommit(written, out.commits)
	return out, nil
}

// stepsRound is what one figure round of the steps scenario found.
type stepsRound struct {
	m              measure
	st             runstate.State
	encoded        [][]byte
	commits        float64
	bytesPerCommit float64
}

// stepsBaseline writes encoded (a run's events, from sequence 1) into a
// fresh bbolt file as the engine commits them: run_started alone, the first
// model_requested alone, then two events per Update (a step's
// model_returned+tool_requested, then its tool_returned with the next
// model_requested). It reports steps per second.
func stepsBaseline(path string, encoded [][]byte, steps uint32) (measure, int, error) {
	if len(encoded) < 2 {
		return measure{}, 0, fmt.Errorf("no events to write")
	}
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		return measure{}, 0, err
	}
	defer db.Close()
	const runID = "run_bench_steps"
	if err := db.Update(func(tx *bbolt.Tx) error {
		_, err := rawEvents(tx, runID, true)
		return err
	}); err != nil {
		return measure{}, 0, err
	}
	put := func(lo, hi int) error {
		return db.Update(func(tx *bbolt.Tx) error {
			b, err := rawEvents(tx, runID, false)
			if err != nil {
				return err
			}
			b.FillPercent = fillPercent
			for i := lo; i < hi; i++ {
				if err := b.Put(seqKey(uint64(i+1)), encoded[i]); err != nil {
					return err
				}
			}
			return nil
		})
	}
	commits := 0
	t0 := time.Now()
	if err := put(0, 1); err != nil {
		return measure{}, 0, err
	}
	for lo := 1; lo < len(encoded); {
		hi := lo + 2
		if lo == 1 {
			hi = 2
		}
		hi = min(hi, len(encoded))
		if err := put(lo, hi); err != nil {
			return measure{}, 0, err
		}
		commits++
		lo = hi
	}
	return measure{units: float64(steps), elapsed: time.Since(t0)}, commits + 1, nil
}
