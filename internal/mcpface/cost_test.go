package mcpface_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// BenchmarkGetRun is one get_run tool call through the face over
// Streamable HTTP, client and server in this process: the call rein-bench's
// mcp scenario times against Connect (docs/benchmarks.md), here for
// go test -cpuprofile.
func BenchmarkGetRun(b *testing.B) {
	f := startFace(b)
	cs := f.connect(b, "starter", nil)
	started := decodeStart(b, call(b, cs, "start_refund", map[string]any{"invoice_id": "INV-42"}))
	args := map[string]any{"run_id": started.RunID}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "get_run", Arguments: args})
		if err != nil || res.IsError {
			b.Fatalf("get_run: %v, %s", err, resultText(res))
		}
	}
}

// countingInfo counts the face's GetServerInfo calls: one per session
// built.
type countingInfo struct {
	reinv1.RunServiceClient
	n atomic.Int32
}

func (c *countingInfo) GetServerInfo(ctx context.Context, req *reinv1.GetServerInfoRequest, opts ...grpc.CallOption) (*reinv1.GetServerInfoResponse, error) {
	c.n.Add(1)
	return c.RunServiceClient.GetServerInfo(ctx, req, opts...)
}

// TestOneServerPerSession: a session's server (two calls of the API and
// its tools) is built when the session opens, not again at each of its
// requests; a session of another principal gets its own.
func TestOneServerPerSession(t *testing.T) {
	counter := &countingInfo{}
	f := startFaceWith(t, refundTaskFile(t), func(runs reinv1.RunServiceClient) reinv1.RunServiceClient {
		counter.RunServiceClient = runs
		return counter
	})
	cs := f.connect(t, "viewer", nil)
	opened := counter.n.Load()
	if opened == 0 {
		t.Fatal("opening a session built no server")
	}
	for range 5 {
		if res := call(t, cs, "list_runs", map[string]any{}); res.IsError {
			t.Fatalf("list_runs: %s", resultText(res))
		}
	}
	if n := counter.n.Load() - opened; n != 0 {
		t.Errorf("5 calls of an open session built %d servers, want none", n)
	}
	other := f.connect(t, "starter", nil)
	tools, err := other.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := counter.n.Load(); n <= opened || !slices.ContainsFunc(tools.Tools, func(tool *mcp.Tool) bool { return tool.Name == "start_refund" }) {
		t.Errorf("a second session: %d servers built in all, its tools %d", n, len(tools.Tools))
	}
}
