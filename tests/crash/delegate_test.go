package crash_test

import (
	"context"
	"testing"
	"time"

	"github.com/reinhq/rein/client"
	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/failpoint"
)

// delegating is a parent that delegates two reads of a record, then
// answers; each child reads once (a few milliseconds) and answers.
func delegating() *reinv1.TaskContract {
	reply := func(d *reinv1.Decision, delay uint32) *reinv1.ScriptedReply {
		return &reinv1.ScriptedReply{Reply: &reinv1.ScriptedReply_Decision{Decision: d}, Usage: &reinv1.Usage{InputTokens: 100, OutputTokens: 10}, DelayMs: delay}
	}
	final := func(text string) *reinv1.Decision {
		return &reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: text}}}
	}
	read := &reinv1.Decision{Action: &reinv1.Decision_ToolCall{ToolCall: &reinv1.ToolCall{Tool: readTool, CallId: "r1"}}}
	task := func(q string) *reinv1.DelegatedTask {
		return &reinv1.DelegatedTask{Question: q, Tools: []*reinv1.DelegatedTool{{Name: readTool}}}
	}
	delegate := &reinv1.Decision{Action: &reinv1.Decision_Delegate{Delegate: &reinv1.Delegate{Tasks: []*reinv1.DelegatedTask{task("read R-1"), task("read R-2")}}}}
	return &reinv1.TaskContract{
		Goal:  "Compare two records.",
		Tools: []*reinv1.ToolGrant{{Name: readTool, Description: "Read a record.", Tier: reinv1.ToolTier_TOOL_TIER_READ}},
		Model: &reinv1.ModelSpec{Provider: "script", Name: "crash", Script: []*reinv1.ScriptedReply{reply(delegate, 0), reply(final("compared"), 0)}},
		Delegation: &reinv1.DelegationPolicy{MaxChildren: 2, ChildModels: []*reinv1.ModelSpec{{Provider: "script", Name: "crash", Script: []*reinv1.ScriptedReply{
			reply(read, 30), reply(final("read it"), 30),
		}}}},
		Labels: map[string]string{"test": "crash"},
	}
}

// checkTree checks a delegation after its crash and restart: the parent
// completed with one report per child, and there are exactly two children,
// each completed, none started twice.
func checkTree(t *testing.T, ctx context.Context, cl *client.Client, runID string) {
	t.Helper()
	waitStatus(t, ctx, cl, runID, stCompleted)
	l, err := fetchLog(ctx, cl, runID)
	if err != nil {
		t.Fatal(err)
	}
	if msg := l.gapFree(); msg != "" {
		t.Fatalf("%s\n%v", msg, l)
	}
	if l.count("delegation_started") != 1 || l.count("delegation_returned") != 2 {
		t.Fatalf("parent log has %d delegation_started and %d delegation_returned, want 1 and 2:\n%v",
			l.count("delegation_started"), l.count("delegation_returned"), l)
	}
	kids, err := cl.Runs.ListRuns(ctx, &reinv1.ListRunsRequest{ParentRunId: runID})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(kids.GetRuns()); n != 2 {
		t.Fatalf("%d children, want 2 (no duplicate)", n)
	}
	for _, k := range kids.GetRuns() {
		if k.GetStatus() != stCompleted {
			t.Errorf("child %s is %s, want completed", k.GetRunId(), k.GetStatus())
		}
	}
}

// TestDelegationFailpoints crashes a delegation at each of its points
// (after delegation_started, after the first child's creation, before the
// reports are recorded), then restarts the server and checks the tree.
func TestDelegationFailpoints(t *testing.T) {
	for _, point := range []string{failpoint.DelegateAfterStart, failpoint.DelegateAfterChild, failpoint.DelegateBeforeReturn} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			in := newInstance(t)
			srv := in.start(t, "REIN_FAILPOINTS="+point)
			in.waitServing(t, srv)
			cl := in.dial(t, client.Backoff{})
			req := &reinv1.StartRunRequest{RequestId: "dfp-" + point, Contract: delegating()}
			_, _ = cl.Runs.StartRun(ctx, req) // the crash may come before the answer
			if code := srv.wait(t, 20*time.Second); code != failpoint.CrashCode {
				t.Fatalf("rein serve armed with %s exited %d, want %d", point, code, failpoint.CrashCode)
			}
			srv = in.start(t)
			in.waitServing(t, srv)
			// The same request ID finds the same run.
			started, err := cl.Runs.StartRun(ctx, req)
			if err != nil {
				t.Fatalf("StartRun again: %v", err)
			}
			checkTree(t, ctx, cl, started.GetRun().GetRunId())
			in.stop(t, srv)
			checkBolt(t, in.db)
		})
	}
}

// TestDelegationSIGKILL kills the server with SIGKILL while the children
// run, and checks the tree after a restart.
func TestDelegationSIGKILL(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	in := newInstance(t)
	srv := in.start(t)
	in.waitServing(t, srv)
	cl := in.dial(t, client.Backoff{})
	started, err := cl.Runs.StartRun(ctx, &reinv1.StartRunRequest{RequestId: "dkill", Contract: delegating()})
	if err != nil {
		t.Fatalf("StartRun: %v", err)
	}
	runID := started.GetRun().GetRunId()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		run := get(t, ctx, cl, runID)
		if len(run.GetDelegation().GetOpenChildren()) > 0 {
			break
		}
		if run.GetStatus() != stRunning {
			t.Fatalf("the parent is %s with no open children", run.GetStatus())
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatal("the parent never delegated")
		}
	}
	srv.kill(t)
	srv = in.start(t)
	in.waitServing(t, srv)
	checkTree(t, ctx, cl, runID)
	in.stop(t, srv)
	checkBolt(t, in.db)
}
