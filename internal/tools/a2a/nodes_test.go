package a2a_test

// The two nodes of the tests: the remote, serving the refund and gated tasks
// over A2A, and the parent, whose runs call it through the client.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
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
