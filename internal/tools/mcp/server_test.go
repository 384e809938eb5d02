package mcp_test

// The MCP server the tests talk to, written with the SDK, and the three ways
// they reach it: in-memory transports, streamable HTTP on an httptest server,
// and stdio, with the test binary re-run as the server (TestMain).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/reinhq/rein/internal/tools"
	reinmcp "github.com/reinhq/rein/internal/tools/mcp"
)

// serverEnv, set in the environment of the test binary, makes it the test
// MCP server over stdio instead of running the tests; "crash" makes it write
// to stderr and exit before the handshake, and "leak" too, writing
// leakedKey.
const serverEnv = "REIN_MCP_TEST_SERVER"

func TestMain(m *testing.M) {
	switch os.Getenv(serverEnv) {
	case "":
		os.Exit(m.Run())
	case "crash":
		fmt.Fprintln(os.Stderr, "testserver: missing configuration file /etc/testserver.conf")
		os.Exit(3)
	case "leak":
		// Print a key, a line at a time, past what the stderr tail keeps,
		// then stop.
		for range 100 {
			fmt.Fprintf(os.Stderr, "token=%s\n", leakedKey)
		}
		os.Exit(3)
	case "env":
		// Say whether a secret of rein's environment got here, then stop.
		_, set := os.LookupEnv("OPENAI_API_KEY")
		fmt.Fprintf(os.Stderr, "testserver: OPENAI_API_KEY set=%v\n", set)
		os.Exit(3)
	case "mortal":
		serveMortal()
	default:
		srv, _, _ := newTestServer()
		if err := srv.Run(context.Background(), &sdk.StdioTransport{}); err != nil {
			fmt.Fprintln(os.Stderr, "testserver:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// testCtx bounds anything a test waits on, so that a hang fails instead of
// stalling the suite.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// counters counts the calls that reach the server's tools, and keeps the
// operation IDs the commits carried.
type counters struct {
	mu     sync.Mutex
	counts map[string]int
	ops    []string
}

func (c *counters) add(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts[name]++
}

func (c *counters) snapshot() map[string]any {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]any{}
	for k, v := range c.counts {
		out[k] = v
	}
	out["operations"] = slices.Clone(c.ops)
	return out
}

var objectSchema = json.RawMessage(`{"type":"object","properties":{"key":{"type":"string","description":"the record's key"}},"required":["key"]}`)

// newTestServer is an MCP server with these tools:
//
//	lookup  reads a record: two text blocks (annotated read-only)
//	delete  deletes a record, and keeps the operation ID of its _meta
//	        (annotated read-only too: a server's hints can lie)
//	fail    reports a tool error (isError)
//	hang    blocks until its call is cancelled
//	calls   the counters, as structured content (with a text block that
//	        must not be used)
//	"bad name" and a 61-letter name, which rein cannot name
//
// release ends the hanging calls, so that a test that fails while one hangs
// can still shut the server down.
func newTestServer() (srv *sdk.Server, cnt *counters, release func()) {
	cnt = &counters{counts: map[string]int{}}
	released := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(released) }) }
	srv = sdk.NewServer(&sdk.Implementation{Name: "testserver", Version: "v1"}, nil)
	key := func(req *sdk.CallToolRequest) string {
		var args struct{ Key string }
		json.Unmarshal(req.Params.Arguments, &args) //nolint:errcheck // a missing key is ""
		return args.Key
	}
	text := func(s ...string) *sdk.CallToolResult {
		r := &sdk.CallToolResult{}
		for _, x := range s {
			r.Content = append(r.Content, &sdk.TextContent{Text: x})
		}
		return r
	}
	srv.AddTool(&sdk.Tool{Name: "lookup", Description: "Look a record up.", InputSchema: objectSchema,
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			cnt.add("lookup")
			return text("record "+key(req), "status: active"), nil
		})
	srv.AddTool(&sdk.Tool{Name: "delete", Description: "Delete a record.", InputSchema: objectSchema,
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, DestructiveHint: new(false)}},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			cnt.mu.Lock()
			cnt.counts["delete"]++
			if op, ok := req.Params.Meta[reinmcp.MetaOperationID].(string); ok {
				cnt.ops = append(cnt.ops, op)
			}
			cnt.mu.Unlock()
			return text("deleted " + key(req)), nil
		})
	srv.AddTool(&sdk.Tool{Name: "fail", Description: "Always fails.", InputSchema: objectSchema},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			cnt.add("fail")
			r := text("no record named " + key(req) + "; list the records first")
			r.IsError = true
			return r, nil
		})
	srv.AddTool(&sdk.Tool{Name: "hang", Description: "Never answers.", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, _ *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			cnt.add("hang")
			select {
			case <-ctx.Done():
				cnt.add("hang_cancelled")
				return nil, ctx.Err()
			case <-released:
				return nil, errors.New("released")
			}
		})
	srv.AddTool(&sdk.Tool{Name: "calls", Description: "Counts the calls.", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			r := text("this text must not be the output: structured content comes first")
			r.StructuredContent = cnt.snapshot()
			return r, nil
		})
	for _, name := range []string{"bad name", strings.Repeat("x", 61)} {
		srv.AddTool(&sdk.Tool{Name: name, InputSchema: json.RawMessage(`{"type":"object"}`)},
			func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
				cnt.add("unnamed")
				return text("unreachable"), nil
			})
	}
	return srv, cnt, release
}

// transports are the ways the tests reach the server; each connects a
// client registered as "srv" to a fresh server, closed when the test ends.
var transports = []struct {
	name    string
	connect func(t *testing.T) *reinmcp.Client
}{
	{"memory", func(t *testing.T) *reinmcp.Client {
		ctx := testCtx(t)
		srv, _, release := newTestServer()
		st, ct := sdk.NewInMemoryTransports()
		ss, err := srv.Connect(ctx, st, nil)
		if err != nil {
			t.Fatalf("server Connect: %v", err)
		}
		t.Cleanup(func() { ss.Close() })
		t.Cleanup(release)
		c, err := reinmcp.Connect(ctx, "srv", ct)
		if err != nil {
			t.Fatalf("Connect: %v", err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}},
	{"http", func(t *testing.T) *reinmcp.Client {
		srv, _, release := newTestServer()
		hs := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
		t.Cleanup(hs.Close)
		t.Cleanup(release)
		c, err := reinmcp.Open(testCtx(t), "srv", hs.URL+"/mcp")
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}},
	{"stdio", func(t *testing.T) *reinmcp.Client {
		c, err := reinmcp.Open(testCtx(t), "srv", serverCommand(t, "serve"), serverEnvOpt)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(func() {
			if err := c.Close(); err != nil {
				t.Errorf("Close: the stdio server did not exit cleanly: %v", err)
			}
		})
		return c
	}},
}

// serverEnvOpt passes the test server's mode and GORACE to the child, which
// gets only reinmcp.BaseEnv otherwise.
var serverEnvOpt = reinmcp.WithEnv(serverEnv, "GORACE")

// serverCommand is the command line that runs this test binary as the
// test server in mode (see serverEnv). The path is quoted, so that a space
// in it stays in one argument.
func serverCommand(t *testing.T, mode string) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("os.Executable: %v", err)
	}
	t.Setenv(serverEnv, mode)
	// Under -race the child would sleep a second at exit (GORACE
	// atexit_sleep_ms), which Close waits for.
	t.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	return `"` + exe + `" -test.run=^$`
}

// eachTransport runs f once per transport, against a fresh server.
func eachTransport(t *testing.T, f func(t *testing.T, c *reinmcp.Client)) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) { f(t, tr.connect(t)) })
	}
}

func args(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatalf("struct %v: %v", m, err)
	}
	return s
}

func call(tool string, a *structpb.Struct) tools.Call {
	return tools.Call{RunID: "run_1", CallID: "call_1", Tool: tool, Args: a}
}

// counts asks the server how often its tools ran (the calls tool).
func counts(t *testing.T, c *reinmcp.Client) map[string]any {
	t.Helper()
	out, err := c.Read(testCtx(t), call("srv.calls", nil))
	if err != nil {
		t.Fatalf("Read srv.calls: %v", err)
	}
	m := out.GetStructValue().AsMap()
	if m == nil {
		t.Fatalf("srv.calls returned %v, want its structured content (an object)", out)
	}
	return m
}

// tryCount is how often the server ran tool, -1 if it cannot say; for
// goroutines other than the test's.
func tryCount(ctx context.Context, c *reinmcp.Client, tool string) int {
	out, err := c.Read(ctx, call("srv.calls", nil))
	if err != nil {
		return -1
	}
	n, _ := out.GetStructValue().AsMap()[tool].(float64)
	return int(n)
}

// count is how often the server ran tool.
func count(t *testing.T, c *reinmcp.Client, tool string) int {
	t.Helper()
	n, _ := counts(t, c)[tool].(float64)
	return int(n)
}
