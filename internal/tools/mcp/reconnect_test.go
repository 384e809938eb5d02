package mcp_test

// A stdio server that dies, through the client and through the harness: it
// is started again at the next call, with backoff, and a call made while it
// is down is an observation (a read) or an unknown outcome (a write), never
// a failed run.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/engine"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store/mem"
	"github.com/reinhq/rein/internal/tools"
	reinmcp "github.com/reinhq/rein/internal/tools/mcp"
)

// The mortal server's files, named in its environment: each start appends
// its pid to spawnsEnv's file, and while downEnv's file exists it exits at
// start, before the handshake.
const (
	spawnsEnv = "REIN_MCP_TEST_SPAWNS"
	downEnv   = "REIN_MCP_TEST_DOWN"
)

// serveMortal is the test server with two more tools: pid (its process ID)
// and exit (it exits in the middle of the call).
func serveMortal() {
	f, err := os.OpenFile(os.Getenv(spawnsEnv), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testserver:", err)
		os.Exit(1)
	}
	fmt.Fprintln(f, os.Getpid())
	f.Close()
	if _, err := os.Stat(os.Getenv(downEnv)); err == nil {
		fmt.Fprintln(os.Stderr, "testserver: down for maintenance")
		os.Exit(3)
	}
	srv, _, _ := newTestServer()
	empty := json.RawMessage(`{"type":"object"}`)
	srv.AddTool(&sdk.Tool{Name: "pid", Description: "The server's process ID.", InputSchema: empty},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: strconv.Itoa(os.Getpid())}}}, nil
		})
	srv.AddTool(&sdk.Tool{Name: "exit", Description: "Exits mid-call; with stay_down, it does not start again.", InputSchema: empty},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			var a struct {
				StayDown bool `json:"stay_down"`
			}
			json.Unmarshal(req.Params.Arguments, &a) //nolint:errcheck // no arguments is no stay_down
			if a.StayDown {
				os.WriteFile(os.Getenv(downEnv), nil, 0o600) //nolint:errcheck // the test sees it start again
			}
			os.Exit(1)
			return nil, nil
		})
	if err := srv.Run(context.Background(), &sdk.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "testserver:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// mortal is a Client of a mortal server, and the server's files.
type mortal struct {
	c            *reinmcp.Client
	spawns, down string
	// ended gets a value each time the client logs that the session ended.
	ended chan struct{}
}

func openMortal(t *testing.T) *mortal {
	t.Helper()
	dir := t.TempDir()
	m := &mortal{spawns: filepath.Join(dir, "spawns"), down: filepath.Join(dir, "down"), ended: make(chan struct{}, 100)}
	t.Setenv(spawnsEnv, m.spawns)
	t.Setenv(downEnv, m.down)
	cmd := serverCommand(t, "mortal")
	c, err := reinmcp.Open(testCtx(t), "srv", cmd, reinmcp.WithEnv(serverEnv, "GORACE", spawnsEnv, downEnv),
		reinmcp.WithLogger(slog.New(&endedHandler{m.ended})))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	m.c = c
	return m
}

// endedHandler signals the client's "session ended" log lines.
type endedHandler struct{ ended chan struct{} }

func (h *endedHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *endedHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *endedHandler) WithGroup(string) slog.Handler            { return h }
func (h *endedHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, "MCP server session ended") {
		select {
		case h.ended <- struct{}{}:
		default:
		}
	}
	return nil
}

// kill kills the server process pid and waits until the client has seen
// its session end.
func (m *mortal) kill(t *testing.T, pid int) {
	t.Helper()
	p, err := os.FindProcess(pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(); err != nil {
		t.Fatalf("kill %d: %v", pid, err)
	}
	select {
	case <-m.ended:
	case <-testCtx(t).Done():
		t.Fatal("the client never noticed that its server was killed")
	}
}

func (m *mortal) setDown(t *testing.T, down bool) {
	t.Helper()
	if !down {
		if err := os.Remove(m.down); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := os.WriteFile(m.down, nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

// spawnCount is how many times the server was started.
func (m *mortal) spawnCount(t *testing.T) int {
	t.Helper()
	data, err := os.ReadFile(m.spawns)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(data), "\n")
}

// waitBack polls the server until a read answers.
func (m *mortal) waitBack(t *testing.T) {
	t.Helper()
	ctx := testCtx(t)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := m.c.Read(ctx, call("srv.lookup", args(t, map[string]any{"key": "k0"}))); err == nil {
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatal("the server never came back")
		}
	}
}

func returned(t *testing.T, evs []*reinv1.Event, callID string) *reinv1.ToolReturned {
	t.Helper()
	for _, ev := range ofType(evs, "tool_returned") {
		if tr := ev.GetToolReturned(); tr.GetCallId() == callID {
			return tr
		}
	}
	t.Fatalf("no tool_returned for %s; log: %v", callID, names(evs))
	return nil
}

var (
	readTier  = reinv1.ToolTier_TOOL_TIER_READ
	writeTier = reinv1.ToolTier_TOOL_TIER_WRITE
)

// A stdio server killed between two calls of one run is started again at
// the second, which works; rein was not restarted.
func TestKilledServerRestartsAtNextCall(t *testing.T) {
	m := openMortal(t)
	e, s := newEngine(t, m.c)
	key := args(t, map[string]any{"key": "k1"})
	st, evs := runToRest(t, e, s, contract(
		[]*reinv1.ToolGrant{{Name: "srv.pid", Tier: readTier}, {Name: "srv.lookup", Tier: readTier},
			{Name: "ask", Tier: reinv1.ToolTier_TOOL_TIER_ASK_HUMAN}},
		callReply("srv.pid", "c1", nil),
		callReply("ask", "c2", args(t, map[string]any{"question": "go on?"})),
		callReply("srv.lookup", "c3", key),
		callReply("srv.pid", "c4", nil),
		finalReply("done"),
	))
	if st.Status != reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT {
		t.Fatalf("run is %s (%s), want needs_input; log: %v", runstate.StatusName(st.Status), st.LastError, names(evs))
	}
	first, err := strconv.Atoi(returned(t, evs, "c1").GetOutput().GetStringValue())
	if err != nil {
		t.Fatalf("srv.pid: %v", err)
	}
	m.kill(t, first)

	if _, err := e.ProvideInput(testCtx(t), st.RunID, "yes", "alice"); err != nil {
		t.Fatalf("ProvideInput: %v", err)
	}
	st, evs = rest(t, e, s, st.RunID)
	if st.Status != reinv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Fatalf("run is %s (%s), want completed; log: %v", runstate.StatusName(st.Status), st.LastError, names(evs))
	}
	if tr := returned(t, evs, "c3"); tr.GetError() != "" || tr.GetOutput().GetStringValue() != "record k1\nstatus: active" {
		t.Errorf("the call after the kill returned %v, want the record", tr)
	}
	if second := returned(t, evs, "c4").GetOutput().GetStringValue(); second == strconv.Itoa(first) || second == "" {
		t.Errorf("the server's pid after the kill is %q, want a new process (the first was %d)", second, first)
	}
	if n := m.spawnCount(t); n != 2 {
		t.Errorf("the server was started %d times, want 2", n)
	}
}

// A read whose server dies in the middle is an observation that says the
// server is unreachable and the call may be tried again; the run goes on,
// and the next call works.
func TestReadDuringOutageIsObservation(t *testing.T) {
	m := openMortal(t)
	e, s := newEngine(t, m.c)
	st, evs := runToRest(t, e, s, contract(
		[]*reinv1.ToolGrant{{Name: "srv.exit", Tier: readTier}, {Name: "srv.lookup", Tier: readTier}},
		callReply("srv.exit", "c1", nil),
		callReply("srv.lookup", "c2", args(t, map[string]any{"key": "k1"})),
		finalReply("done"),
	))
	if st.Status != reinv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Fatalf("run is %s (%s), want completed; log: %v", runstate.StatusName(st.Status), st.LastError, names(evs))
	}
	msg := returned(t, evs, "c1").GetError()
	for _, want := range []string{`MCP server "srv"`, "reconnects at the next call", "may be tried again"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the observation of the call the server died in is %q, want it to say %q", msg, want)
		}
	}
	if tr := returned(t, evs, "c2"); tr.GetError() != "" || tr.GetOutput().GetStringValue() != "record k1\nstatus: active" {
		t.Errorf("the next call returned %v, want the record from the restarted server", tr)
	}
}

// The twin: a server that never comes back leaves the run going, each call
// an observation, until the model gives up; the run is not failed or hung.
func TestServerThatStaysDownLeavesObservations(t *testing.T) {
	m := openMortal(t)
	m.setDown(t, true)
	e, s := newEngine(t, m.c)
	key := args(t, map[string]any{"key": "k1"})
	st, evs := runToRest(t, e, s, contract(
		[]*reinv1.ToolGrant{{Name: "srv.exit", Tier: readTier}, {Name: "srv.lookup", Tier: readTier}},
		callReply("srv.exit", "c1", nil),
		callReply("srv.lookup", "c2", key),
		callReply("srv.lookup", "c3", key),
		finalReply("the records server is down"),
	))
	if st.Status != reinv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Fatalf("run is %s (%s), want completed; log: %v", runstate.StatusName(st.Status), st.LastError, names(evs))
	}
	for _, id := range []string{"c2", "c3"} {
		msg := returned(t, evs, id).GetError()
		if !strings.Contains(msg, `MCP server "srv" is unreachable`) || !strings.Contains(msg, "may be tried again") {
			t.Errorf("call %s while the server is down: %q, want an observation that it is unreachable and may be tried again", id, msg)
		}
	}
}

// A server that dies at once is restarted with backoff: over three seconds
// of calls every 20ms it is started a few times, not once per call; every
// call fails as unreachable. Once it can start again, it is back.
func TestBackoffBoundsRestarts(t *testing.T) {
	m := openMortal(t)
	m.setDown(t, true)
	ctx := testCtx(t)
	if _, err := m.c.Read(ctx, call("srv.exit", nil)); !errors.Is(err, reinmcp.ErrUnreachable) {
		t.Fatalf("Read srv.exit: %v, want ErrUnreachable", err)
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	calls := 0
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); calls++ {
		_, err := m.c.Read(ctx, call("srv.lookup", args(t, map[string]any{"key": "k1"})))
		if !errors.Is(err, reinmcp.ErrUnreachable) {
			t.Fatalf("Read while the server dies at start: %v, want ErrUnreachable", err)
		}
		<-tick.C
	}
	// 1 + the attempts at about 0, 0.1, 0.3, 0.7, 1.5 and 3.1s.
	n := m.spawnCount(t)
	t.Logf("%d calls, %d starts", calls, n)
	if n < 3 || n > 15 {
		t.Errorf("over %d calls the server was started %d times, want a few (3 to 15): restarted, with backoff", calls, n)
	}
	m.setDown(t, false)
	m.waitBack(t)
}

// A write whose commit finds the server down is left to its lookup, which
// an MCP server has not: the outcome is unknown, never refused or applied,
// and the run waits for a person. Once the server is back, approving again
// sends it, with the same key, once.
func TestWriteDuringOutageSettlesWhenBack(t *testing.T) {
	m := openMortal(t)
	e, s := newEngine(t, m.c)
	st, evs := runToRest(t, e, s, contract(
		[]*reinv1.ToolGrant{{Name: "srv.pid", Tier: readTier}, {Name: "srv.delete", Tier: writeTier}},
		callReply("srv.pid", "c1", nil),
		callReply("srv.delete", "c2", args(t, map[string]any{"key": "k1"})),
		finalReply("deleted"),
	))
	if st.Status != reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL {
		t.Fatalf("run is %s (%s), want needs_approval; log: %v", runstate.StatusName(st.Status), st.LastError, names(evs))
	}
	pid, err := strconv.Atoi(returned(t, evs, "c1").GetOutput().GetStringValue())
	if err != nil {
		t.Fatalf("srv.pid: %v", err)
	}
	m.setDown(t, true)
	m.kill(t, pid)

	ctx := testCtx(t)
	approve := func(st runstate.State) runstate.State {
		t.Helper()
		p := st.Pending.GetProposal()
		if _, err := e.DecideApproval(ctx, engine.Verdict{RunID: st.RunID, ProposalID: p.GetProposalId(),
			ProposalHash: p.GetHash(), Approve: true, Principal: "bob"}); err != nil {
			t.Fatalf("DecideApproval: %v", err)
		}
		st, _ = rest(t, e, s, st.RunID)
		return st
	}
	st = approve(st)
	_, evs = rest(t, e, s, st.RunID)
	if st.Status != reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL {
		t.Fatalf("after a commit with the server down the run is %s (%s), want needs_approval; log: %v", runstate.StatusName(st.Status), st.LastError, names(evs))
	}
	if n := len(ofType(evs, "write_refused")) + len(ofType(evs, "write_committed")); n != 0 {
		t.Fatalf("a commit with the server down was reported refused or applied; log: %v", names(evs))
	}
	unknown := ofType(evs, "write_outcome_unknown")
	if len(unknown) != 1 || !strings.Contains(unknown[0].GetWriteOutcomeUnknown().GetError(), "is unreachable") {
		t.Fatalf("write_outcome_unknown events %v, want one saying the server is unreachable", unknown)
	}

	m.setDown(t, false)
	m.waitBack(t)
	st = approve(st)
	_, evs = rest(t, e, s, st.RunID)
	if st.Status != reinv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Fatalf("after the server came back the run is %s (%s), want completed; log: %v", runstate.StatusName(st.Status), st.LastError, names(evs))
	}
	committed := ofType(evs, "write_committed")
	if len(committed) != 1 {
		t.Fatalf("%d write_committed events, want 1; log: %v", len(committed), names(evs))
	}
	op := committed[0].GetWriteCommitted().GetOperationId()
	if got := counts(t, m.c); got["delete"] != 1.0 || !equalJSON(got["operations"], []any{op}) {
		t.Errorf("the server has %v, want delete once with operation %s", got, op)
	}
}

// An HTTP server that restarted (and so lost the session) is given a new
// session: the call that finds the session gone is ErrUnreachable, and the
// next one works.
func TestHTTPSessionLostIsRedialed(t *testing.T) {
	var current atomic.Pointer[http.Handler]
	start := func() {
		srv, _, _ := newTestServer()
		h := http.Handler(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
		current.Store(&h)
	}
	start()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*current.Load()).ServeHTTP(w, r) }))
	t.Cleanup(hs.Close)
	ctx := testCtx(t)
	c, err := reinmcp.Open(ctx, "srv", hs.URL+"/mcp")
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	read := func() error {
		_, err := c.Read(ctx, call("srv.lookup", args(t, map[string]any{"key": "k1"})))
		return err
	}
	if err := read(); err != nil {
		t.Fatalf("Read before the restart: %v", err)
	}

	start() // a new server process: it knows no session
	if err := read(); err != nil && !errors.Is(err, reinmcp.ErrUnreachable) {
		t.Fatalf("Read that finds the session gone: %v, want ErrUnreachable", err)
	}
	for i := range 2 {
		if err := read(); err != nil {
			t.Fatalf("Read %d after the restart: %v, want a new session that answers", i+1, err)
		}
	}
}

// Beside other executors, a server that went down after a reconnection
// (its listing due again) is still the one its tools go to: the call is
// an unreachable observation, not an unknown tool.
func TestDownServerKeepsItsToolsInMulti(t *testing.T) {
	m := openMortal(t)
	other := tools.NewFixtures(map[string][]tools.FixtureResult{"other.get": {{Output: structpb.NewStringValue("x")}}})
	s := mem.New()
	e := engine.New(engine.Config{Store: s, Tools: tools.Join(m.c, other)})
	t.Cleanup(e.Close)
	st, evs := runToRest(t, e, s, contract(
		[]*reinv1.ToolGrant{{Name: "srv.exit", Tier: readTier}, {Name: "srv.lookup", Tier: readTier}},
		callReply("srv.exit", "c1", nil),
		callReply("srv.exit", "c2", args(t, map[string]any{"stay_down": true})),
		callReply("srv.lookup", "c3", args(t, map[string]any{"key": "k1"})),
		finalReply("the records server is down"),
	))
	if st.Status != reinv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Fatalf("run is %s (%s), want completed; log: %v", runstate.StatusName(st.Status), st.LastError, names(evs))
	}
	// The first, the one c2 ran on, and maybe one that stayed down (unless
	// c3 came within the backoff).
	if n := m.spawnCount(t); n != 2 && n != 3 {
		t.Errorf("the server was started %d times, want 2 or 3", n)
	}
	msg := returned(t, evs, "c3").GetError()
	if !strings.Contains(msg, `MCP server "srv" is unreachable`) || strings.Contains(msg, tools.ErrNoTool.Error()) {
		t.Errorf("the call to the down server's tool: %q, want it unreachable, not an unknown tool", msg)
	}
}
