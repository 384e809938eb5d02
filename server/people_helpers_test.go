package server

// Tests of people in the loop (docs/design.md §2, §7, §10): approvals, rejections,
// input, cancels of paused runs, and the timers of paused runs (proposal
// expiry, the run's deadline), through the generated client against a real
// node on a real bbolt file, with the scripted model and fixture tools.
//
// Every refusal is checked to change no stored byte: the run as GetRun
// shows it and its number of events are the same before and after. Nothing
// sleeps: the tests wait on watch streams, or poll with a deadline.
//
// A test that shows a bug not fixed yet calls knownPeopleBug when the bug
// shows, which skips it unless REIN_KNOWN_BUGS=1.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/tools"
)

const (
	stRunning       = reinv1.RunStatus_RUN_STATUS_RUNNING
	stNeedsInput    = reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT
	stNeedsApproval = reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL
	stCompleted     = reinv1.RunStatus_RUN_STATUS_COMPLETED
	stExhausted     = reinv1.RunStatus_RUN_STATUS_BUDGET_EXHAUSTED
	stDenied        = reinv1.RunStatus_RUN_STATUS_DENIED
	stExpired       = reinv1.RunStatus_RUN_STATUS_EXPIRED
	stCancelled     = reinv1.RunStatus_RUN_STATUS_CANCELLED

	approveVerdict = reinv1.ApprovalVerdict_APPROVAL_VERDICT_APPROVE
	rejectVerdict  = reinv1.ApprovalVerdict_APPROVAL_VERDICT_REJECT
)

// refundReceipt is what the fixture write tool returns when it commits.
var refundReceipt = structpb.NewStringValue("refund rf_77 issued")

// writeTools is the fixture executor with a read tool, "lookup", and a write
// tool, "refund". It counts commits per operation ID, notes whether the
// write_dispatched naming that ID was already in the store when Commit was
// called, can be told to fail the next commits, and to hold a commit until
// the test lets it go. It has no Lookup: see lookupTools.
type writeTools struct {
	inner tools.Executor
	// failures is how many of the next commits fail.
	failures atomic.Int32
	// gate, when set, holds each commit until the test lets it go.
	gate atomic.Pointer[commitGate]

	mu      sync.Mutex
	store   store.Store
	commits map[string]int
	durable map[string]bool
}

var _ tools.Executor = (*writeTools)(nil)

func newWriteTools(t *testing.T) *writeTools {
	t.Helper()
	preview, err := structpb.NewValue(map[string]any{"account": "acct 42", "amount": 10, "currency": "EUR"})
	if err != nil {
		t.Fatal(err)
	}
	return &writeTools{
		inner: tools.NewFixtures(map[string][]tools.FixtureResult{
			"lookup": {{Output: structpb.NewStringValue("found")}},
			"refund": {{Preview: preview, Receipt: refundReceipt}},
		}),
		commits: map[string]int{},
		durable: map[string]bool{},
	}
}

// watchStore makes Commit check st for the write_dispatched first.
func (w *writeTools) watchStore(st store.Store) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.store = st
}

func (w *writeTools) List(ctx context.Context) ([]tools.Spec, error) { return w.inner.List(ctx) }

func (w *writeTools) Read(ctx context.Context, c tools.Call) (*structpb.Value, error) {
	return w.inner.Read(ctx, c)
}

func (w *writeTools) Propose(ctx context.Context, c tools.Call) (*structpb.Value, error) {
	return w.inner.Propose(ctx, c)
}

func (w *writeTools) Commit(ctx context.Context, c tools.Call, operationID string) (*structpb.Value, error) {
	w.mu.Lock()
	st := w.store
	w.mu.Unlock()
	durable := false
	if st != nil {
		evs, err := st.Events(ctx, c.RunID, 0, 100000)
		if err != nil {
			return nil, fmt.Errorf("fixture: read the run's log: %w", err)
		}
		for _, ev := range evs {
			if ev.GetWriteDispatched().GetOperationId() == operationID {
				durable = true
			}
		}
	}
	w.mu.Lock()
	w.commits[operationID]++
	if w.commits[operationID] == 1 {
		w.durable[operationID] = durable
	}
	w.mu.Unlock()
	if g := w.gate.Load(); g != nil {
		g.entered <- operationID
		<-g.release
	}
	if w.failures.Add(-1) >= 0 {
		return nil, errors.New("refund service: connection reset")
	}
	return w.inner.Commit(ctx, c, operationID)
}

// commitCounts is a copy of the commits per operation ID.
func (w *writeTools) commitCounts() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]int{}
	for k, v := range w.commits {
		out[k] = v
	}
	return out
}

// wantCommits fails unless the only commits were those of ops, one per
// mention, each sent after its write_dispatched was durable.
func (w *writeTools) wantCommits(t *testing.T, ops ...string) {
	t.Helper()
	got := w.commitCounts()
	want := map[string]int{}
	for _, op := range ops {
		want[op]++
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("commits per operation ID %v, want %v", got, want)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, op := range ops {
		if !w.durable[op] {
			t.Errorf("operation %s was committed before its write_dispatched was in the store", op)
		}
	}
}

// commitGate holds commits: a commit sends its operation ID on entered,
// then waits for release to be closed.
type commitGate struct {
	entered chan string
	release chan struct{}
}

// lookupTools is writeTools with the optional Lookup operation.
type lookupTools struct {
	*writeTools
	lookup  func(op string) (*structpb.Value, bool, error)
	lookups atomic.Int32
}

var _ tools.Looker = (*lookupTools)(nil)

func (l *lookupTools) Lookup(_ context.Context, _ tools.Call, operationID string) (*structpb.Value, bool, error) {
	l.lookups.Add(1)
	return l.lookup(operationID)
}

// modelLog records the requests of every model a node builds, per run.
type modelLog struct {
	mu   sync.Mutex
	reqs map[string][]model.Request
}

func (l *modelLog) models(spec *reinv1.ModelSpec) (model.Model, error) {
	m, err := model.New(spec)
	if err != nil {
		return nil, err
	}
	return &loggedModel{inner: m, log: l}, nil
}

// requests is the calls made for a run, oldest first.
func (l *modelLog) requests(runID string) []model.Request {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]model.Request(nil), l.reqs[runID]...)
}

type loggedModel struct {
	inner model.Model
	log   *modelLog
}

func (m *loggedModel) Next(ctx context.Context, req *model.Request) (*model.Reply, error) {
	cp := *req
	cp.Transcript = append([]model.Turn(nil), req.Transcript...)
	m.log.mu.Lock()
	if m.log.reqs == nil {
		m.log.reqs = map[string][]model.Request{}
	}
	m.log.reqs[req.RunID] = append(m.log.reqs[req.RunID], cp)
	m.log.mu.Unlock()
	return m.inner.Next(ctx, req)
}

// CountTokens passes through, so the wrapper does not change the budget.
func (m *loggedModel) CountTokens(ctx context.Context, req *model.Request) (uint64, error) {
	if tc, ok := m.inner.(model.TokenCounter); ok {
		return tc.CountTokens(ctx, req)
	}
	return 0, errors.New("the wrapped model cannot count tokens")
}

// sawObservation reports whether the last call of a run was shown an
// observation from source whose text contains text.
func (l *modelLog) sawObservation(runID, source, text string) bool {
	reqs := l.requests(runID)
	if len(reqs) == 0 {
		return false
	}
	for _, turn := range reqs[len(reqs)-1].Transcript {
		if o := turn.Observation; o != nil && o.Source == source && strings.Contains(o.Text, text) {
			return true
		}
	}
	return false
}

// offsetClock is the wall clock moved by an offset a test sets: it jumps
// forward without waiting.
type offsetClock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *offsetClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

func (c *offsetClock) set(off time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.off = off
}

// peopleServer is a node on 127.0.0.1:0 with the write tools and a model log.
// opts are the credentials of the helper's own reads (none without a tokens
// file: the caller is the local admin).
type peopleServer struct {
	*tcpServer
	tools  *writeTools
	lookup *lookupTools // nil when the tools cannot look writes up
	models *modelLog
	opts   []grpc.CallOption
}

func newPeopleServer(t *testing.T, cfg Config, opts ...grpc.CallOption) *peopleServer {
	t.Helper()
	return openPeopleServer(t, cfg, nil, opts...)
}

// openPeopleServer is newPeopleServer whose tools can look writes up with
// lookup, when it is not nil.
func openPeopleServer(t *testing.T, cfg Config, lookup func(op string) (*structpb.Value, bool, error), opts ...grpc.CallOption) *peopleServer {
	t.Helper()
	w := newWriteTools(t)
	m := &modelLog{}
	cfg.Tools, cfg.Models = w, m.models
	var lt *lookupTools
	if lookup != nil {
		lt = &lookupTools{writeTools: w, lookup: lookup}
		cfg.Tools = lt
	}
	s := newTCPServer(t, cfg)
	w.watchStore(s.node.Store)
	return &peopleServer{tcpServer: s, tools: w, lookup: lt, models: m, opts: opts}
}

// writeContract is contract() with the write tool "refund" granted too.
func writeContract(replies ...*reinv1.ScriptedReply) *reinv1.TaskContract {
	c := contract(nil, replies...)
	c.Tools = append(c.Tools, &reinv1.ToolGrant{Name: "refund", Tier: reinv1.ToolTier_TOOL_TIER_WRITE})
	return c
}

func withTTL(c *reinv1.TaskContract, ttl time.Duration) *reinv1.TaskContract {
	if c.Approval == nil {
		c.Approval = &reinv1.ApprovalPolicy{}
	}
	c.Approval.ProposalTtl = durationpb.New(ttl)
	return c
}

func withTimeout(c *reinv1.TaskContract, d time.Duration) *reinv1.TaskContract {
	c.Budget = &reinv1.Budget{Timeout: durationpb.New(d)}
	return c
}

// refundCall is the model's decision to call the write tool.
func refundCall() *reinv1.ScriptedReply {
	args, _ := structpb.NewStruct(map[string]any{"account": "acct 42", "amount": 10})
	return decision(&reinv1.Decision{Action: &reinv1.Decision_ToolCall{ToolCall: &reinv1.ToolCall{Tool: "refund", CallId: "w1", Arguments: args}}})
}

// begin starts a run as the caller of opts (the server's own when none) and
// waits for its first pause or end, which must be want, and for its driver
// to exit (so a paused run's timer is armed). It returns the run as stored.
func (s *peopleServer) begin(t *testing.T, c *reinv1.TaskContract, want reinv1.RunStatus, opts ...grpc.CallOption) *reinv1.Run {
	t.Helper()
	if len(opts) == 0 {
		opts = s.opts
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := s.client.StartRun(ctx, &reinv1.StartRunRequest{RequestId: t.Name() + "/" + fmt.Sprint(time.Now().UnixNano()), Contract: c}, opts...)
	if err != nil {
		t.Fatalf("StartRun: %v", err)
	}
	runID := resp.GetRun().GetRunId()
	stream, err := s.client.WatchRun(ctx, &reinv1.WatchRunRequest{RunId: runID}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatalf("watch of %s ended before the run paused or ended: %v", runID, err)
		}
		if sc := ev.GetEvent().GetStatusChanged(); sc != nil && sc.GetTo() != stRunning {
			break
		}
	}
	if err := s.node.Engine.Wait(ctx, runID); err != nil {
		t.Fatal(err)
	}
	run := s.get(t, runID)
	if run.GetStatus() != want {
		t.Fatalf("run %s is %v (%s), want %v; log:\n%s", runID, run.GetStatus(), run.GetStatusReason(), want, logText(s.events(t, runID)))
	}
	if want == stNeedsApproval && run.GetPending().GetProposal() == nil {
		t.Fatalf("run %s needs approval but shows no proposal", runID)
	}
	return run
}

func (s *peopleServer) get(t *testing.T, runID string) *reinv1.Run {
	t.Helper()
	resp, err := s.client.GetRun(context.Background(), &reinv1.GetRunRequest{RunId: runID}, s.opts...)
	if err != nil {
		t.Fatalf("GetRun(%s): %v", runID, err)
	}
	return resp.GetRun()
}

// events is a run's whole log, through ListEvents.
func (s *peopleServer) events(t *testing.T, runID string) []*reinv1.Event {
	t.Helper()
	resp, err := s.client.ListEvents(context.Background(), &reinv1.ListEventsRequest{RunId: runID, PageSize: 10000}, s.opts...)
	if err != nil {
		t.Fatalf("ListEvents(%s): %v", runID, err)
	}
	if resp.GetNextPageToken() != "" {
		t.Fatalf("run %s has more than 10000 events", runID)
	}
	return resp.GetEvents()
}

// runMark is what a refusal must leave alone: the run as GetRun shows it and
// the number of its events.
type runMark struct {
	run    *reinv1.Run
	events int
}

func (s *peopleServer) mark(t *testing.T, runID string) runMark {
	t.Helper()
	return runMark{run: s.get(t, runID), events: len(s.events(t, runID))}
}

// unchanged fails unless the run is as it was at m.
func (s *peopleServer) unchanged(t *testing.T, what string, m runMark) {
	t.Helper()
	now := s.mark(t, m.run.GetRunId())
	if now.run.GetVersion() != m.run.GetVersion() || now.events != m.events || !proto.Equal(now.run, m.run) {
		t.Errorf("%s changed the run: version %d → %d, %d → %d events, status %v → %v; log:\n%s", what,
			m.run.GetVersion(), now.run.GetVersion(), m.events, now.events, m.run.GetStatus(), now.run.GetStatus(),
			logText(s.events(t, m.run.GetRunId())))
	}
}

// watchToEnd streams a run's events after `after` until the stream ends,
// which must be OK (the run ended), and checks them in order and gap-free.
func (s *peopleServer) watchToEnd(t *testing.T, runID string, after uint64) []*reinv1.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := s.client.WatchRun(ctx, &reinv1.WatchRunRequest{RunId: runID, AfterSequence: after}, s.opts...)
	if err != nil {
		t.Fatal(err)
	}
	var evs []*reinv1.Event
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("watch of %s after %d ended with %v, want OK at the run's end; streamed:\n%s", runID, after, err, logText(evs))
		}
		ev := resp.GetEvent()
		if want := after + uint64(len(evs)) + 1; ev.GetSequence() != want {
			t.Fatalf("watch of %s streamed sequence %d, want %d", runID, ev.GetSequence(), want)
		}
		evs = append(evs, ev)
	}
	if len(evs) == 0 {
		t.Fatalf("watch of %s after %d ended OK with no event", runID, after)
	}
	if sc := evs[len(evs)-1].GetStatusChanged(); sc == nil || !runstate.Terminal(sc.GetTo()) {
		t.Fatalf("watch of %s ended OK without a terminal status_changed last:\n%s", runID, logText(evs))
	}
	return evs
}

// decide sends a decision on a run's pending proposal.
func (s *peopleServer) decide(run *reinv1.Run, verdict reinv1.ApprovalVerdict, reason string, opts ...grpc.CallOption) (*reinv1.DecideApprovalResponse, error) {
	p := run.GetPending().GetProposal()
	if len(opts) == 0 {
		opts = s.opts
	}
	return s.client.DecideApproval(context.Background(), &reinv1.DecideApprovalRequest{
		RunId: run.GetRunId(), ProposalId: p.GetProposalId(), ProposalHash: p.GetHash(), Verdict: verdict, Reason: reason,
	}, opts...)
}

// logText is a log, one event a line, for failure messages.
func logText(evs []*reinv1.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		fmt.Fprintf(&b, "  %d %s %s", ev.GetSequence(), ev.GetActor(), runstate.PayloadName(ev))
		if sc := ev.GetStatusChanged(); sc != nil {
			fmt.Fprintf(&b, " %s→%s (%s)", runstate.StatusName(sc.GetFrom()), runstate.StatusName(sc.GetTo()), sc.GetReason())
		}
		b.WriteString("\n")
	}
	return b.String()
}

func payloadNames(evs []*reinv1.Event) string {
	names := make([]string, len(evs))
	for i, ev := range evs {
		names[i] = runstate.PayloadName(ev)
	}
	return strings.Join(names, ",")
}

func countPayload(evs []*reinv1.Event, name string) int {
	n := 0
	for _, ev := range evs {
		if runstate.PayloadName(ev) == name {
			n++
		}
	}
	return n
}

// wantChange fails unless ev is the status change from → to for reason.
func wantChange(t *testing.T, ev *reinv1.Event, from, to reinv1.RunStatus, reason string) {
	t.Helper()
	sc := ev.GetStatusChanged()
	if sc == nil || sc.GetFrom() != from || sc.GetTo() != to || sc.GetReason() != reason {
		t.Errorf("event %d is %s %v, want status_changed %s→%s (%s)", ev.GetSequence(), runstate.PayloadName(ev), sc,
			runstate.StatusName(from), runstate.StatusName(to), reason)
	}
}
