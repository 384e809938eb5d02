package engine

// Shared test doubles and helpers of the package's tests. Every test runs
// the real engine over a real bbolt store in t.TempDir(); the doubles are the
// scripted model, the fixture tools, and thin wrappers that count or observe
// calls. No test sleeps: they wait on Engine.Wait or on channels the wrappers
// signal, under testCtx's bound.

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/store/bolt"
	"github.com/reinhq/rein/internal/tools"
)

const (
	statusRunning       = reinv1.RunStatus_RUN_STATUS_RUNNING
	statusNeedsInput    = reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT
	statusNeedsApproval = reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL
	statusCompleted     = reinv1.RunStatus_RUN_STATUS_COMPLETED
	statusExhausted     = reinv1.RunStatus_RUN_STATUS_BUDGET_EXHAUSTED
	statusFailed        = reinv1.RunStatus_RUN_STATUS_FAILED
	statusCancelled     = reinv1.RunStatus_RUN_STATUS_CANCELLED

	tierRead  = reinv1.ToolTier_TOOL_TIER_READ
	tierWrite = reinv1.ToolTier_TOOL_TIER_WRITE
	tierAsk   = reinv1.ToolTier_TOOL_TIER_ASK_HUMAN
)

// t0 is the injected clock's first reading. It lies in the future so that a
// run deadline computed from it is also in the future for the real clock
// that context.WithDeadline uses (see TestDeadlineFollowsInjectedClock).
var t0 = time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)

// testCtx bounds anything a test waits on, so a hang fails instead of
// stalling the suite.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// testClock is an injected clock: each reading returns the current instant,
// then moves it on by step.
type testClock struct {
	mu    sync.Mutex
	now   time.Time
	step  time.Duration
	reads int
}

func newClock(start time.Time, step time.Duration) *testClock {
	return &testClock{now: start, step: step}
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now
	c.now = c.now.Add(c.step)
	c.reads++
	return now
}

func (c *testClock) Reads() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads
}

// openStore opens a bbolt store in a temporary directory, closed at the end
// of the test.
func openStore(t *testing.T) (*bolt.Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rein.db")
	return reopenStore(t, path), path
}

func reopenStore(t *testing.T, path string) *bolt.Store {
	t.Helper()
	s, err := bolt.Open(path, bolt.Options{})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil && !errors.Is(err, store.ErrClosed) {
			t.Errorf("close store: %v", err)
		}
	})
	return s
}

// newEngine starts an engine over cfg; cfg.Clock defaults to a test clock at
// t0 advancing 1s a reading, and cfg.Tools to searchTools, which provides
// the tools testContract grants (an engine refuses a grant it has no tool
// for; a test of an engine without tools gives noTools{}). The engine is
// closed at the end of the test.
func newEngine(t *testing.T, cfg Config) *Engine {
	t.Helper()
	if cfg.Clock == nil {
		cfg.Clock = newClock(t0, time.Second).Now
	}
	if cfg.Tools == nil {
		cfg.Tools = searchTools(t)
	}
	e := New(cfg)
	t.Cleanup(e.Close)
	return e
}

// setup is a bbolt store and an engine over it.
func setup(t *testing.T, cfg Config) (*Engine, *bolt.Store) {
	t.Helper()
	s, _ := openStore(t)
	if cfg.Store == nil {
		cfg.Store = s
	}
	return newEngine(t, cfg), s
}

func testContract(script ...*reinv1.ScriptedReply) *reinv1.TaskContract {
	return &reinv1.TaskContract{
		Goal: "find the invoice total",
		Tools: []*reinv1.ToolGrant{
			{Name: "search", Tier: tierRead},
			{Name: "send_email", Tier: tierWrite},
			{Name: "ask_manager", Tier: tierAsk},
		},
		Model: &reinv1.ModelSpec{Provider: "script", Name: "test", Script: script},
	}
}

func mustStruct(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatalf("struct %v: %v", m, err)
	}
	return s
}

func mustValue(t *testing.T, v any) *structpb.Value {
	t.Helper()
	pv, err := structpb.NewValue(v)
	if err != nil {
		t.Fatalf("value %v: %v", v, err)
	}
	return pv
}

func usage(in, out uint64) *reinv1.Usage { return &reinv1.Usage{InputTokens: in, OutputTokens: out} }

func decisionReply(d *reinv1.Decision) *reinv1.ScriptedReply {
	return &reinv1.ScriptedReply{Reply: &reinv1.ScriptedReply_Decision{Decision: d}, Usage: usage(10, 5)}
}

func callDecision(tool, callID string, args *structpb.Struct) *reinv1.Decision {
	return &reinv1.Decision{Action: &reinv1.Decision_ToolCall{ToolCall: &reinv1.ToolCall{Tool: tool, CallId: callID, Arguments: args}}}
}

func callReply(tool, callID string, args *structpb.Struct) *reinv1.ScriptedReply {
	return decisionReply(callDecision(tool, callID, args))
}

func finalReply(text string) *reinv1.ScriptedReply {
	return decisionReply(&reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: text}}})
}

func askReply(question string) *reinv1.ScriptedReply {
	return decisionReply(&reinv1.Decision{Action: &reinv1.Decision_AskHuman{AskHuman: &reinv1.AskHuman{Question: question}}})
}

func rawReply(raw string) *reinv1.ScriptedReply {
	return &reinv1.ScriptedReply{Reply: &reinv1.ScriptedReply_Raw{Raw: raw}, Usage: usage(10, 5)}
}

func errorReply(msg string) *reinv1.ScriptedReply {
	return &reinv1.ScriptedReply{Reply: &reinv1.ScriptedReply_Error{Error: msg}}
}

func repeatReply(r *reinv1.ScriptedReply, n int) []*reinv1.ScriptedReply {
	out := make([]*reinv1.ScriptedReply, n)
	for i := range out {
		out[i] = r
	}
	return out
}

// startRun starts c with a request ID unique to the test.
func startRun(t *testing.T, e *Engine, c *reinv1.TaskContract) runstate.State {
	t.Helper()
	st, created, err := e.Start(testCtx(t), StartRequest{RequestID: "req-" + t.Name(), Contract: c, Principal: "alice", Tenant: "acme"})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if !created {
		t.Fatalf("Start: created = false for a new request id")
	}
	return st
}

func waitRun(t *testing.T, e *Engine, runID string) {
	t.Helper()
	if err := e.Wait(testCtx(t), runID); err != nil {
		t.Fatalf("Wait(%s): %v", runID, err)
	}
}

// runToRest starts c and waits until its driver exits (the run paused or
// ended), then returns its stored state and log, checked by checkLog.
func runToRest(t *testing.T, e *Engine, s Store, c *reinv1.TaskContract) (runstate.State, []*reinv1.Event) {
	t.Helper()
	st := startRun(t, e, c)
	waitRun(t, e, st.RunID)
	return stored(t, s, st.RunID)
}

// stored loads a run and its whole log, and checks the log (checkLog).
func stored(t *testing.T, s Store, runID string) (runstate.State, []*reinv1.Event) {
	t.Helper()
	ctx := testCtx(t)
	for {
		st, err := s.Load(ctx, runID)
		if err != nil {
			t.Fatalf("Load(%s): %v", runID, err)
		}
		evs, err := s.Events(ctx, runID, 0, 1<<20)
		if err != nil {
			t.Fatalf("Events(%s): %v", runID, err)
		}
		// A run still driven may have moved between the two reads: read
		// again until they are of one version (or the test's time is up,
		// and the check below says how they differ).
		if uint64(len(evs)) != st.Version && ctx.Err() == nil {
			continue
		}
		checkLog(t, st, evs)
		return st, evs
	}
}

// checkLog validates a stored history: one run, sequences 1..n with no gap,
// and the fold of the whole log from nothing equals the stored snapshot.
func checkLog(t *testing.T, st runstate.State, evs []*reinv1.Event) {
	t.Helper()
	for i, ev := range evs {
		if ev.GetRunId() != st.RunID {
			t.Errorf("event %d belongs to run %q, want %q", i, ev.GetRunId(), st.RunID)
		}
		if ev.GetSequence() != uint64(i)+1 {
			t.Errorf("event %d has sequence %d, want %d (gap-free from 1)", i, ev.GetSequence(), i+1)
		}
		if ev.GetRecordedAt() == nil {
			t.Errorf("event %d (%s) has no recorded_at", ev.GetSequence(), runstate.PayloadName(ev))
		}
	}
	folded, err := runstate.ApplyAll(runstate.State{}, evs)
	if err != nil {
		t.Fatalf("the fold rejects the stored log: %v\n%s", err, dump(evs))
	}
	if !proto.Equal(folded.Proto(true), st.Proto(true)) {
		t.Errorf("fold of the log differs from the stored snapshot:\nfold:     %v\nsnapshot: %v", folded.Proto(false), st.Proto(false))
	}
}

// dump is a log, one event a line, for failure messages.
func dump(evs []*reinv1.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		fmt.Fprintf(&b, "  %d %s %s", ev.GetSequence(), ev.GetActor(), runstate.PayloadName(ev))
		if sc := ev.GetStatusChanged(); sc != nil {
			fmt.Fprintf(&b, " %s→%s (%s) %s", runstate.StatusName(sc.GetFrom()), runstate.StatusName(sc.GetTo()), sc.GetReason(), sc.GetError())
		}
		b.WriteString("\n")
	}
	return b.String()
}

func payloads(evs []*reinv1.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = runstate.PayloadName(ev)
	}
	return out
}

// ofType keeps the events whose payload is name, such as "model_requested".
func ofType(evs []*reinv1.Event, name string) []*reinv1.Event {
	var out []*reinv1.Event
	for _, ev := range evs {
		if runstate.PayloadName(ev) == name {
			out = append(out, ev)
		}
	}
	return out
}

// wantStatus fails unless the run is in want, showing the log otherwise.
func wantStatus(t *testing.T, st runstate.State, evs []*reinv1.Event, want reinv1.RunStatus, reason string) {
	t.Helper()
	if st.Status != want || st.StatusReason != reason {
		t.Fatalf("run is %s (%s, last_error %q), want %s (%s); log:\n%s",
			runstate.StatusName(st.Status), st.StatusReason, st.LastError, runstate.StatusName(want), reason, dump(evs))
	}
}

// wantCount fails unless the log has n events of payload name.
func wantCount(t *testing.T, evs []*reinv1.Event, name string, n int) {
	t.Helper()
	if got := len(ofType(evs, name)); got != n {
		t.Errorf("%d %s events, want %d; log:\n%s", got, name, n, dump(evs))
	}
}

// countingTools counts the calls that reach an executor.
type countingTools struct {
	inner                    tools.Executor
	reads, proposes, commits atomic.Int32
	// beforeRead, if set, runs at the start of each Read.
	beforeRead func(ctx context.Context, c tools.Call)
}

var _ tools.Executor = (*countingTools)(nil)

func (c *countingTools) List(ctx context.Context) ([]tools.Spec, error) { return c.inner.List(ctx) }

func (c *countingTools) Read(ctx context.Context, call tools.Call) (*structpb.Value, error) {
	c.reads.Add(1)
	if c.beforeRead != nil {
		c.beforeRead(ctx, call)
	}
	return c.inner.Read(ctx, call)
}

func (c *countingTools) Propose(ctx context.Context, call tools.Call) (*structpb.Value, error) {
	c.proposes.Add(1)
	return c.inner.Propose(ctx, call)
}

func (c *countingTools) Commit(ctx context.Context, call tools.Call, op string) (*structpb.Value, error) {
	c.commits.Add(1)
	return c.inner.Commit(ctx, call, op)
}

func (c *countingTools) wantCalls(t *testing.T, reads, proposes, commits int32) {
	t.Helper()
	if r, p, m := c.reads.Load(), c.proposes.Load(), c.commits.Load(); r != reads || p != proposes || m != commits {
		t.Errorf("executor saw %d reads, %d proposes, %d commits; want %d, %d, %d", r, p, m, reads, proposes, commits)
	}
}

// searchTools is a fixture executor whose read tool "search" returns out,
// and whose write tool "send_email" proposes a preview.
func searchTools(t *testing.T, out ...tools.FixtureResult) *countingTools {
	t.Helper()
	if len(out) == 0 {
		out = []tools.FixtureResult{{Output: mustValue(t, "invoice 42: total 1,234.00 EUR")}}
	}
	return &countingTools{inner: tools.NewFixtures(map[string][]tools.FixtureResult{
		"search":     out,
		"send_email": {{Preview: mustValue(t, map[string]any{"to": "bob@example.com", "subject": "total"}), Receipt: mustValue(t, "sent")}},
	})}
}

// modelSpy observes the calls to the models an engine builds: it records
// each request and lets a test hook the start and the end of each call.
type modelSpy struct {
	mu    sync.Mutex
	reqs  []model.Request
	calls atomic.Int32
	// before runs when a call starts; after when it returns, with the call's
	// context and error.
	before func(ctx context.Context, req *model.Request)
	after  func(ctx context.Context, err error)
}

// models is a Config.Models that builds the model with build (model.New
// when nil) and wraps it in the spy.
func (s *modelSpy) models(build func(*reinv1.ModelSpec) (model.Model, error)) func(*reinv1.ModelSpec) (model.Model, error) {
	if build == nil {
		build = model.New
	}
	return func(spec *reinv1.ModelSpec) (model.Model, error) {
		m, err := build(spec)
		if err != nil {
			return nil, err
		}
		return &spiedModel{inner: m, spy: s}, nil
	}
}

func (s *modelSpy) requests() []model.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]model.Request(nil), s.reqs...)
}

type spiedModel struct {
	inner model.Model
	spy   *modelSpy
}

func (m *spiedModel) Next(ctx context.Context, req *model.Request) (*model.Reply, error) {
	m.spy.calls.Add(1)
	cp := *req
	cp.Transcript = append([]model.Turn(nil), req.Transcript...)
	m.spy.mu.Lock()
	m.spy.reqs = append(m.spy.reqs, cp)
	m.spy.mu.Unlock()
	if m.spy.before != nil {
		m.spy.before(ctx, req)
	}
	reply, err := m.inner.Next(ctx, req)
	if m.spy.after != nil {
		m.spy.after(ctx, err)
	}
	return reply, err
}

// CountTokens passes through to a model that counts, so wrapping the
// scripted model does not change the token budget's arithmetic.
func (m *spiedModel) CountTokens(ctx context.Context, req *model.Request) (uint64, error) {
	if tc, ok := m.inner.(model.TokenCounter); ok {
		return tc.CountTokens(ctx, req)
	}
	return 0, errors.New("the wrapped model cannot count tokens")
}

// lastObservation is the last turn of a request's transcript, which must be
// an observation.
func lastObservation(t *testing.T, req model.Request) *model.Observation {
	t.Helper()
	if len(req.Transcript) == 0 {
		t.Fatalf("call %d has an empty transcript", req.Step)
	}
	o := req.Transcript[len(req.Transcript)-1].Observation
	if o == nil {
		t.Fatalf("call %d: the last turn is a decision, want an observation", req.Step)
	}
	return o
}
