package mcpface

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// The bounds of a read tool's page.
const (
	maxRunsPage   = 50
	maxEventsPage = 100
)

// tool is one of the fixed tools: the RPC whose role it needs, its
// schema, and what it does with its arguments.
type tool struct {
	name, method, description string
	read                      bool
	schema                    map[string]any
	call                      func(ctx context.Context, s *session, req *mcp.CallToolRequest, args map[string]any) (proto.Message, error)
}

func obj(required []string, props map[string]any) map[string]any {
	s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}

func str(desc string) map[string]any { return map[string]any{"type": "string", "description": desc} }
func num(desc string) map[string]any {
	return map[string]any{"type": "integer", "minimum": 0, "description": desc}
}

var runID = str("the run's ID")

// fixedTools are the tools every session may be offered, each only to a
// principal whose roles allow its RPC.
var fixedTools = []tool{
	{name: "get_run", method: "GetRun", read: true, description: "A run's state: status, pending proposal or question, result, usage.",
		schema: obj([]string{"run_id"}, map[string]any{"run_id": runID}),
		call: func(ctx context.Context, s *session, _ *mcp.CallToolRequest, a map[string]any) (proto.Message, error) {
			return s.face.opts.Runs.GetRun(s.out(ctx), &reinv1.GetRunRequest{RunId: text(a, "run_id")})
		}},
	{name: "list_runs", method: "ListRuns", read: true, description: fmt.Sprintf("Runs, newest first, at most %d a page; page_token continues.", maxRunsPage),
		schema: obj(nil, map[string]any{"status": str("only runs in this status, such as RUN_STATUS_NEEDS_APPROVAL"), "page_size": num("at most 50"), "page_token": str("the next_page_token of the page before")}),
		call: func(ctx context.Context, s *session, _ *mcp.CallToolRequest, a map[string]any) (proto.Message, error) {
			req := &reinv1.ListRunsRequest{PageSize: pageSize(a, maxRunsPage), PageToken: text(a, "page_token")}
			if st := text(a, "status"); st != "" {
				v, ok := reinv1.RunStatus_value[st]
				if !ok {
					v, ok = reinv1.RunStatus_value["RUN_STATUS_"+strings.ToUpper(st)]
				}
				if !ok {
					return nil, argErrorf("status %q is not a run status (RUN_STATUS_RUNNING, RUN_STATUS_NEEDS_APPROVAL, …)", st)
				}
				req.Statuses = []reinv1.RunStatus{reinv1.RunStatus(v)}
			}
			return s.face.opts.Runs.ListRuns(s.out(ctx), req)
		}},
	{name: "list_pending", method: "ListRuns", read: true, description: fmt.Sprintf("Runs waiting for a person (an approval, an answer or more budget), newest first, at most %d a page.", maxRunsPage),
		schema: obj(nil, map[string]any{"page_token": str("the next_page_token of the page before")}),
		call: func(ctx context.Context, s *session, _ *mcp.CallToolRequest, a map[string]any) (proto.Message, error) {
			return s.face.opts.Runs.ListRuns(s.out(ctx), &reinv1.ListRunsRequest{PageSize: maxRunsPage, PageToken: text(a, "page_token"), Statuses: []reinv1.RunStatus{
				reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL, reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT, reinv1.RunStatus_RUN_STATUS_NEEDS_BUDGET}})
		}},
	{name: "get_events", method: "ListEvents", read: true, description: fmt.Sprintf("A run's events after a sequence, in order, at most %d a page.", maxEventsPage),
		schema: obj([]string{"run_id"}, map[string]any{"run_id": runID, "after_sequence": num("events after this sequence (0: from the first)"), "page_size": num("at most 100")}),
		call: func(ctx context.Context, s *session, _ *mcp.CallToolRequest, a map[string]any) (proto.Message, error) {
			return s.face.opts.Runs.ListEvents(s.out(ctx), &reinv1.ListEventsRequest{RunId: text(a, "run_id"), AfterSequence: uint64(number(a, "after_sequence")), PageSize: pageSize(a, maxEventsPage)})
		}},
	{name: "approve", method: "DecideApproval", description: "Approve a run's pending write, as it was shown: the proposal's ID and hash (get_run). The write is committed once and the run goes on.",
		schema: obj([]string{"run_id", "proposal_id", "proposal_hash"}, map[string]any{"run_id": runID, "proposal_id": str("the pending proposal's ID"), "proposal_hash": str("the hash of the proposal as shown"), "reason": str("why, for the record")}),
		call:   decide(reinv1.ApprovalVerdict_APPROVAL_VERDICT_APPROVE)},
	{name: "deny", method: "DecideApproval", description: "Deny a run's pending write: the reason goes to the model, or end_run ends the run denied.",
		schema: obj([]string{"run_id", "proposal_id", "proposal_hash"}, map[string]any{"run_id": runID, "proposal_id": str("the pending proposal's ID"), "proposal_hash": str("the hash of the proposal as shown"), "reason": str("why, told to the model"), "end_run": map[string]any{"type": "boolean", "description": "end the run as denied"}}),
		call:   decide(reinv1.ApprovalVerdict_APPROVAL_VERDICT_REJECT)},
	{name: "revise", method: "DecideApproval", description: "Revise a run's pending write with new arguments (in full): the revision is proposed again and waits for approval under a new ID and hash.",
		schema: obj([]string{"run_id", "proposal_id", "proposal_hash", "arguments"}, map[string]any{"run_id": runID, "proposal_id": str("the pending proposal's ID"), "proposal_hash": str("the hash of the proposal as shown"), "arguments": map[string]any{"type": "object", "description": "the write's arguments, in full"}, "reason": str("why")}),
		call:   decide(reinv1.ApprovalVerdict_APPROVAL_VERDICT_REVISE)},
	{name: "answer", method: "ProvideInput", description: "Answer a run's question (a run that needs input); the run goes on.",
		schema: obj([]string{"run_id", "text"}, map[string]any{"run_id": runID, "text": str("the answer")}),
		call: func(ctx context.Context, s *session, _ *mcp.CallToolRequest, a map[string]any) (proto.Message, error) {
			return s.face.opts.Runs.ProvideInput(s.out(ctx), &reinv1.ProvideInputRequest{RunId: text(a, "run_id"), Text: text(a, "text")})
		}},
	{name: "steer", method: "SteerRun", description: "Send a running run a message, read by the model with its next call.",
		schema: obj([]string{"run_id", "text"}, map[string]any{"run_id": runID, "text": str("the message")}),
		call: func(ctx context.Context, s *session, _ *mcp.CallToolRequest, a map[string]any) (proto.Message, error) {
			return s.face.opts.Runs.SteerRun(s.out(ctx), &reinv1.SteerRunRequest{RunId: text(a, "run_id"), Text: text(a, "text"), RequestId: requestID()})
		}},
	{name: "raise_budget", method: "RaiseBudget", description: "Raise the budget of a run paused on it (needs_budget) and carry it on.",
		schema: obj([]string{"run_id"}, map[string]any{"run_id": runID, "add_steps": num("more steps"), "add_tokens": num("more tokens"), "add_tool_calls": num("more tool calls"),
			"add_cost_usd": map[string]any{"type": "number", "minimum": 0, "description": "more US dollars"}, "reason": str("why")}),
		call: func(ctx context.Context, s *session, _ *mcp.CallToolRequest, a map[string]any) (proto.Message, error) {
			return s.face.opts.Runs.RaiseBudget(s.out(ctx), &reinv1.RaiseBudgetRequest{RunId: text(a, "run_id"), AddSteps: uint32(number(a, "add_steps")),
				AddTokens: uint64(number(a, "add_tokens")), AddToolCalls: uint32(number(a, "add_tool_calls")), AddCostUsd: number(a, "add_cost_usd"), Reason: text(a, "reason")})
		}},
	{name: "cancel", method: "CancelRun", description: "Cancel a running or paused run.",
		schema: obj([]string{"run_id"}, map[string]any{"run_id": runID, "reason": str("why")}),
		call: func(ctx context.Context, s *session, _ *mcp.CallToolRequest, a map[string]any) (proto.Message, error) {
			return s.face.opts.Runs.CancelRun(s.out(ctx), &reinv1.CancelRunRequest{RunId: text(a, "run_id"), Reason: text(a, "reason")})
		}},
}

func decide(verdict reinv1.ApprovalVerdict) func(context.Context, *session, *mcp.CallToolRequest, map[string]any) (proto.Message, error) {
	return func(ctx context.Context, s *session, _ *mcp.CallToolRequest, a map[string]any) (proto.Message, error) {
		req := &reinv1.DecideApprovalRequest{RunId: text(a, "run_id"), ProposalId: text(a, "proposal_id"), ProposalHash: text(a, "proposal_hash"),
			Verdict: verdict, Reason: text(a, "reason"), EndRun: a["end_run"] == true}
		if args, ok := a["arguments"].(map[string]any); ok {
			st, err := structpb.NewStruct(args)
			if err != nil {
				return nil, argErrorf("arguments: %v", err)
			}
			req.Arguments = st
		}
		return s.face.opts.Runs.DecideApproval(s.out(ctx), req)
	}
}

// argError is arguments the face cannot even put into a request.
type argError string

func (e argError) Error() string { return string(e) }

func argErrorf(format string, a ...any) error { return argError(fmt.Sprintf(format, a...)) }

func text(a map[string]any, key string) string {
	s, _ := a[key].(string)
	return s
}

func number(a map[string]any, key string) float64 {
	n, _ := a[key].(float64)
	return max(n, 0)
}

func pageSize(a map[string]any, most int32) int32 {
	n := int32(min(number(a, "page_size"), float64(most)))
	if n <= 0 {
		return most
	}
	return n
}

// addTools adds the session's tools: a start tool per task it may start,
// and the fixed tools its roles allow.
func (s *session) addTools(srv *mcp.Server, tasks []*reinv1.Task) {
	no := false
	s.setStartTools(tasks)
	for _, t := range fixedTools {
		if !s.may(t.method) {
			continue
		}
		ann := &mcp.ToolAnnotations{ReadOnlyHint: t.read, OpenWorldHint: &no}
		if !t.read {
			destructive := t.name == "cancel" || t.name == "deny"
			ann.DestructiveHint = &destructive
		}
		srv.AddTool(&mcp.Tool{Name: t.name, Description: t.description, InputSchema: t.schema, Annotations: ann}, s.fixedTool(t))
	}
}

// setStartTools makes the session's start tools those of tasks: a tool
// whose task is gone is removed, one whose task is new or changed is
// added (the server tells the client its list changed).
func (s *session) setStartTools(tasks []*reinv1.Task) {
	s.startMu.Lock()
	defer s.startMu.Unlock()
	want := map[string]*reinv1.Task{}
	for _, t := range tasks {
		want["start_"+t.GetName()] = t
	}
	var gone []string
	for name := range s.started {
		if want[name] == nil {
			gone = append(gone, name)
		}
	}
	if len(gone) > 0 {
		s.server.RemoveTools(gone...)
	}
	yes, no := true, false
	for name, t := range want {
		if old := s.started[name]; old != nil && proto.Equal(old, t) {
			continue
		}
		schema := map[string]any{"type": "object"}
		if t.GetInputSchema() != nil {
			schema = t.GetInputSchema().AsMap()
		}
		s.server.AddTool(&mcp.Tool{
			Name: name, Description: "Start a run of the task " + t.GetName() + ": " + t.GetDescription() +
				" Answers with the run's ID and status, and its result when it ends soon.",
			InputSchema: schema,
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: false, DestructiveHint: &no, IdempotentHint: false, OpenWorldHint: &yes},
		}, s.startTool(t))
	}
	s.started = want
}

// arguments decodes a call's arguments as an object.
func arguments(req *mcp.CallToolRequest) (map[string]any, error) {
	a := map[string]any{}
	raw := req.Params.Arguments
	if len(raw) == 0 || string(raw) == "null" {
		return a, nil
	}
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, argErrorf("the arguments are not a JSON object: %v", err)
	}
	return a, nil
}

func (s *session) fixedTool(t tool) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		a, err := arguments(req)
		if err != nil {
			return errorResult(err), nil
		}
		for k := range a {
			if _, known := t.schema["properties"].(map[string]any)[k]; !known {
				return errorResult(argErrorf("unknown argument %q; %s takes %v", k, t.name, keys(t.schema))), nil
			}
		}
		resp, err := t.call(ctx, s, req, a)
		if err != nil {
			return refusedOr(err), nil
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: asJSON(resp)}}}, nil
	}
}

func keys(schema map[string]any) []string {
	var out []string
	for k := range schema["properties"].(map[string]any) {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func errorResult(err error) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}
}

func refusedOr(err error) *mcp.CallToolResult {
	if _, ok := err.(argError); ok {
		return errorResult(err)
	}
	return refused(err)
}

// startReply is what a start tool answers.
type startReply struct {
	RunID  string          `json:"run_id"`
	Status string          `json:"status"`
	Result json.RawMessage `json:"result,omitempty"`
	// Pending is what the run waits for, when it paused.
	Pending json.RawMessage `json:"pending,omitempty"`
}

// startTool starts a run of t with the call's arguments as its inputs
// (StartRun with task), follows it for up to StartWait (with progress
// notifications, when the call asked for them), and answers with where it
// stands. A session that can elicit is then asked about the run's pauses.
func (s *session) startTool(t *reinv1.Task) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		a, err := arguments(req)
		if err != nil {
			return errorResult(err), nil
		}
		inputs, err := structpb.NewStruct(a)
		if err != nil {
			return errorResult(argErrorf("the arguments: %v", err)), nil
		}
		started, err := s.face.opts.Runs.StartRun(s.out(ctx), &reinv1.StartRunRequest{RequestId: requestID(), Task: t.GetName(), Inputs: inputs})
		if err != nil {
			return refused(err), nil
		}
		run := started.GetRun()
		if sessCtx := s.bind(req.Session); canElicit(req.Session) {
			s.attend(sessCtx, req.Session, run.GetRunId())
		}
		run = s.follow(ctx, req, run)
		reply := startReply{RunID: run.GetRunId(), Status: run.GetStatus().String()}
		if r := run.GetResult(); r != nil {
			reply.Result, _ = protojson.Marshal(r)
		}
		if p := run.GetPending(); p != nil {
			reply.Pending, _ = protojson.MarshalOptions{UseProtoNames: true}.Marshal(p)
		}
		b, _ := json.Marshal(reply)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}, StructuredContent: json.RawMessage(b)}, nil
	}
}

// follow watches run until it pauses or ends, or StartWait passes, and
// returns it as it then stands. With a progress token it notifies the
// client at each step.
func (s *session) follow(ctx context.Context, req *mcp.CallToolRequest, run *reinv1.Run) *reinv1.Run {
	if settled(run.GetStatus()) {
		return run
	}
	wctx, cancel := context.WithTimeout(ctx, s.face.opts.StartWait)
	defer cancel()
	token := req.Params.GetProgressToken()
	stream, err := s.face.opts.Runs.WatchRun(s.out(wctx), &reinv1.WatchRunRequest{RunId: run.GetRunId()})
	if err == nil {
		steps := 0
		for {
			resp, err := stream.Recv()
			if err == io.EOF || err != nil {
				break
			}
			ev := resp.GetEvent()
			if ev.GetModelRequested() != nil && token != nil {
				steps++
				_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: float64(steps),
					Message: fmt.Sprintf("run %s: step %d", run.GetRunId(), steps)})
			}
			if sc := ev.GetStatusChanged(); sc != nil && settled(sc.GetTo()) {
				if token != nil {
					_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: float64(steps),
						Message: fmt.Sprintf("run %s: %s", run.GetRunId(), sc.GetTo())})
				}
				break
			}
		}
	}
	// Read with the call's own context: the wait may have run out.
	if got, err := s.face.opts.Runs.GetRun(s.out(ctx), &reinv1.GetRunRequest{RunId: run.GetRunId()}); err == nil {
		return got.GetRun()
	}
	return run
}

// settled reports whether a run in st waits for a person or has ended.
func settled(st reinv1.RunStatus) bool {
	switch st {
	case reinv1.RunStatus_RUN_STATUS_RUNNING, reinv1.RunStatus_RUN_STATUS_QUEUED, reinv1.RunStatus_RUN_STATUS_UNSPECIFIED:
		return false
	}
	return true
}
