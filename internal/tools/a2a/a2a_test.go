package a2a_test

// Tests of rein's A2A client against a second rein node serving A2A
// in-process (as internal/a2aface's tests start one): the refund example
// as a catalog task whose write the remote's approver approves, and a
// task held on a gate the test opens, to cut the calling node mid-call.
// Nothing sleeps: the tests wait on the runs' events and the gate, under
// deadlines.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/a2aface"
	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/store/bolt"
	"github.com/reinhq/rein/internal/tools"
	a2a "github.com/reinhq/rein/internal/tools/a2a"
	"github.com/reinhq/rein/server"
	"github.com/reinhq/rein/server/facetest"
)

func deadline(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// gate is a remote tool, gate.wait, whose reads block until it is open;
// entered gets a value as each read begins.
type gate struct {
	entered chan struct{}
	open    chan struct{}
}

func (g *gate) List(context.Context) ([]tools.Spec, error) {
	return []tools.Spec{{Name: "gate.wait", InputSchema: &structpb.Struct{}}}, nil
}

func (g *gate) Read(ctx context.Context, _ tools.Call) (*structpb.Value, error) {
	g.entered <- struct{}{}
	select {
	case <-g.open:
		return structpb.NewValue(map[string]any{"gate": "open"})
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (g *gate) Propose(context.Context, tools.Call) (*structpb.Value, error) {
	return nil, errors.New("gate.wait is a read")
}

func (g *gate) Commit(context.Context, tools.Call, string) (*structpb.Value, error) {
	return nil, errors.New("gate.wait is a read")
}

// remote is a rein node serving A2A.
type remote struct {
	url   string
	runs  reinv1.RunServiceClient
	gate  *gate
	hs    *httptest.Server
	calls *calls
}

// calls counts the A2A requests that reach the remote's face, by method,
// and refuses ListTasks when noList is set, as an agent that does not
// list tasks would.
type calls struct {
	mu     sync.Mutex
	n      map[string]int
	noList bool
	// tick is signalled, without blocking, after each request counted.
	tick chan struct{}
}

func newCalls() *calls { return &calls{n: map[string]int{}, tick: make(chan struct{}, 1)} }

func (c *calls) count(method string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[method]
}

// await waits until more than n requests of method have been counted.
func (c *calls) await(t *testing.T, ctx context.Context, method string, n int) {
	t.Helper()
	for c.count(method) <= n {
		select {
		case <-c.tick:
		case <-ctx.Done():
			t.Fatalf("no %s reached the remote face (%d before)", method, n)
		}
	}
}

// wrap is next behind the count: JSON-RPC requests by their method,
// HTTP+JSON ones by their path.
func (c *calls) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var method string
		var id json.RawMessage
		switch {
		case strings.HasSuffix(r.URL.Path, "/message:send"):
			method = "SendMessage"
		case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/tasks"):
			method = "ListTasks"
		case r.Method == http.MethodPost && r.Body != nil:
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			var rpc struct {
				Method string          `json:"method"`
				ID     json.RawMessage `json:"id"`
			}
			_ = json.Unmarshal(body, &rpc)
			method, id = rpc.Method, rpc.ID
		}
		c.mu.Lock()
		c.n[method]++
		refuse := c.noList && method == "ListTasks"
		c.mu.Unlock()
		select {
		case c.tick <- struct{}{}:
		default:
		}
		if refuse {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": id,
				"error": map[string]any{"code": -32004, "message": "tasks are not listed here"}})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// as is ctx carrying who's token to the remote's RunService.
func as(ctx context.Context, who string) context.Context {
	return facetest.As(ctx, who)
}

// gatedTask waits on the gate, then answers.
func gatedTask() map[string]any {
	return map[string]any{
		"name": "gated", "goal": "Wait on the gate.", "input_schema": map[string]any{"type": "object"},
		"tools":  []any{map[string]any{"name": "gate.wait", "tier": "TOOL_TIER_READ"}},
		"budget": map[string]any{"max_steps": 4, "max_tokens": 20000, "timeout": "600s"},
		"model": map[string]any{"provider": "script", "script": []any{
			map[string]any{"decision": map[string]any{"tool_call": map[string]any{"tool": "gate.wait", "arguments": map[string]any{}, "call_id": "g1"}}},
			map[string]any{"decision": map[string]any{"final_answer": map[string]any{"text": "the gate opened"}}},
		}},
	}
}

// startRemote serves a node with the refund and gated tasks and the A2A
// face. Principals of tenant acme: starter (operator, approver), clerk
// (operator); a token is the ID + "-token".
func startRemote(t *testing.T) *remote {
	t.Helper()
	_, catalogue := facetest.Catalog(t, map[string]string{"refund.json": facetest.JSON(t, facetest.RefundTask(t)), "gated.json": facetest.JSON(t, gatedTask())})
	g := &gate{entered: make(chan struct{}, 8), open: make(chan struct{})}
	directory := facetest.Directory(t,
		facetest.Principal{ID: "starter", Tenant: "acme", Roles: []string{"operator", "approver"}},
		facetest.Principal{ID: "clerk", Tenant: "acme", Roles: []string{"operator"}})
	node, cc := facetest.Node(t, server.Config{Tools: tools.Join(facetest.RefundTools(t), g), Directory: directory, Tasks: catalogue, Resume: true})
	runs := reinv1.NewRunServiceClient(cc)
	f := a2aface.New(a2aface.Options{Runs: runs, Authenticate: node.AuthenticateHTTP, Bearer: true})
	mux := http.NewServeMux()
	for path, h := range f.Mounts() {
		mux.Handle(path, h)
	}
	counted := newCalls()
	hs := httptest.NewServer(counted.wrap(mux))
	t.Cleanup(func() {
		select {
		case <-g.open:
		default:
			close(g.open)
		}
		hs.Close()
	})
	return &remote{url: hs.URL, runs: runs, gate: g, hs: hs, calls: counted}
}

// remoteRuns is how many runs the remote holds.
func (r *remote) remoteRuns(t *testing.T, ctx context.Context) []*reinv1.Run {
	t.Helper()
	resp, err := r.runs.ListRuns(as(ctx, "starter"), &reinv1.ListRunsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetRuns()
}

// parent is a node whose runs call the remote through the A2A client.
type parent struct {
	node *server.Node
	runs reinv1.RunServiceClient
	stop func()
}

func openParent(t *testing.T, db string, x tools.Executor, models func(*reinv1.ModelSpec) (model.Model, error)) *parent {
	t.Helper()
	st, err := bolt.Open(db, bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	node, err := server.Open(context.Background(), server.Config{Store: st, Tools: x, Models: models, Resume: true})
	if err != nil {
		t.Fatal(err)
	}
	cc, stop := facetest.Serve(t, node)
	p := &parent{node: node, runs: reinv1.NewRunServiceClient(cc), stop: stop}
	t.Cleanup(p.close)
	return p
}

func (p *parent) close() {
	p.stop()
	p.node.Close()
}

func open(t *testing.T, ctx context.Context, r *remote, token string) *a2a.Client {
	t.Helper()
	c, err := a2a.Open(ctx, "remote", r.url, a2a.Options{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func contract(t *testing.T, js string) *reinv1.TaskContract {
	t.Helper()
	c := &reinv1.TaskContract{}
	if err := protojson.Unmarshal([]byte(js), c); err != nil {
		t.Fatal(err)
	}
	return c
}

// start starts a run on p and returns its ID.
func (p *parent) start(t *testing.T, ctx context.Context, c *reinv1.TaskContract) string {
	t.Helper()
	resp, err := p.runs.StartRun(ctx, &reinv1.StartRunRequest{RequestId: "parent-1", Contract: c})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetRun().GetRunId()
}

// await watches run until it ends, and returns it.
func (p *parent) await(t *testing.T, ctx context.Context, runID string) *reinv1.Run {
	t.Helper()
	stream, err := p.runs.WatchRun(ctx, &reinv1.WatchRunRequest{RunId: runID})
	if err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("watch %s: %v", runID, err)
		}
		switch resp.GetEvent().GetStatusChanged().GetTo() {
		case reinv1.RunStatus_RUN_STATUS_COMPLETED, reinv1.RunStatus_RUN_STATUS_FAILED, reinv1.RunStatus_RUN_STATUS_BUDGET_EXHAUSTED,
			reinv1.RunStatus_RUN_STATUS_DENIED, reinv1.RunStatus_RUN_STATUS_CANCELLED:
			got, err := p.runs.GetRun(ctx, &reinv1.GetRunRequest{RunId: runID})
			if err != nil {
				t.Fatal(err)
			}
			return got.GetRun()
		}
	}
}

// delegator is the parent's model: it calls remote.refund, waits for the
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
func TestOpenFailures(t *testing.T) {
	ctx := deadline(t)
	r := startRemote(t)
	if _, err := a2a.Open(ctx, "remote", r.url, a2a.Options{Token: "wrong-token"}); err == nil || !strings.Contains(err.Error(), "token") {
		t.Errorf("a refused token: Open = %v, want an error that names the token", err)
	}
	down := httptest.NewServer(http.NotFoundHandler())
	url := down.URL
	down.Close()
	if _, err := a2a.Open(ctx, "remote", url, a2a.Options{}); err == nil {
		t.Error("a remote that is down: Open succeeded")
	}
}

// TestCallFailures are the failure twins of a call: an unknown skill, and
// a remote that went down after Open.
func TestCallFailures(t *testing.T) {
	ctx := deadline(t)
	r := startRemote(t)
	c := open(t, ctx, r, "starter-token")
	args, _ := structpb.NewStruct(map[string]any{"invoice_id": "INV-42"})
	if _, err := c.Read(ctx, tools.Call{RunID: "run_x", CallID: "c1", Tool: "remote.nope", Args: args}); !errors.Is(err, tools.ErrNoTool) {
		t.Errorf("an unknown skill: Read = %v, want ErrNoTool", err)
	}
	r.hs.Close()
	if _, err := c.Read(ctx, tools.Call{RunID: "run_x", CallID: "c2", Tool: "remote.refund", Args: args}); err == nil {
		t.Error("a remote that is down: Read succeeded")
	}
}

// TestList offers a tool per skill with the input schema the face writes,
// and the task tool; the card's extension URI is the face's.
func TestList(t *testing.T) {
	if a2a.InputSchemaExtension != a2aface.InputSchemaExtension {
		t.Fatalf("the client reads %s, the face writes %s", a2a.InputSchemaExtension, a2aface.InputSchemaExtension)
	}
	ctx := deadline(t)
	r := startRemote(t)
	specs, err := open(t, ctx, r, "starter-token").List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]*structpb.Struct{}
	for _, s := range specs {
		names[s.Name] = s.InputSchema
	}
	for _, want := range []string{"remote.refund", "remote.gated", "remote.task"} {
		if _, ok := names[want]; !ok {
			t.Errorf("no tool %s in %v", want, names)
		}
	}
	if names["remote.refund"].GetFields()["required"].GetListValue().GetValues()[0].GetStringValue() != "invoice_id" {
		t.Errorf("remote.refund's schema is %v, want the task's input schema", names["remote.refund"])
	}
}

// TestParseSource reads a source's URL and token, and refuses a bad one.
func TestParseSource(t *testing.T) {
	t.Setenv("A2A_TEST_TOKEN", "tok")
	src, err := a2a.ParseSource("https://agent.example/base/?token_env=A2A_TEST_TOKEN")
	if err != nil {
		t.Fatal(err)
	}
	if tok, err := src.Token(); src.URL != "https://agent.example/base" || tok != "tok" || err != nil {
		t.Errorf("ParseSource = %+v, token %q, %v", src, tok, err)
	}
	for _, bad := range []string{"ftp://x", "not a url", "http://x?token=secret", "http://x?token_env=A&token_file=B"} {
		if _, err := a2a.ParseSource(bad); err == nil {
			t.Errorf("ParseSource(%q) succeeded", bad)
		}
	}
	src, _ = a2a.ParseSource("http://x?token_env=A2A_TEST_UNSET")
	if _, err := src.Token(); err == nil {
		t.Error("an unset token_env gave a token")
	}
}
