package mcp_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/reinhq/rein/internal/secret"
	"github.com/reinhq/rein/internal/tools"
	reinmcp "github.com/reinhq/rein/internal/tools/mcp"
)

func TestList(t *testing.T) {
	eachTransport(t, func(t *testing.T, c *reinmcp.Client) {
		specs, err := c.List(testCtx(t))
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		got := map[string]tools.Spec{}
		for _, s := range specs {
			got[s.Name] = s
		}
		for _, name := range []string{"srv.lookup", "srv.delete", "srv.fail", "srv.hang", "srv.calls"} {
			if _, ok := got[name]; !ok {
				t.Errorf("List has no %s; it has %v", name, keys(got))
			}
		}
		if len(got) != 5 {
			t.Errorf("List has %d tools %v, want the 5 that rein can name", len(got), keys(got))
		}
		// The server's name is unprefixed nowhere: a bare "lookup" is no tool.
		if _, ok := got["lookup"]; ok {
			t.Errorf("List has an unprefixed lookup")
		}
		lookup := got["srv.lookup"]
		if !strings.HasPrefix(lookup.Description, "Look a record up.") || !strings.Contains(lookup.Description, "readOnlyHint=true") {
			t.Errorf("srv.lookup description = %q, want the server's text and its hints", lookup.Description)
		}
		props := lookup.InputSchema.GetFields()["properties"].GetStructValue().GetFields()
		if lookup.InputSchema.GetFields()["type"].GetStringValue() != "object" || props["key"].GetStructValue().GetFields()["type"].GetStringValue() != "string" {
			t.Errorf("srv.lookup schema = %v, want the server's object schema with a string key", lookup.InputSchema)
		}

		// The tools rein cannot name are skipped, and say so.
		skipped := c.Skipped()
		names := map[string]string{}
		for _, s := range skipped {
			names[s.Tool] = s.Reason
		}
		long := strings.Repeat("x", 61)
		if len(skipped) != 2 || names["bad name"] == "" || names[long] == "" {
			t.Errorf("Skipped = %+v, want \"bad name\" and the 61-letter name, with reasons", skipped)
		}
		if !strings.Contains(names[long], "srv."+long) {
			t.Errorf("the reason %q does not name the rein name that is too long", names[long])
		}
	})
}

func keys(m map[string]tools.Spec) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A skipped tool is logged for the operator, and a listing that skips none
// logs nothing.
func TestSkippedToolsAreLogged(t *testing.T) {
	for _, tc := range []struct {
		name      string
		badTool   bool
		wantInLog bool
	}{
		{"a tool rein cannot name", true, true},
		{"all tools nameable", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			srv := sdk.NewServer(&sdk.Implementation{Name: "s", Version: "v1"}, nil)
			noop := func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
				return &sdk.CallToolResult{}, nil
			}
			srv.AddTool(&sdk.Tool{Name: "ok", InputSchema: objectSchema}, noop)
			if tc.badTool {
				srv.AddTool(&sdk.Tool{Name: "has/slash", InputSchema: objectSchema}, noop)
			}
			st, ct := sdk.NewInMemoryTransports()
			ss, err := srv.Connect(ctx, st, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer ss.Close()
			var log bytes.Buffer
			var mu sync.Mutex
			c, err := reinmcp.Connect(ctx, "srv", ct, reinmcp.WithLogger(slog.New(slog.NewTextHandler(&lockedWriter{&mu, &log}, nil))))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			mu.Lock()
			text := log.String()
			mu.Unlock()
			if got := strings.Contains(text, "has/slash"); got != tc.wantInLog {
				t.Errorf("log names has/slash: %v, want %v; log:\n%s", got, tc.wantInLog, text)
			}
		})
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestRead(t *testing.T) {
	eachTransport(t, func(t *testing.T, c *reinmcp.Client) {
		ctx := testCtx(t)
		out, err := c.Read(ctx, call("srv.lookup", args(t, map[string]any{"key": "k1"})))
		if err != nil {
			t.Fatalf("Read srv.lookup: %v", err)
		}
		if got, want := out.GetStringValue(), "record k1\nstatus: active"; got != want {
			t.Errorf("Read srv.lookup = %q, want the text blocks joined: %q", got, want)
		}
		// Structured content is preferred to the text.
		if got := counts(t, c)["lookup"]; got != 1.0 {
			t.Errorf("lookup ran %v times, want 1 (from the structured content of srv.calls)", got)
		}
	})
}

// isError=true is a Go error whose text is the tool's, and the twin: a
// result without it is no error (TestRead).
func TestReadToolError(t *testing.T) {
	eachTransport(t, func(t *testing.T, c *reinmcp.Client) {
		_, err := c.Read(testCtx(t), call("srv.fail", args(t, map[string]any{"key": "k9"})))
		var te *reinmcp.ToolError
		if !errors.As(err, &te) {
			t.Fatalf("Read srv.fail: err = %v (%T), want a *ToolError", err, err)
		}
		if got, want := err.Error(), "no record named k9; list the records first"; got != want {
			t.Errorf("error text = %q, want the tool's text %q", got, want)
		}
		if count(t, c, "fail") != 1 {
			t.Errorf("fail ran %d times, want 1", count(t, c, "fail"))
		}
	})
}

// A tool outside the server's prefix, or one the server does not have (or
// that rein skipped), is tools.ErrNoTool, and nothing is called.
func TestUnknownTool(t *testing.T) {
	eachTransport(t, func(t *testing.T, c *reinmcp.Client) {
		ctx := testCtx(t)
		for _, name := range []string{"lookup", "other.lookup", "srv.nope", "srv.bad name"} {
			for op, f := range map[string]func() error{
				"Read":    func() error { _, err := c.Read(ctx, call(name, nil)); return err },
				"Propose": func() error { _, err := c.Propose(ctx, call(name, nil)); return err },
				"Commit":  func() error { _, err := c.Commit(ctx, call(name, nil), "op_1"); return err },
			} {
				if err := f(); !errors.Is(err, tools.ErrNoTool) {
					t.Errorf("%s %q: err = %v, want ErrNoTool", op, name, err)
				}
			}
		}
		if n := count(t, c, "unnamed"); n != 0 {
			t.Errorf("a skipped tool ran %d times", n)
		}
	})
}

// A tool the server adds after the listing is found (the listing is
// refreshed on a miss); the twin is TestUnknownTool.
func TestToolAddedLater(t *testing.T) {
	ctx := testCtx(t)
	srv, _, _ := newTestServer()
	st, ct := sdk.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	c, err := reinmcp.Connect(ctx, "srv", ct)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	srv.AddTool(&sdk.Tool{Name: "later", InputSchema: objectSchema}, func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "here"}}}, nil
	})
	out, err := c.Read(ctx, call("srv.later", nil))
	if err != nil || out.GetStringValue() != "here" {
		t.Fatalf("Read srv.later = %v, %v; want \"here\"", out, err)
	}
	specs, err := c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range specs {
		found = found || s.Name == "srv.later"
	}
	if !found {
		t.Errorf("List after the server added srv.later lacks it")
	}
}

// Propose describes the call and the server's hints, and calls nothing.
func TestProposeCallsNothing(t *testing.T) {
	eachTransport(t, func(t *testing.T, c *reinmcp.Client) {
		preview, err := c.Propose(testCtx(t), call("srv.delete", args(t, map[string]any{"key": "k1"})))
		if err != nil {
			t.Fatalf("Propose: %v", err)
		}
		p := preview.GetStructValue().AsMap()
		want := map[string]any{
			"server":    "srv",
			"tool":      "delete",
			"arguments": map[string]any{"key": "k1"},
			"note":      reinmcp.NoDryRunNote,
			"hints":     map[string]any{"readOnlyHint": true, "idempotentHint": false, "destructiveHint": false},
		}
		if !equalJSON(p, want) {
			t.Errorf("preview = %v, want %v", p, want)
		}
		if n := count(t, c, "delete"); n != 0 {
			t.Errorf("Propose ran delete %d times, want 0", n)
		}
		// The twin: Commit does call it.
		if _, err := c.Commit(testCtx(t), call("srv.delete", args(t, map[string]any{"key": "k1"})), "op_twin"); err != nil {
			t.Fatalf("Commit: %v", err)
		}
		if n := count(t, c, "delete"); n != 1 {
			t.Errorf("Commit ran delete %d times, want 1", n)
		}
	})
}

func equalJSON(a, b any) bool {
	va, err1 := structpb.NewValue(a)
	vb, err2 := structpb.NewValue(b)
	return err1 == nil && err2 == nil && va.String() == vb.String()
}

// Two commits with one key call the tool once and return one receipt; a
// second key calls it again; the key reaches the server in _meta.
func TestCommitOncePerKey(t *testing.T) {
	eachTransport(t, func(t *testing.T, c *reinmcp.Client) {
		ctx := testCtx(t)
		del := call("srv.delete", args(t, map[string]any{"key": "k1"}))
		first, err := c.Commit(ctx, del, "op_A")
		if err != nil {
			t.Fatalf("Commit: %v", err)
		}
		again, err := c.Commit(ctx, del, "op_A")
		if err != nil {
			t.Fatalf("second Commit: %v", err)
		}
		if first.String() != again.String() {
			t.Errorf("the second receipt %v differs from the first %v", again, first)
		}
		want := map[string]any{"operation_id": "op_A", "output": "deleted k1"}
		if !equalJSON(first.GetStructValue().AsMap(), want) {
			t.Errorf("receipt = %v, want %v", first, want)
		}
		got := counts(t, c)
		if got["delete"] != 1.0 || !equalJSON(got["operations"], []any{"op_A"}) {
			t.Errorf("after two commits of op_A the server has %v, want delete 1 with operation op_A", got)
		}
		// The twin: another key is another call.
		if _, err := c.Commit(ctx, del, "op_B"); err != nil {
			t.Fatalf("Commit op_B: %v", err)
		}
		if got := counts(t, c); got["delete"] != 2.0 || !equalJSON(got["operations"], []any{"op_A", "op_B"}) {
			t.Errorf("after op_B the server has %v, want delete 2 with operations op_A, op_B", got)
		}
	})
}

// Concurrent commits of one key make one call and share its receipt.
func TestConcurrentCommitsOneCall(t *testing.T) {
	c := transports[0].connect(t)
	ctx := testCtx(t)
	del := call("srv.delete", args(t, map[string]any{"key": "k1"}))
	var wg sync.WaitGroup
	receipts := make([]string, 8)
	for i := range receipts {
		wg.Go(func() {
			r, err := c.Commit(ctx, del, "op_same")
			if err != nil {
				t.Errorf("Commit %d: %v", i, err)
				return
			}
			receipts[i] = r.String()
		})
	}
	wg.Wait()
	for i, r := range receipts {
		if r != receipts[0] {
			t.Errorf("receipt %d = %s, want %s", i, r, receipts[0])
		}
	}
	if n := count(t, c, "delete"); n != 1 {
		t.Errorf("8 concurrent commits of one key ran delete %d times, want 1", n)
	}
}

// A commit that failed is sent again by the next Commit with its key (a
// person approved it again); the twin of TestCommitOncePerKey.
func TestCommitAfterFailureSendsAgain(t *testing.T) {
	c := transports[0].connect(t)
	ctx := testCtx(t)
	fail := call("srv.fail", args(t, map[string]any{"key": "k1"}))
	for i := range 2 {
		if _, err := c.Commit(ctx, fail, "op_F"); err == nil {
			t.Fatalf("Commit %d of srv.fail succeeded", i)
		}
	}
	if n := count(t, c, "fail"); n != 2 {
		t.Errorf("two commits of a failing call ran it %d times, want 2", n)
	}
}

// A commit whose approved preview describes another call sends nothing;
// the preview Propose made commits.
func TestCommitChecksPreview(t *testing.T) {
	c := transports[0].connect(t)
	ctx := testCtx(t)
	del := call("srv.delete", args(t, map[string]any{"key": "k1"}))
	preview, err := c.Propose(ctx, del)
	if err != nil {
		t.Fatal(err)
	}
	other := call("srv.delete", args(t, map[string]any{"key": "k2"}))
	other.Preview = preview
	if _, err := c.Commit(ctx, other, "op_1"); err == nil || !strings.Contains(err.Error(), "arguments") {
		t.Errorf("Commit of k2 under k1's preview: err = %v, want a refusal naming the arguments", err)
	}
	if n := count(t, c, "delete"); n != 0 {
		t.Fatalf("a refused commit ran delete %d times", n)
	}
	del.Preview = preview
	if _, err := c.Commit(ctx, del, "op_2"); err != nil {
		t.Fatalf("Commit under its own preview: %v", err)
	}
	if n := count(t, c, "delete"); n != 1 {
		t.Errorf("delete ran %d times, want 1", n)
	}
}

// A cancelled context cuts a hanging call, here and on the server, and the
// session goes on. The twin (a context that stays live gets the answer) is
// TestRead.
func TestCancelCutsHangingCall(t *testing.T) {
	eachTransport(t, func(t *testing.T, c *reinmcp.Client) {
		ctx := testCtx(t)
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		// Cancel once the server says the call is running.
		go func() {
			defer cancel()
			waitFor(t, ctx, func() bool { return tryCount(ctx, c, "hang") == 1 })
		}()
		start := time.Now()
		_, err := c.Read(cctx, call("srv.hang", nil))
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Read srv.hang: err = %v, want context.Canceled", err)
		}
		if ctx.Err() != nil {
			t.Fatalf("the call returned only when the test's own deadline passed (%v)", time.Since(start))
		}
		waitFor(t, ctx, func() bool { return count(t, c, "hang_cancelled") == 1 })
		if _, err := c.Read(ctx, call("srv.lookup", args(t, map[string]any{"key": "k"}))); err != nil {
			t.Errorf("Read after a cancelled call: %v", err)
		}
	})
}

// A deadline cuts a hanging call too.
func TestDeadlineCutsHangingCall(t *testing.T) {
	c := transports[0].connect(t)
	dctx, cancel := context.WithTimeout(testCtx(t), 50*time.Millisecond)
	defer cancel()
	_, err := c.Read(dctx, call("srv.hang", nil))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Read srv.hang: err = %v, want context.DeadlineExceeded", err)
	}
}

// waitFor polls cond until it holds, failing the test when ctx ends first.
func waitFor(t *testing.T, ctx context.Context, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Errorf("condition not met before the deadline")
			return
		case <-tick.C:
		}
	}
}

// A target that cannot be reached is an error that names it and says what to
// do; the good targets are the transports above.
func TestOpenBadTarget(t *testing.T) {
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL + "/mcp"
	closed.Close()
	notMCP := httptest.NewServer(http.NotFoundHandler())
	defer notMCP.Close()

	for _, tc := range []struct {
		name, target string
		setup        func(t *testing.T) string
		want         []string
	}{
		{name: "no such command", target: "no-such-mcp-server-xyz --stdio",
			want: []string{`"srv"`, `command "no-such-mcp-server-xyz --stdio"`, "PATH"}},
		{name: "empty", target: "", want: []string{`"srv"`, "no command given"}},
		{name: "unclosed quote", target: `server "arg`, want: []string{`command "server \"arg"`, "unclosed"}},
		{name: "unsupported scheme", target: "ftp://example.com/mcp", want: []string{`"ftp"`, "http"}},
		{name: "URL without host", target: "http:///mcp", want: []string{`URL "http:///mcp"`, "no host"}},
		{name: "nothing listening", target: closedURL, want: []string{closedURL, "handshake", "server is up"}},
		{name: "not an MCP endpoint", target: notMCP.URL + "/nope", want: []string{notMCP.URL + "/nope", "handshake", "/mcp"}},
		{name: "server that exits", setup: func(t *testing.T) string { return serverCommand(t, "crash") },
			want: []string{"handshake", "stdio", "missing configuration file /etc/testserver.conf"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := tc.target
			if tc.setup != nil {
				target = tc.setup(t)
			}
			c, err := reinmcp.Open(testCtx(t), "srv", target, serverEnvOpt)
			if err == nil {
				c.Close()
				t.Fatalf("Open(%q) succeeded", target)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Open(%q) error %q lacks %q", target, err, w)
				}
			}
		})
	}
}

// A registration name must leave the first '.' of a rein name to it alone.
func TestOpenBadName(t *testing.T) {
	for _, name := range []string{"", "a.b", "has space", strings.Repeat("n", 63)} {
		_, ct := sdk.NewInMemoryTransports()
		if c, err := reinmcp.Connect(testCtx(t), name, ct); err == nil {
			c.Close()
			t.Errorf("Connect with name %q succeeded", name)
		} else if !strings.Contains(err.Error(), "name") {
			t.Errorf("Connect with name %q: %v, want an error about the name", name, err)
		}
	}
	// The twin: names the transports use, and the longest.
	for _, name := range []string{"srv", "my_files-2", strings.Repeat("n", 62)} {
		ctx := testCtx(t)
		srv, _, _ := newTestServer()
		st, ct := sdk.NewInMemoryTransports()
		ss, err := srv.Connect(ctx, st, nil)
		if err != nil {
			t.Fatal(err)
		}
		c, err := reinmcp.Connect(ctx, name, ct)
		if err != nil {
			t.Errorf("Connect with name %q: %v", name, err)
		} else {
			c.Close()
		}
		ss.Close()
	}
}

// leakedKey is a secret that the "leak" test server prints, a line of
// 71 bytes at a time: the 4 KiB stderr tail starts 16 bytes into it.
const leakedKey = "sk-leak-0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRST"

// TestStderrTailCutsNoSecret: an error that quotes a server's stderr
// holds no piece of a key the tail cut at its start, so the redactor the
// engine passes a tool's errors through, which finds only whole values,
// leaves none; the whole lines it quotes are redacted.
func TestStderrTailCutsNoSecret(t *testing.T) {
	_, err := reinmcp.Open(testCtx(t), "srv", serverCommand(t, "leak"), serverEnvOpt)
	if err == nil {
		t.Fatal("Open of a server that exits succeeded")
	}
	msg := secret.New(map[string]string{"LEAK_KEY": leakedKey}).Error(err).Error()
	for i := 0; i+8 <= len(leakedKey); i++ {
		if strings.Contains(msg, leakedKey[i:i+8]) {
			t.Fatalf("the error holds %q of the key: %s", leakedKey[i:i+8], msg)
		}
	}
	if !strings.Contains(msg, "token=[secret LEAK_KEY]") {
		t.Errorf("the error does not quote the stderr's whole lines, redacted: %s", msg)
	}
}

// TestStdioServerGetsNoSecrets: a stdio server gets BaseEnv, not rein's
// whole environment, so a model key there never reaches it; WithEnv passes
// a variable on.
func TestStdioServerGetsNoSecrets(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-not-for-tool-servers")
	for _, tc := range []struct {
		opts []reinmcp.Option
		want string
	}{
		{[]reinmcp.Option{serverEnvOpt}, "set=false"},
		{[]reinmcp.Option{serverEnvOpt, reinmcp.WithEnv("OPENAI_API_KEY")}, "set=true"},
	} {
		_, err := reinmcp.Open(testCtx(t), "srv", serverCommand(t, "env"), tc.opts...)
		if err == nil || !strings.Contains(err.Error(), "OPENAI_API_KEY "+tc.want) {
			t.Fatalf("err = %v, want the server's stderr to say %s", err, tc.want)
		}
	}
}
