package crash_test

import (
	"context"
	"testing"
	"time"

	"github.com/reinhq/rein/client"
	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// slowReads is a run whose first model call takes long enough to be killed
// in, then reads a record and answers.
func slowReads() *reinv1.TaskContract {
	c := contract(0)
	c.Model.Script = []*reinv1.ScriptedReply{
		{Reply: c.Model.Script[0].Reply, Usage: c.Model.Script[0].Usage, DelayMs: 3000},
		{Reply: &reinv1.ScriptedReply_Decision{Decision: &reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: "done"}}}}},
	}
	return c
}

// TestSteerSIGKILL: a message recorded while a model call is out survives
// the server's SIGKILL. The restarted server sends the call again, marked
// resumed and without the message (never into a call in flight), and the
// call after it reads the message; the same request ID sent again after
// the restart records nothing. The log holds the message once.
func TestSteerSIGKILL(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	in := newInstance(t)
	srv := in.start(t)
	in.waitServing(t, srv)
	cl := in.dial(t, client.Backoff{})
	started, err := cl.Runs.StartRun(ctx, &reinv1.StartRunRequest{RequestId: "steer-kill", Contract: slowReads()})
	if err != nil {
		t.Fatalf("StartRun: %v", err)
	}
	runID := started.GetRun().GetRunId()
	// The call is out once model_requested is stored.
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !get(t, ctx, cl, runID).GetModelInFlight() {
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatal("the model call never went out")
		}
	}
	steer := &reinv1.SteerRunRequest{RunId: runID, Text: "use the EUR ledger", RequestId: "msg-1"}
	if got, err := cl.Runs.SteerRun(ctx, steer); err != nil || !got.GetCreated() {
		t.Fatalf("SteerRun: created %v, %v", got.GetCreated(), err)
	}
	srv.kill(t)
	srv = in.start(t)
	in.waitServing(t, srv)
	if got, err := cl.Runs.SteerRun(ctx, steer); err == nil && got.GetCreated() {
		t.Errorf("SteerRun again after the restart recorded the message twice")
	}
	waitStatus(t, ctx, cl, runID, reinv1.RunStatus_RUN_STATUS_COMPLETED)
	l, err := fetchLog(ctx, cl, runID)
	if err != nil {
		t.Fatal(err)
	}
	if gap := l.gapFree(); gap != "" {
		t.Fatal(gap)
	}
	if n := l.count("run_steered"); n != 1 {
		t.Errorf("%d run_steered, want 1:\n%s", n, l)
	}
	var requested []*reinv1.ModelRequested
	for _, ev := range l.find("model_requested") {
		requested = append(requested, ev.GetModelRequested())
	}
	if len(requested) < 3 || !requested[1].GetResumed() || requested[2].GetResumed() {
		t.Fatalf("model calls %v: want the first, sent again marked resumed, then the next", requested)
	}
	in.stop(t, srv)
	checkBolt(t, in.db)
}
