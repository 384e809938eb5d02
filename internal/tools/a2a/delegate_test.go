package a2a_test

// Tests of delegation: a parent run that calls the remote's refund skill and
// follows its task, within its budget and across a crash of the parent.

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/model"
)

// test to approve the remote's write (approved), follows the remote task
// with remote.task, and answers with what it returned.
type delegator struct {
	waiting  chan string // the remote task ID, once it waits for input
	approved chan struct{}
	mu       sync.Mutex
	seen     []string // the observations, in order
}

var taskIDPattern = regexp.MustCompile(`"task_id":\s*"([^"]+)"`)

func (d *delegator) Next(ctx context.Context, req *model.Request) (*model.Reply, error) {
	var last *model.Observation
	for _, turn := range req.Transcript {
		if turn.Observation != nil && strings.HasPrefix(turn.Observation.Source, "tool:") {
			last = turn.Observation
		}
	}
	call := func(id, tool string, args map[string]any) (*model.Reply, error) {
		s, err := structpb.NewStruct(args)
		if err != nil {
			return nil, err
		}
		return &model.Reply{Decision: &reinv1.Decision{Action: &reinv1.Decision_ToolCall{ToolCall: &reinv1.ToolCall{CallId: id, Tool: tool, Arguments: s}}},
			Usage: &reinv1.Usage{InputTokens: 10, OutputTokens: 10}}, nil
	}
	if last == nil {
		return call("c1", "remote.refund", map[string]any{"invoice_id": "INV-42"})
	}
	d.mu.Lock()
	d.seen = append(d.seen, last.Text)
	d.mu.Unlock()
	if last.Source == "tool:remote.refund" && strings.Contains(last.Text, "input-required") {
		m := taskIDPattern.FindStringSubmatch(last.Text)
		if m == nil {
			return nil, errors.New("no task_id in " + last.Text)
		}
		d.waiting <- m[1]
		select {
		case <-d.approved:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return call("c2", "remote.task", map[string]any{"task_id": m[1]})
	}
	return &model.Reply{Decision: &reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: last.Text}}},
		Usage: &reinv1.Usage{InputTokens: 10, OutputTokens: 10}}, nil
}

const delegateContract = `{
  "goal": "Have the billing agent refund the duplicate charge on INV-42.",
  "tools": [{"name": "remote.refund", "tier": "TOOL_TIER_READ"}, {"name": "remote.task", "tier": "TOOL_TIER_READ"}],
  "budget": {"max_steps": 6, "max_tokens": 20000, "max_tool_calls": %d, "timeout": "600s"},
  "model": {"provider": "script"}
}`

func withCalls(n string) string { return strings.Replace(delegateContract, "%d", n, 1) }

// approveOnce approves the pending write of the remote run as the
// remote's approver.
func approveOnce(t *testing.T, ctx context.Context, r *remote, runID string) {
	t.Helper()
	got, err := r.runs.GetRun(as(ctx, "starter"), &reinv1.GetRunRequest{RunId: runID})
	if err != nil {
		t.Fatal(err)
	}
	p := got.GetRun().GetPending().GetProposal()
	if p == nil {
		t.Fatalf("remote run %s is %v with no proposal pending", runID, got.GetRun().GetStatus())
	}
	if _, err := r.runs.DecideApproval(as(ctx, "starter"), &reinv1.DecideApprovalRequest{RunId: runID, ProposalId: p.GetProposalId(),
		ProposalHash: p.GetHash(), Verdict: reinv1.ApprovalVerdict_APPROVAL_VERDICT_APPROVE}); err != nil {
		t.Fatal(err)
	}
}

// TestDelegateAcrossTwoReins: a run on the parent calls the remote's
// refund skill; the remote's write waits for its approver, who approves
// it once; the parent follows the remote task to its result and
// completes, the remote task's ID in its tool results.
func TestDelegateAcrossTwoReins(t *testing.T) {
	ctx := deadline(t)
	r := startRemote(t)
	c := open(t, ctx, r, "starter-token")
	d := &delegator{waiting: make(chan string, 1), approved: make(chan struct{})}
	p := openParent(t, filepath.Join(t.TempDir(), "parent.db"), c, func(*reinv1.ModelSpec) (model.Model, error) { return d, nil })
	runID := p.start(t, ctx, contract(t, withCalls("4")))
	var remoteID string
	select {
	case remoteID = <-d.waiting:
	case <-ctx.Done():
		t.Fatal("the remote task never waited for approval")
	}
	approveOnce(t, ctx, r, remoteID)
	close(d.approved)
	run := p.await(t, ctx, runID)
	if run.GetStatus() != reinv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Fatalf("parent run is %v (%s), want completed", run.GetStatus(), run.GetLastError())
	}
	text := run.GetResult().GetText()
	for _, want := range []string{`"completed"`, remoteID, "Refunded the duplicate charge"} {
		if !strings.Contains(text, want) {
			t.Errorf("the parent's answer (the remote task's result) lacks %s: %s", want, text)
		}
	}
	if strings.Contains(text, "starter-token") {
		t.Error("the token is in a tool result")
	}
	runs := r.remoteRuns(t, ctx)
	if len(runs) != 1 || runs[0].GetStatus() != reinv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Fatalf("the remote holds %d runs (%v), want one completed", len(runs), runs)
	}
}

// TestDelegateBudgetHolds: with one tool call in its budget, the parent
// calls the remote once, then is refused the next step before its model
// is called, so no follow-up is made:
// the parent's budget, not the remote's, bounds the delegation.
func TestDelegateBudgetHolds(t *testing.T) {
	ctx := deadline(t)
	r := startRemote(t)
	c := open(t, ctx, r, "starter-token")
	d := &delegator{waiting: make(chan string, 1), approved: make(chan struct{})}
	close(d.approved)
	p := openParent(t, filepath.Join(t.TempDir(), "parent.db"), c, func(*reinv1.ModelSpec) (model.Model, error) { return d, nil })
	runID := p.start(t, ctx, contract(t, withCalls("1")))
	run := p.await(t, ctx, runID)
	if run.GetStatus() != reinv1.RunStatus_RUN_STATUS_BUDGET_EXHAUSTED {
		t.Fatalf("parent run is %v, want budget_exhausted", run.GetStatus())
	}
	d.mu.Lock()
	seen := len(d.seen)
	d.mu.Unlock()
	if seen != 0 {
		// The budget is checked before the model is called again: the
		// model never sees the first result, and makes no second call.
		t.Errorf("the parent's model was called after its one tool call (it saw %d results)", seen)
	}
	runs := r.remoteRuns(t, ctx)
	if len(runs) != 1 || runs[0].GetStatus() != reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL {
		t.Fatalf("the remote holds %v, want one run waiting for approval, never approved", runs)
	}
}

// TestDelegateCrashResubscribes: the parent node is cut while the remote
// task works; a new node on the parent's store runs the call again, which
// finds the remote task the first call started (ListTasks by its context)
// and follows it: the remote face is sent the message once, holds one
// run, and the parent completes with its result.
func TestDelegateCrashResubscribes(t *testing.T) {
	r := delegateAcrossCrash(t, false)
	if n := r.calls.count("SendMessage"); n != 1 {
		t.Errorf("the remote face was sent %d messages, want 1: the call after the crash sent its message again instead of resubscribing", n)
	}
}

// TestDelegateCrashUnlistedSendsAgain is its failure twin: against an
// agent that does not list tasks the call after the crash sends its
// message again (two reach the face), which rein's face turns into the
// one run the first started.
func TestDelegateCrashUnlistedSendsAgain(t *testing.T) {
	r := delegateAcrossCrash(t, true)
	if n := r.calls.count("SendMessage"); n != 2 {
		t.Errorf("the remote face was sent %d messages, want 2: without ListTasks the call sends again", n)
	}
}

// delegateAcrossCrash runs a parent whose call of remote.gated is cut by
// a crash while the remote task works, runs it again on a new node over
// the parent's store, and checks that the parent completes and the remote
// holds one completed run. The new node's call must follow the remote
// task (SubscribeToTask) before the task can end. It returns the remote.
func delegateAcrossCrash(t *testing.T, noList bool) *remote {
	t.Helper()
	ctx := deadline(t)
	r := startRemote(t)
	r.calls.noList = noList
	c := open(t, ctx, r, "starter-token")
	db := filepath.Join(t.TempDir(), "parent.db")
	gated := contract(t, `{
  "goal": "Have the remote agent wait on its gate.",
  "tools": [{"name": "remote.gated", "tier": "TOOL_TIER_READ"}],
  "budget": {"max_steps": 4, "max_tokens": 20000, "timeout": "600s"},
  "model": {"provider": "script", "script": [
    {"decision": {"tool_call": {"tool": "remote.gated", "arguments": {}, "call_id": "d1"}}},
    {"decision": {"final_answer": {"text": "delegated"}}}]}
}`)
	first := openParent(t, db, c, nil)
	runID := first.start(t, ctx, gated)
	select {
	case <-r.gate.entered:
	case <-ctx.Done():
		t.Fatal("the remote task never started")
	}
	// The crash: the parent's store as it stands now, its call requested
	// and in flight, is what the next node opens; the first node is cut.
	crashed := crashCopy(t, filepath.Dir(db))
	first.close()
	subscribed := r.calls.count("SubscribeToTask")

	// The gate opens once the new node's call follows the remote task, so
	// that it finds the task working.
	second := openParent(t, filepath.Join(crashed, filepath.Base(db)), c, nil)
	r.calls.await(t, ctx, "SubscribeToTask", subscribed)
	close(r.gate.open)
	run := second.await(t, ctx, runID)
	if run.GetStatus() != reinv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Fatalf("parent run is %v (%s), want completed", run.GetStatus(), run.GetLastError())
	}
	runs := r.remoteRuns(t, ctx)
	if len(runs) != 1 {
		t.Fatalf("the remote holds %d runs, want 1: the message started a second", len(runs))
	}
	if runs[0].GetStatus() != reinv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Errorf("the remote run is %v, want completed", runs[0].GetStatus())
	}
	if len(r.gate.entered) != 0 {
		t.Error("the remote's gate was entered twice")
	}
	return r
}

// crashCopy copies the files of dir, a stopped process's store as it
// was at that instant, into a new directory, and returns it. The parent
// writes nothing while its call is in flight.
func crashCopy(t *testing.T, dir string) string {
	t.Helper()
	to := t.TempDir()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return to
}

// TestOpenFailures are the failure twins of Open: a remote that refuses
// the token, and one that is down.
