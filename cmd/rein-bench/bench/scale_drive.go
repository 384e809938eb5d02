package bench

// The scale scenario's clients: the runs they start on the replicas and
// how they follow them.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// pausedContract is a run that pauses at once for a person: its model's
// first action is a write, which waits for approval (24 hours, the
// default proposal TTL: past the measurement).
func pausedContract(i int) *reinv1.TaskContract {
	args, _ := structpb.NewStruct(map[string]any{"record": fmt.Sprintf("R-%d", i), "status": "closed"})
	return &reinv1.TaskContract{
		Goal:     "Close a record.",
		Tools:    []*reinv1.ToolGrant{{Name: "records.update", Tier: reinv1.ToolTier_TOOL_TIER_WRITE}},
		Approval: &reinv1.ApprovalPolicy{ProposalTtl: durationpb.New(24 * time.Hour)},
		Model: &reinv1.ModelSpec{Provider: "script", Name: "bench", Script: []*reinv1.ScriptedReply{
			scaleReply(&reinv1.Decision{Action: &reinv1.Decision_ToolCall{ToolCall: &reinv1.ToolCall{Tool: "records.update", CallId: "w1", Arguments: args}}}),
			scaleReply(&reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: "closed"}}}),
		}},
	}
}

// workloadContract is a workload run: scaleStepsPerRun-1 reads of a fixture
// tool, then a final answer.
func workloadContract(i int) *reinv1.TaskContract {
	var script []*reinv1.ScriptedReply
	for k := range scaleStepsPerRun - 1 {
		args, _ := structpb.NewStruct(map[string]any{"record": fmt.Sprintf("R-%d-%d", i, k)})
		script = append(script, scaleReply(&reinv1.Decision{Action: &reinv1.Decision_ToolCall{ToolCall: &reinv1.ToolCall{
			Tool: "records.get", CallId: fmt.Sprintf("c%d", k+1), Arguments: args}}}))
	}
	script = append(script, scaleReply(&reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: "read"}}}))
	return &reinv1.TaskContract{
		Goal:  "Read some records.",
		Tools: []*reinv1.ToolGrant{{Name: "records.get", Tier: reinv1.ToolTier_TOOL_TIER_READ}},
		Model: &reinv1.ModelSpec{Provider: "script", Name: "bench", Script: script},
	}
}

func scaleReply(d *reinv1.Decision) *reinv1.ScriptedReply {
	return &reinv1.ScriptedReply{Reply: &reinv1.ScriptedReply_Decision{Decision: d}, Usage: &reinv1.Usage{InputTokens: 100, OutputTokens: 10}}
}

// seedPaused starts runs paused runs on the workers, round-robin,
// scaleClients at a time, and waits until each needs approval; it returns
// each run's ID by the worker it was started on.
func (g *replicaGroup) seedPaused(ctx context.Context, workers []int, runs int) (map[int][]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	var mu sync.Mutex
	ids := map[int][]string{}
	err := g.each(ctx, runs, scaleClients, func(ctx context.Context, i int) error {
		w := workers[i%len(workers)]
		c := g.runs[w]
		resp, err := c.StartRun(ctx, &reinv1.StartRunRequest{RequestId: fmt.Sprintf("paused-%d", i), Contract: pausedContract(i)})
		if err != nil {
			return g.replicaErr(w, fmt.Errorf("start paused run %d: %w", i, err))
		}
		id := resp.GetRun().GetRunId()
		status, err := watchUntil(ctx, c, id, reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL)
		if err != nil {
			return g.replicaErr(w, fmt.Errorf("watch paused run %s: %w", id, err))
		}
		if status != reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL {
			return g.replicaErr(w, fmt.Errorf("run %s, to pause for approval, ended %v", id, status))
		}
		mu.Lock()
		ids[w] = append(ids[w], id)
		mu.Unlock()
		return nil
	})
	return ids, err
}

// stillPaused checks that every seeded run still needs approval.
func (g *replicaGroup) stillPaused(ctx context.Context, workers []int, ids map[int][]string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for _, w := range workers {
		for _, id := range ids[w] {
			got, err := g.runs[w].GetRun(ctx, &reinv1.GetRunRequest{RunId: id})
			if err != nil {
				return g.replicaErr(w, fmt.Errorf("get paused run %s: %w", id, err))
			}
			if s := got.GetRun().GetStatus(); s != reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL {
				return fmt.Errorf("run %s, paused for approval, is %v after the measurement", id, s)
			}
		}
	}
	return nil
}

// workload runs runs workload runs (request IDs tag-0, tag-1, …) on the
// workers, round-robin,
// scaleClients for each worker at a time: each client starts a run, follows it with
// WatchRun on the replica it started it on until the stream ends, and
// checks that it completed.
func (g *replicaGroup) workload(ctx context.Context, workers []int, runs int, tag string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	return g.each(ctx, runs, scaleClients*len(workers), func(ctx context.Context, i int) error {
		w := workers[i%len(workers)]
		c := g.runs[w]
		resp, err := c.StartRun(ctx, &reinv1.StartRunRequest{RequestId: fmt.Sprintf("%s-%d", tag, i), Contract: workloadContract(i)})
		if err != nil {
			return g.replicaErr(w, fmt.Errorf("start run %d: %w", i, err))
		}
		id := resp.GetRun().GetRunId()
		status, err := watchUntil(ctx, c, id, reinv1.RunStatus_RUN_STATUS_UNSPECIFIED)
		if err != nil {
			return g.replicaErr(w, fmt.Errorf("watch run %s: %w", id, err))
		}
		if status != reinv1.RunStatus_RUN_STATUS_COMPLETED {
			return g.replicaErr(w, fmt.Errorf("run %s ended %v, want completed", id, status))
		}
		return nil
	})
}

// each calls fn for 0..n-1, clients at a time, and returns the first
// error (the others stop at their next call).
func (g *replicaGroup) each(ctx context.Context, n, clients int, fn func(ctx context.Context, i int) error) error {
	return inParallel(ctx, n, clients, fn)
}

// inParallel calls fn for 0..n-1, workers at a time, and returns the
// first error (the others stop at their next call), or ctx's.
func inParallel(ctx context.Context, n, workers int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int, n)
	for i := range n {
		next <- i
	}
	close(next)
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for range workers {
		wg.Go(func() {
			for i := range next {
				if ctx.Err() != nil {
					return
				}
				if err := fn(ctx, i); err != nil {
					once.Do(func() { first = err })
					cancel()
					return
				}
			}
		})
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

// watchUntil follows a run with WatchRun until its status becomes want,
// or, with want unspecified, until the stream ends (the run is terminal);
// it returns the last status the run's events set. A run is watched for
// at most a minute.
func watchUntil(ctx context.Context, c reinv1.RunServiceClient, runID string, want reinv1.RunStatus) (reinv1.RunStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	stream, err := c.WatchRun(ctx, &reinv1.WatchRunRequest{RunId: runID})
	if err != nil {
		return 0, err
	}
	status := reinv1.RunStatus_RUN_STATUS_RUNNING
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return status, nil
		}
		if err != nil {
			return status, err
		}
		if sc := resp.GetEvent().GetStatusChanged(); sc != nil {
			status = sc.GetTo()
			if status == want {
				return status, nil
			}
		}
	}
}

// replicaErr is err on replica i, with its stderr's tail, and whether it
// has exited.
func (g *replicaGroup) replicaErr(i int, err error) error {
	rep := g.reps[i]
	state := "running"
	select {
	case <-rep.exited:
		state = "exited"
	default:
	}
	return fmt.Errorf("replica %s (%s): %w; its stderr ends:\n%s", rep.name, state, err, rep.log())
}
