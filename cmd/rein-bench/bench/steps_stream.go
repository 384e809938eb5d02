package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/engine"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/taskcontract"
	"github.com/reinhq/rein/internal/tools"
	"github.com/reinhq/rein/server"
)

// The steps-stream scenario's streaming side: each model reply is
// streamed as stepsStreamChunks pieces of text of stepsStreamChunkBytes
// bytes each, with no delay between them. The chunks are in the script,
// which is in the contract: at 5,000 steps, 8 chunks of 36 bytes make a
// contract of 1.9 MB, within taskcontract.MaxBytes (2 MiB), where 40
// bytes would not.
const (
	stepsStreamChunks     = 8
	stepsStreamChunkBytes = 36
	// stepsStreamTarget is the ratio of steps/s streaming to not that
	// steps-stream must reach: streaming costs at most 10%.
	stepsStreamTarget = 0.9
)

// StepsStream measures what streaming a model call's text costs a step.
// Both sides run the steps scenario's workload (one run, a zero-latency
// scripted model asking for a fixture read stepsToolCalls times, then
// answering, each step durable) through an engine whose publish hook is a
// server.Hub, as the server's is, with one watcher of the run following
// it as WatchRun does (tail, store reads when behind) until its last
// event. Every scripted reply has stepsStreamChunks chunks of
// stepsStreamChunkBytes bytes (no delay), on both sides: the script is in
// the contract, which run_started stores, so both store the same bytes.
// The figure streams: the engine's Output is the hub, so the model writes
// each reply's chunks to it, and the watcher follows the run's model
// output too (SubscribeOutput, a piece at most every 100 ms as the server
// sends it). The baseline does not: without an Output the scripted model
// does not stream (its chunks are not written anywhere), and the watcher
// follows the events only. Rounds alternate the sides, the baseline first
// in every other round. Both sides are timed from Start to the watcher's
// last event.
//
// Extra reports, for each side, the process's CPU time per step, the
// commits and bytes written per step (streaming writes nothing durable per
// chunk, so these should match), the chunks the hub was given per step,
// and the model output the watcher took.
func StepsStream(ctx context.Context, o Options) (Result, error) {
	r := Result{Scenario: "steps-stream", Unit: "steps/s", Target: stepsStreamTarget, Runs: 1, Extra: map[string]float64{}}
	be, err := o.backend(r.Scenario)
	if err != nil {
		return r, err
	}
	calls := o.scaled(stepsToolCalls, 1)
	contract := streamingContract(stepsContract(calls, 0))
	if n := proto.Size(contract); n > taskcontract.MaxBytes {
		return r, fmt.Errorf("bench %s: %d steps of %d chunks make a contract of %d bytes, over the %d rein accepts: use a smaller --scale",
			r.Scenario, calls+1, stepsStreamChunks, n, taskcontract.MaxBytes)
	}
	fixtures := tools.NewFixtures(map[string][]tools.FixtureResult{
		"read_file": {{Output: structpb.NewStringValue(fixtureText())}},
	})
	dir, err := tempDir(o, r.Scenario)
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)

	var steps float64
	var fig, base []streamRound
	side := func(name string, c *reinv1.TaskContract, stream bool, rounds *[]streamRound) func(int) (measure, error) {
		return func(round int) (measure, error) {
			path := filepath.Join(dir, fmt.Sprintf("%s-%d.db", name, round))
			defer os.Remove(path)
			sr, err := stepsStreamRound(ctx, be, path, c, fixtures, stream)
			if err != nil {
				return sr.m, err
			}
			steps = sr.m.units
			r.Events = sr.events
			*rounds = append(*rounds, sr)
			return sr.m, nil
		}
	}
	if err := alternateOrder(ctx, &r, o.rounds(), true,
		side("stream", contract, true, &fig), side("plain", contract, false, &base)); err != nil {
		return r, err
	}
	x := r.Extra
	x["steps"] = steps
	x["ratio_median"] = medianOf(r.Ratios)
	x["chunks_per_reply"] = stepsStreamChunks
	x["chunk_bytes"] = stepsStreamChunkBytes
	x["contract_bytes"] = float64(proto.Size(contract))
	each := func(rounds []streamRound, f func(streamRound) float64) []float64 {
		out := make([]float64, len(rounds))
		for i, sr := range rounds {
			out[i] = f(sr)
		}
		return out
	}
	for prefix, rounds := range map[string][]streamRound{"": fig, "baseline_": base} {
		cpu := each(rounds, func(sr streamRound) float64 { return sr.cpu.Seconds() * 1e6 / sr.m.units })
		x[prefix+"cpu_us_per_step"] = meanOf(cpu)
		x[prefix+"cpu_us_per_step_min"] = minOf(cpu)
		x[prefix+"commits_per_step"] = meanOf(each(rounds, func(sr streamRound) float64 { return sr.commits / sr.m.units }))
		x[prefix+"bytes_written_per_step"] = meanOf(each(rounds, func(sr streamRound) float64 { return perCommit(sr.written, sr.m.units) }))
		x[prefix+"chunks_per_step"] = meanOf(each(rounds, func(sr streamRound) float64 { return float64(sr.chunks) / sr.m.units }))
		x[prefix+"watched_events"] = meanOf(each(rounds, func(sr streamRound) float64 { return float64(sr.watch.events) }))
		x[prefix+"watcher_store_reads"] = meanOf(each(rounds, func(sr streamRound) float64 { return float64(sr.watch.storeReads) }))
		x[prefix+"outputs"] = meanOf(each(rounds, func(sr streamRound) float64 { return float64(sr.watch.outputs) }))
		x[prefix+"output_bytes"] = meanOf(each(rounds, func(sr streamRound) float64 { return float64(sr.watch.outputBytes) }))
	}
	if b := x["baseline_cpu_us_per_step"]; b > 0 {
		x["cpu_ratio"] = x["cpu_us_per_step"] / b
	}
	return r, nil
}

// streamingContract is c with every scripted reply streamed as
// stepsStreamChunks chunks of stepsStreamChunkBytes bytes, no delay: text
// of its own for each reply, as a model writes.
func streamingContract(c *reinv1.TaskContract) *reinv1.TaskContract {
	out := proto.Clone(c).(*reinv1.TaskContract)
	for i, reply := range out.GetModel().GetScript() {
		reply.Chunks = streamChunks(i + 1)
	}
	return out
}

// streamChunks are the chunks of reply n of the streaming script.
func streamChunks(n int) []*reinv1.ScriptedChunk {
	const filler = "the model reads the file and thinks aloud about what it found there "
	chunks := make([]*reinv1.ScriptedChunk, stepsStreamChunks)
	for j := range chunks {
		text := fmt.Sprintf("[%d.%d] ", n, j+1)
		text += filler[:stepsStreamChunkBytes-len(text)]
		chunks[j] = &reinv1.ScriptedChunk{Text: text}
	}
	return chunks
}

// streamRound is what one round of a side of steps-stream found.
type streamRound struct {
	m      measure
	events int
	// commits, written (-1 when unknown) and cpu are the store's commits,
	// the bytes the process wrote and its CPU time over the timed part.
	commits float64
	written float64
	cpu     time.Duration
	// chunks is how many pieces of text the engine gave the hub.
	chunks int64
	watch  watched
}

// countedOutput is the hub as the engine's Output, counting the pieces
// of text it is given (an atomic add each), to show the run streamed.
type countedOutput struct {
	*server.Hub
	writes atomic.Int64
}

func (c *countedOutput) Write(runID, text string) {
	c.writes.Add(1)
	c.Hub.Write(runID, text)
}

// stepsStreamRound runs contract's run through an engine on a fresh store
// whose publish hook is a fresh hub's, with one watcher of the run; with
// stream the engine's Output is the hub and the watcher follows the model
// output too. It times Start to the watcher's last event and checks that
// the run completed.
func stepsStreamRound(ctx context.Context, be Backend, path string, contract *reinv1.TaskContract, fx tools.Executor, stream bool) (streamRound, error) {
	var out streamRound
	s, err := be.Open(path, false)
	if err != nil {
		return out, err
	}
	defer s.Close()
	hub := server.NewHub()
	cfg := engine.Config{Store: s, Tools: fx, Workers: 1,
		Published: func(st runstate.State, evs []*reinv1.Event) { hub.Published(st.RunID, evs) }}
	var output *countedOutput
	if stream {
		output = &countedOutput{Hub: hub}
		cfg.Output = output
	}
	e := engine.New(cfg)
	defer e.Close()

	w := startWrites()
	cpu0 := cpuTime()
	t0 := time.Now()
	st, _, err := e.Start(ctx, engine.StartRequest{RequestID: "bench-0", Contract: contract, Principal: "bench"})
	if err != nil {
		return out, err
	}
	runID := st.RunID
	// As WatchRun: subscribe, then read the store from the start.
	var sub *server.Subscription
	if stream {
		sub = hub.SubscribeOutput(runID)
	} else {
		sub = hub.Subscribe(runID)
	}
	defer sub.Close()
	wctx, cancel := context.WithCancel(ctx)
	type watchEnd struct {
		w   watched
		err error
	}
	done := make(chan watchEnd, 1)
	go func() {
		w, err := watchRun(wctx, s, sub)
		done <- watchEnd{w, err}
	}()
	var end watchEnd
	watching := true
	defer func() {
		// The watcher is done with the store before it closes.
		if cancel(); watching {
			<-done
		}
	}()
	if err := e.Wait(ctx, runID); err != nil {
		return out, err
	}
	select {
	case end = <-done:
	case <-time.After(30 * time.Second):
		cancel()
		end = <-done
		end.err = fmt.Errorf("the watcher did not see the run end in 30s after it did (at event %d): %w", end.w.cursor, end.err)
	}
	watching = false
	out.m.elapsed = time.Since(t0)
	out.cpu = cpuTime() - cpu0
	out.written = w.bytes()
	out.commits = float64(s.Commits())
	if end.err != nil {
		return out, end.err
	}
	out.watch = end.w
	if output != nil {
		out.chunks = output.writes.Load()
	}

	fin, err := s.Load(ctx, runID)
	if err != nil {
		return out, err
	}
	want := uint32(len(contract.GetModel().GetScript()))
	if fin.Status != reinv1.RunStatus_RUN_STATUS_COMPLETED || fin.Steps != want {
		return out, fmt.Errorf("run %s ended %s (%s, %s) after %d steps; expected completed after %d",
			runID, runstate.StatusName(fin.Status), fin.StatusReason, fin.LastError, fin.Steps, want)
	}
	if end.w.cursor != fin.Version {
		return out, fmt.Errorf("the watcher saw the run to event %d of %d", end.w.cursor, fin.Version)
	}
	out.m.units = float64(fin.Steps)
	out.events = int(fin.Version)
	return out, nil
}

// watched is what a watcher of steps-stream took.
type watched struct {
	// cursor is the last event it took; events how many it took, of which
	// storeReads reads from the store (the first, and when it fell behind
	// the hub's tail).
	cursor     uint64
	events     int
	storeReads int
	// outputs are the pieces of model output it took, outputBytes their
	// text.
	outputs, outputBytes int
}

// watchRun follows runID with the server's own WatchRun loop
// (server.FollowRun), up to the run's terminal event, with what it would
// send counted rather than sent.
func watchRun(ctx context.Context, s Store, sub *server.Subscription) (watched, error) {
	w := watched{storeReads: 1}
	var err error
	w.cursor, err = server.FollowRun(ctx, s, sub, 0, nil, func(r *reinv1.WatchRunResponse) error {
		if o := r.GetOutput(); o != nil {
			w.outputs++
			w.outputBytes += len(o.GetText())
		} else {
			w.events++
		}
		return nil
	}, func() { w.storeReads++ })
	return w, err
}

// medianOf is the median of vs, or 0 for none.
func medianOf(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(vs))
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}
