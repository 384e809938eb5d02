package mcpface_test

// Tests of the MCP face driven by the official Go SDK's client, against a
// real node on a real bbolt file, the refund example's task (its scripted
// model and fixture tools), and principals from a tokens file. Nothing
// sleeps: the tests wait on elicitations, notifications and runs' ends,
// with deadlines.

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/catalog"
	"github.com/reinhq/rein/internal/mcpface"
	"github.com/reinhq/rein/internal/tools"
	"github.com/reinhq/rein/server"
	"github.com/reinhq/rein/server/facetest"
)

// The principals: a token is the ID + "-token".
var principals = map[string][]string{
	"starter":  {"operator", "approver"}, // may start and approve its own write (the contract allows it)
	"operator": {"operator"},             // may start, not approve
	"approver": {"approver"},
	"viewer":   {"viewer"},
	"admin":    {"admin"}, // a second approver
}

// countingTools counts the commits of each operation ID.
type countingTools struct {
	tools.Executor
	mu      sync.Mutex
	commits map[string]int
}

func (c *countingTools) Commit(ctx context.Context, call tools.Call, op string) (*structpb.Value, error) {
	c.mu.Lock()
	c.commits[op]++
	c.mu.Unlock()
	return c.Executor.Commit(ctx, call, op)
}

func (c *countingTools) total() (ops, commits int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.commits {
		ops++
		commits += n
	}
	return ops, commits
}

type face struct {
	url   string
	runs  reinv1.RunServiceClient
	tools *countingTools
	// dir is the catalog's directory, tasks its holder and face the
	// face, for tests that reload it.
	dir   string
	tasks *catalog.Holder
	face  *mcpface.Face
}

// refundTaskFile is examples/refund as a catalog task, with the
// description and the strict input schema the face's tool shows.
func refundTaskFile(t testing.TB) string {
	t.Helper()
	task := facetest.RefundTask(t)
	task["description"] = "Refund a duplicate charge on an invoice."
	task["input_schema"] = map[string]any{"type": "object", "properties": map[string]any{"invoice_id": map[string]any{"type": "string", "pattern": "^INV-[0-9]+$"}},
		"required": []any{"invoice_id"}, "additionalProperties": false}
	return facetest.JSON(t, task)
}

// startFace serves a node with the refund task, and the MCP face over
// HTTP in front of it, its calls going in-process through the node's gRPC
// server.
func startFace(t testing.TB) *face {
	t.Helper()
	return startFaceWith(t, refundTaskFile(t), nil)
}

// startFaceWith is startFace with task as the catalog's refund.json, and
// the face's calls going through wrap's client, when wrap is set.
func startFaceWith(t testing.TB, task string, wrap func(reinv1.RunServiceClient) reinv1.RunServiceClient) *face {
	t.Helper()
	return startFaceOpts(t, task, wrap, nil)
}

// startFaceOpts is startFaceWith with the transport's event store.
func startFaceOpts(t testing.TB, task string, wrap func(reinv1.RunServiceClient) reinv1.RunServiceClient, events mcp.EventStore) *face {
	t.Helper()
	dir, tasks := facetest.Catalog(t, map[string]string{"refund.json": task})
	ct := &countingTools{Executor: facetest.RefundTools(t), commits: map[string]int{}}
	var all []facetest.Principal
	for id, roles := range principals {
		all = append(all, facetest.Principal{ID: id, Tenant: "acme", Roles: roles})
	}
	directory := facetest.Directory(t, all...)
	_, cc := facetest.Node(t, server.Config{Tools: ct, Directory: directory, Tasks: tasks, Resume: true})
	runs := reinv1.NewRunServiceClient(cc)
	faceRuns := runs
	if wrap != nil {
		faceRuns = wrap(runs)
	}
	f := mcpface.New(mcpface.Options{Runs: faceRuns, StartWait: 20 * time.Second})
	hs := httptest.NewServer(f.Handler(mcpface.HTTPOptions{Token: directory.Token, EventStore: events}))
	t.Cleanup(hs.Close)
	return &face{url: hs.URL + mcpface.Path, runs: runs, tools: ct, dir: dir, tasks: tasks, face: f}
}

// bearer adds a token to every request.
type bearer struct {
	token string
	base  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

// connect opens a session as who; elicit, when set, answers elicitations
// (and declares the capability).
func (f *face) connect(t testing.TB, who string, elicit func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error)) *mcp.ClientSession {
	t.Helper()
	opts := &mcp.ClientOptions{ElicitationHandler: elicit}
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: f.url, HTTPClient: &http.Client{Transport: bearer{who + "-token", http.DefaultTransport}}}, nil)
	if err != nil {
		t.Fatalf("connect as %s: %v", who, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func call(t testing.TB, cs *mcp.ClientSession, name string, args any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("call %s: %v", name, err)
	}
	return res
}

func resultText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// waitStatus follows a run until it is in want, or fails at the
// deadline.
func (f *face) waitStatus(t *testing.T, runID string, want reinv1.RunStatus) *reinv1.Run {
	t.Helper()
	ctx, cancel := context.WithTimeout(withToken(context.Background(), "viewer"), 30*time.Second)
	defer cancel()
	stream, err := f.runs.WatchRun(ctx, &reinv1.WatchRunRequest{RunId: runID})
	if err != nil {
		t.Fatal(err)
	}
	for {
		got, err := f.runs.GetRun(ctx, &reinv1.GetRunRequest{RunId: runID})
		if err != nil {
			t.Fatal(err)
		}
		if got.GetRun().GetStatus() == want {
			return got.GetRun()
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatalf("run %s is %v, want %v (%v)", runID, got.GetRun().GetStatus(), want, err)
		}
	}
}

func withToken(ctx context.Context, who string) context.Context {
	return facetest.As(ctx, who)
}

type startReply struct {
	RunID   string `json:"run_id"`
	Status  string `json:"status"`
	Pending struct {
		Proposal struct {
			ProposalID string `json:"proposal_id"`
			Hash       string `json:"hash"`
		} `json:"proposal"`
	} `json:"pending"`
}

func decodeStart(t testing.TB, res *mcp.CallToolResult) startReply {
	t.Helper()
	if res.IsError {
		t.Fatalf("start refused: %s", resultText(res))
	}
	var r startReply
	if err := json.Unmarshal([]byte(resultText(res)), &r); err != nil {
		t.Fatalf("start reply %q: %v", resultText(res), err)
	}
	return r
}
