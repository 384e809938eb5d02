package mcpface_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// elicitor answers every elicitation with action, and hands each request
// on to the test.
func elicitor(action string, seen chan<- *mcp.ElicitParams) func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	return func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		seen <- req.Params
		res := &mcp.ElicitResult{Action: action}
		if action == "decline" {
			res.Content = map[string]any{"reason": "not this one"}
		}
		return res, nil
	}
}

func receive(t *testing.T, seen <-chan *mcp.ElicitParams) *mcp.ElicitParams {
	t.Helper()
	select {
	case p := <-seen:
		return p
	case <-time.After(30 * time.Second):
		t.Fatal("no elicitation came")
		return nil
	}
}

func TestToolsOfEachPrincipal(t *testing.T) {
	f := startFace(t)
	for who, want := range map[string][]string{
		"starter":  {"answer", "approve", "cancel", "deny", "get_events", "get_run", "list_pending", "list_runs", "raise_budget", "revise", "start_refund", "steer"},
		"operator": {"answer", "cancel", "get_events", "get_run", "list_pending", "list_runs", "raise_budget", "start_refund", "steer"},
		"viewer":   {"get_events", "get_run", "list_pending", "list_runs"},
	} {
		cs := f.connect(t, who, nil)
		res, err := cs.ListTools(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, tool := range res.Tools {
			got = append(got, tool.Name)
			if tool.Annotations == nil {
				t.Errorf("%s has no annotations", tool.Name)
				continue
			}
			read := strings.HasPrefix(tool.Name, "get_") || strings.HasPrefix(tool.Name, "list_")
			if tool.Annotations.ReadOnlyHint != read {
				t.Errorf("%s: readOnlyHint %v", tool.Name, tool.Annotations.ReadOnlyHint)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s is offered %v, want %v", who, got, want)
		}
	}
}

// TestApproveByElicitation: a run started through MCP pauses for its
// write; the session that started it is asked, accepts, and the run
// completes with the write committed once.
func TestApproveByElicitation(t *testing.T) {
	f := startFace(t)
	seen := make(chan *mcp.ElicitParams, 4)
	cs := f.connect(t, "starter", elicitor("accept", seen))
	started := decodeStart(t, call(t, cs, "start_refund", map[string]any{"invoice_id": "INV-42"}))
	if started.Status != "RUN_STATUS_NEEDS_APPROVAL" || started.Pending.Proposal.Hash == "" {
		t.Fatalf("the start answered %+v", started)
	}
	p := receive(t, seen)
	for _, want := range []string{"refunds.create", started.Pending.Proposal.ProposalID, started.Pending.Proposal.Hash, "INV-42"} {
		if !strings.Contains(p.Message, want) {
			t.Errorf("the elicitation does not show %q:\n%s", want, p.Message)
		}
	}
	run := f.waitStatus(t, started.RunID, reinv1.RunStatus_RUN_STATUS_COMPLETED)
	if ops, commits := f.tools.total(); ops != 1 || commits != 1 {
		t.Errorf("%d writes committed %d times, want 1 once", ops, commits)
	}
	if run.GetContract().GetLabels()["rein.task"] != "refund" {
		t.Errorf("the run's labels %v", run.GetContract().GetLabels())
	}
}

// TestDeclineByElicitation: declining denies the write with the reason;
// nothing is committed.
func TestDeclineByElicitation(t *testing.T) {
	f := startFace(t)
	seen := make(chan *mcp.ElicitParams, 4)
	cs := f.connect(t, "starter", elicitor("decline", seen))
	started := decodeStart(t, call(t, cs, "start_refund", map[string]any{"invoice_id": "INV-42"}))
	receive(t, seen)
	// The denial is an observation: the model's script then answers.
	f.waitStatus(t, started.RunID, reinv1.RunStatus_RUN_STATUS_COMPLETED)
	if ops, _ := f.tools.total(); ops != 0 {
		t.Errorf("a declined write was committed")
	}
	events, err := f.runs.ListEvents(withToken(context.Background(), "viewer"), &reinv1.ListEventsRequest{RunId: started.RunID})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ev := range events.GetEvents() {
		if d := ev.GetApprovalDecided(); d != nil {
			found = ev.GetActor() == "principal:starter" && !d.GetApproved() && d.GetReason() == "not this one"
		}
	}
	if !found {
		t.Errorf("no denial by starter with its reason in the log")
	}
}

// TestCancelLeavesItPending: cancel leaves the write pending; a session
// that goes away leaves the run paused, decidable elsewhere.
func TestCancelLeavesItPending(t *testing.T) {
	f := startFace(t)
	seen := make(chan *mcp.ElicitParams, 4)
	cs := f.connect(t, "starter", elicitor("cancel", seen))
	started := decodeStart(t, call(t, cs, "start_refund", map[string]any{"invoice_id": "INV-42"}))
	receive(t, seen)
	_ = cs.Close()
	// Another approver decides it, through the tool.
	f.approveElsewhere(t, started.RunID)
}

// TestCloseWithElicitationUnanswered: a client that closes its session
// while an elicitation waits for its answer is let go at once (the SDK's
// close waits for the session's calls in flight, and the elicitation
// ends with the session's attendance); the run stays paused, decidable
// elsewhere. Its twin is TestCancelLeavesItPending, where the client
// answers before it closes.
func TestCloseWithElicitationUnanswered(t *testing.T) {
	f := startFace(t)
	seen := make(chan *mcp.ElicitParams, 4)
	release := make(chan struct{})
	defer close(release)
	cs := f.connect(t, "starter", func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		seen <- req.Params
		select { // a person who never answers
		case <-release:
		case <-ctx.Done():
		}
		return nil, context.Canceled
	})
	started := decodeStart(t, call(t, cs, "start_refund", map[string]any{"invoice_id": "INV-42"}))
	receive(t, seen)
	// The session's end, as a client sends it (DELETE), while the
	// elicitation is still unanswered.
	req := f.endSession(t, "starter", cs.ID())
	closed := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		closed <- err
	}()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("closing a session with an elicitation unanswered did not return: the server's close waits for it")
	}
	f.approveElsewhere(t, started.RunID)
}

// TestDeleteByAnotherPrincipal: a session's end sent with another
// principal's token (a DELETE naming the session) is refused and leaves
// the session as it was: its elicitation, still waiting, is then answered
// and approves the write. The twin is TestCloseWithElicitationUnanswered,
// where the session's own principal ends it and the elicitation with it.
func TestDeleteByAnotherPrincipal(t *testing.T) {
	f := startFace(t)
	seen := make(chan *mcp.ElicitParams, 4)
	answer := make(chan struct{})
	cs := f.connect(t, "starter", func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		seen <- req.Params
		select {
		case <-answer:
			return &mcp.ElicitResult{Action: "accept"}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	started := decodeStart(t, call(t, cs, "start_refund", map[string]any{"invoice_id": "INV-42"}))
	receive(t, seen)
	resp, err := http.DefaultClient.Do(f.endSession(t, "approver", cs.ID()))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode < 400 {
		t.Errorf("a DELETE of the starter's session with the approver's token answered %s, want it refused", resp.Status)
	}
	close(answer)
	f.waitStatus(t, started.RunID, reinv1.RunStatus_RUN_STATUS_COMPLETED)
	if ops, commits := f.tools.total(); ops != 1 || commits != 1 {
		t.Errorf("%d writes committed %d times, want 1 once", ops, commits)
	}
}

// endSession is the request that ends session id, as a client sends it (a
// DELETE), with who's token.
func (f *face) endSession(t *testing.T, who, id string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodDelete, f.url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+who+"-token")
	req.Header.Set("Mcp-Session-Id", id)
	return req
}

// approveElsewhere waits for runID to be paused for approval, approves it
// through the approve tool of another session (the approver's), and waits
// for it to complete.
func (f *face) approveElsewhere(t *testing.T, runID string) {
	t.Helper()
	run := f.waitStatus(t, runID, reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL)
	other := f.connect(t, "approver", nil)
	res := call(t, other, "approve", map[string]any{"run_id": run.GetRunId(), "proposal_id": run.GetPending().GetProposal().GetProposalId(), "proposal_hash": run.GetPending().GetProposal().GetHash()})
	if res.IsError {
		t.Fatalf("approve: %s", resultText(res))
	}
	f.waitStatus(t, runID, reinv1.RunStatus_RUN_STATUS_COMPLETED)
}

// TestNoApproverRoleNoApproval: an operator without the approver role who
// accepts the elicitation is refused by the API, and cannot call approve
// either; the run stays pending and nothing is committed.
func TestNoApproverRoleNoApproval(t *testing.T) {
	f := startFace(t)
	seen := make(chan *mcp.ElicitParams, 4)
	cs := f.connect(t, "operator", elicitor("accept", seen))
	started := decodeStart(t, call(t, cs, "start_refund", map[string]any{"invoice_id": "INV-42"}))
	receive(t, seen)
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "approve", Arguments: map[string]any{
		"run_id": started.RunID, "proposal_id": started.Pending.Proposal.ProposalID, "proposal_hash": started.Pending.Proposal.Hash}})
	if err == nil && !res.IsError {
		t.Fatalf("an operator approved by tool: %s", resultText(res))
	}
	// The elicitation's accept was refused: still pending, and
	// list_pending (read by the same session) shows it.
	pending := resultText(call(t, cs, "list_pending", map[string]any{}))
	if !strings.Contains(pending, started.RunID) {
		t.Errorf("list_pending does not show the run: %s", pending)
	}
	run := f.waitStatus(t, started.RunID, reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL)
	if run.GetApprovedWrite() != nil {
		t.Errorf("the write was approved")
	}
	if ops, _ := f.tools.total(); ops != 0 {
		t.Errorf("a write was committed")
	}
}

func TestUnauthenticated(t *testing.T) {
	f := startFace(t)
	for _, token := range []string{"", "Bearer wrong"} {
		req, _ := http.NewRequest(http.MethodPost, f.url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if token != "" {
			req.Header.Set("Authorization", token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(resp.Header.Get("WWW-Authenticate"), `resource_metadata="http://`) {
			t.Errorf("token %q: %d, WWW-Authenticate %q", token, resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
		}
	}
	meta := strings.TrimSuffix(f.url, "/mcp") + "/.well-known/oauth-protected-resource"
	resp, err := http.Get(meta)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"resource":"`+f.url+`"`) {
		t.Errorf("metadata: %d %s", resp.StatusCode, body)
	}
}

// TestTwoApproversByElicitation: a write whose grant needs two approvers.
// The starter, asked by elicitation, accepts, and is refused: the starter
// is never one of two approvers; the session is told why and the run
// waits. The first approver's approve leaves it waiting, saying who
// approved; the second's commits the write once.
func TestTwoApproversByElicitation(t *testing.T) {
	var task map[string]any
	if err := json.Unmarshal([]byte(refundTaskFile(t)), &task); err != nil {
		t.Fatal(err)
	}
	for _, tool := range task["tools"].([]any) {
		if tool := tool.(map[string]any); tool["name"] == "refunds.create" {
			tool["approvals"] = 2
		}
	}
	two, _ := json.Marshal(task)
	f := startFaceWith(t, string(two), nil)

	seen := make(chan *mcp.ElicitParams, 4)
	logs := make(chan string, 4)
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: elicitor("accept", seen),
		LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) {
			logs <- fmt.Sprint(req.Params.Data)
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: f.url, HTTPClient: &http.Client{Transport: bearer{"starter-token", http.DefaultTransport}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if err := cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatal(err)
	}
	started := decodeStart(t, call(t, cs, "start_refund", map[string]any{"invoice_id": "INV-42"}))
	receive(t, seen)
	select {
	case msg := <-logs:
		if !strings.Contains(msg, "refused") || !strings.Contains(msg, started.RunID) {
			t.Errorf("the starter was told %q", msg)
		}
	case <-ctx.Done():
		t.Fatal("the starter's refused accept was not reported to its session")
	}
	run := f.waitStatus(t, started.RunID, reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL)
	if by := run.GetPending().GetProposal().GetApprovedBy(); len(by) != 0 {
		t.Fatalf("the starter's accept counted: approved by %v", by)
	}

	args := map[string]any{"run_id": started.RunID, "proposal_id": started.Pending.Proposal.ProposalID, "proposal_hash": started.Pending.Proposal.Hash}
	first := call(t, f.connect(t, "approver", nil), "approve", args)
	if first.IsError || !strings.Contains(resultText(first), "RUN_STATUS_NEEDS_APPROVAL") || !strings.Contains(resultText(first), `"approved_by":["approver"]`) {
		t.Fatalf("the first approval answered %s", resultText(first))
	}
	if ops, _ := f.tools.total(); ops != 0 {
		t.Fatal("a write was committed after one approver of two")
	}
	// The starter's session still may not be the second.
	if res := call(t, cs, "approve", args); !res.IsError || !strings.Contains(resultText(res), "PermissionDenied") && !strings.Contains(resultText(res), "FailedPrecondition") {
		t.Errorf("the starter approved by tool: %s", resultText(res))
	}
	second := call(t, f.connect(t, "admin", nil), "approve", args)
	if second.IsError {
		t.Fatalf("the second approval: %s", resultText(second))
	}
	f.waitStatus(t, started.RunID, reinv1.RunStatus_RUN_STATUS_COMPLETED)
	if ops, commits := f.tools.total(); ops != 1 || commits != 1 {
		t.Errorf("%d writes committed %d times, want 1 once", ops, commits)
	}
}
