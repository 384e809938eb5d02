package server

// Tests of people in the loop (DESIGN §2, §7, §10): approvals, rejections,
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
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/harness"
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

// TestApproveCommitsThenRunGoesOn: an approval stores approval_decided and
// write_dispatched before the commit is sent, commits once with that
// operation ID, and the run goes on only after the receipt is stored; the
// model's next call sees the receipt. TestApprovalRefusals and
// TestCommitFailureLeavesOutcomeUnknown are its failure twins.
func TestApproveCommitsThenRunGoesOn(t *testing.T) {
	s := newPeopleServer(t, Config{})
	run := s.begin(t, writeContract(refundCall(), final("refunded")), stNeedsApproval)
	p := run.GetPending().GetProposal()
	if p.GetTool() != "refund" || p.GetCallId() != "w1" || p.GetHash() != harness.ProposalHash(p) || p.GetRunVersion() == 0 || p.GetExpiresAt() == nil {
		t.Fatalf("pending proposal %v: want the refund call, its hash, version and expiry", p)
	}
	if n := len(s.tools.commitCounts()); n != 0 {
		t.Fatalf("%d commits before any approval", n)
	}

	resp, err := s.decide(run, approveVerdict, "looks right")
	if err != nil {
		t.Fatalf("DecideApproval: %v", err)
	}
	if got := resp.GetRun().GetStatus(); got != stRunning && got != stCompleted {
		t.Fatalf("DecideApproval answered a %v run, want running (or later)", got)
	}
	if resp.GetRun().GetPending() != nil {
		t.Errorf("the approved run still shows a pending action: %v", resp.GetRun().GetPending())
	}

	evs := s.watchToEnd(t, run.GetRunId(), run.GetVersion())
	if len(evs) < 4 {
		t.Fatalf("after the approval: %s, want approval_decided, write_dispatched, write_committed, status_changed first", payloadNames(evs))
	}
	const head = "approval_decided,write_dispatched,write_committed,status_changed"
	if got := payloadNames(evs[:4]); got != head {
		t.Fatalf("after the approval: %s, want %s first; log:\n%s", payloadNames(evs), head, logText(evs))
	}
	decided, dispatched, committed := evs[0].GetApprovalDecided(), evs[1].GetWriteDispatched(), evs[2].GetWriteCommitted()
	if !decided.GetApproved() || decided.GetProposalId() != p.GetProposalId() || decided.GetReason() != "looks right" || decided.GetEndRun() {
		t.Errorf("approval_decided %v, want approved for %s with the reason", decided, p.GetProposalId())
	}
	if evs[0].GetActor() != "principal:"+LocalPrincipal.ID {
		t.Errorf("approval_decided by %q, want the approver principal:%s", evs[0].GetActor(), LocalPrincipal.ID)
	}
	op := dispatched.GetOperationId()
	if op == "" || dispatched.GetProposalId() != p.GetProposalId() {
		t.Fatalf("write_dispatched %v, want an operation ID for %s", dispatched, p.GetProposalId())
	}
	if committed.GetOperationId() != op || committed.GetProposalId() != p.GetProposalId() || !proto.Equal(committed.GetReceipt(), refundReceipt) {
		t.Errorf("write_committed %v, want operation %s with receipt %v", committed, op, refundReceipt)
	}
	if evs[2].GetActor() != "tool:refund" {
		t.Errorf("write_committed by %q, want tool:refund", evs[2].GetActor())
	}
	wantChange(t, evs[3], stNeedsApproval, stRunning, "write_committed")
	last := evs[len(evs)-1]
	wantChange(t, last, stRunning, stCompleted, "final_answer")
	if n := countPayload(evs, "model_requested"); n != 1 {
		t.Errorf("%d model calls after the approval, want 1; log:\n%s", n, logText(evs))
	}
	s.tools.wantCommits(t, op)
	if !s.models.sawObservation(run.GetRunId(), "harness", refundReceipt.GetStringValue()) {
		t.Errorf("the model's call after the write was not shown its receipt: %+v", s.models.requests(run.GetRunId()))
	}
	if got := s.get(t, run.GetRunId()); got.GetStatus() != stCompleted || got.GetResult().GetText() != "refunded" {
		t.Errorf("run is %v with result %v, want completed with the final answer", got.GetStatus(), got.GetResult())
	}
}

// TestApprovalRefusals: requests that must be refused, each changing no
// stored byte, then their twin, the right request, which succeeds; then the
// same decision again, on the finished run, refused.
func TestApprovalRefusals(t *testing.T) {
	s := newPeopleServer(t, Config{})
	run := s.begin(t, writeContract(refundCall(), final("refunded")), stNeedsApproval)
	p := run.GetPending().GetProposal()
	ctx := context.Background()
	decide := func(mut func(*reinv1.DecideApprovalRequest)) func() error {
		return func() error {
			req := &reinv1.DecideApprovalRequest{RunId: run.GetRunId(), ProposalId: p.GetProposalId(), ProposalHash: p.GetHash(), Verdict: approveVerdict}
			mut(req)
			_, err := s.client.DecideApproval(ctx, req)
			return err
		}
	}
	input := func(runID, text string) func() error {
		return func() error {
			_, err := s.client.ProvideInput(ctx, &reinv1.ProvideInputRequest{RunId: runID, Text: text})
			return err
		}
	}
	for _, tc := range []struct {
		name string
		call func() error
		want codes.Code
	}{
		{"wrong hash", decide(func(r *reinv1.DecideApprovalRequest) { r.ProposalHash = strings.Repeat("0", 64) }), codes.FailedPrecondition},
		{"hash of another proposal", decide(func(r *reinv1.DecideApprovalRequest) {
			r.ProposalHash = harness.ProposalHash(&reinv1.Proposal{Tool: "refund"})
		}), codes.FailedPrecondition},
		{"reject with a wrong hash", decide(func(r *reinv1.DecideApprovalRequest) {
			r.ProposalHash, r.Verdict, r.EndRun = "abc", rejectVerdict, true
		}), codes.FailedPrecondition},
		{"unknown proposal", decide(func(r *reinv1.DecideApprovalRequest) { r.ProposalId = "prop_01J0000000000000000UNKNOWN" }), codes.FailedPrecondition},
		{"unspecified verdict", decide(func(r *reinv1.DecideApprovalRequest) { r.Verdict = reinv1.ApprovalVerdict_APPROVAL_VERDICT_UNSPECIFIED }), codes.InvalidArgument},
		{"undefined verdict", decide(func(r *reinv1.DecideApprovalRequest) { r.Verdict = 7 }), codes.InvalidArgument},
		{"no proposal id", decide(func(r *reinv1.DecideApprovalRequest) { r.ProposalId = "" }), codes.InvalidArgument},
		{"no hash", decide(func(r *reinv1.DecideApprovalRequest) { r.ProposalHash = "" }), codes.InvalidArgument},
		{"missing run", decide(func(r *reinv1.DecideApprovalRequest) { r.RunId = "run_01J0000000000000000MISSING" }), codes.NotFound},
		{"input to a run waiting for approval", input(run.GetRunId(), "the blue one"), codes.FailedPrecondition},
		{"input without text", input(run.GetRunId(), ""), codes.InvalidArgument},
		{"input to a missing run", input("run_01J0000000000000000MISSING", "x"), codes.NotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := s.mark(t, run.GetRunId())
			wantCode(t, tc.call(), tc.want)
			s.unchanged(t, tc.name, before)
		})
	}
	if n := len(s.tools.commitCounts()); n != 0 {
		t.Fatalf("refused decisions committed %d writes", n)
	}

	// The twin: the right decision succeeds, and the run ends.
	if _, err := s.decide(run, approveVerdict, ""); err != nil {
		t.Fatalf("the right approval: %v", err)
	}
	evs := s.watchToEnd(t, run.GetRunId(), run.GetVersion())
	wantChange(t, evs[len(evs)-1], stRunning, stCompleted, "final_answer")
	s.tools.wantCommits(t, evs[1].GetWriteDispatched().GetOperationId())

	// The same decision again, on the finished run: refused, no second commit.
	before := s.mark(t, run.GetRunId())
	for _, verdict := range []reinv1.ApprovalVerdict{approveVerdict, rejectVerdict} {
		_, err := s.decide(run, verdict, "again")
		wantCode(t, err, codes.FailedPrecondition)
		s.unchanged(t, "a second decision", before)
	}
	wantCode(t, input(run.GetRunId(), "late")(), codes.FailedPrecondition)
	s.unchanged(t, "input to a completed run", before)
	if got := s.tools.commitCounts(); len(got) != 1 {
		t.Errorf("commits %v after a second approval, want the first only", got)
	}
}

// TestApprovalExpiredByClock: a decision after the proposal's expires_at on
// the engine's clock is refused, though the real-time timer has not fired;
// the twin, the same decision with the clock back before expiry, succeeds.
func TestApprovalExpiredByClock(t *testing.T) {
	clock := &offsetClock{}
	s := newPeopleServer(t, Config{Clock: clock.Now})
	run := s.begin(t, withTTL(writeContract(refundCall(), final("refunded")), time.Hour), stNeedsApproval)
	before := s.mark(t, run.GetRunId())
	clock.set(2 * time.Hour)
	for _, verdict := range []reinv1.ApprovalVerdict{approveVerdict, rejectVerdict} {
		_, err := s.decide(run, verdict, "")
		st := wantCode(t, err, codes.FailedPrecondition)
		if !strings.Contains(st.Message(), "expired") {
			t.Errorf("message %q should say the proposal expired", st.Message())
		}
		s.unchanged(t, "a decision on an expired proposal", before)
	}
	if n := len(s.tools.commitCounts()); n != 0 {
		t.Fatalf("a decision on an expired proposal committed %d writes", n)
	}

	clock.set(0)
	if _, err := s.decide(run, approveVerdict, ""); err != nil {
		t.Fatalf("approval before expiry: %v", err)
	}
	evs := s.watchToEnd(t, run.GetRunId(), run.GetVersion())
	wantChange(t, evs[len(evs)-1], stRunning, stCompleted, "final_answer")
}

// TestApprovalRoles: only an approver (or admin) of the run's tenant may
// decide; a viewer and an operator are refused, another tenant is told the
// run does not exist; none changes the run. The twin: the approver.
func TestApprovalRoles(t *testing.T) {
	s := newPeopleServer(t, Config{Directory: testDirectory(t)}, as("a-admin"))
	run := s.begin(t, writeContract(refundCall(), final("refunded")), stNeedsApproval, as("a-operator"))
	before := s.mark(t, run.GetRunId())
	for _, tc := range []struct {
		who  string
		want codes.Code
	}{
		{"a-viewer", codes.PermissionDenied},
		{"a-operator", codes.PermissionDenied},
		{"b-viewer", codes.PermissionDenied},
		{"b-admin", codes.NotFound},
	} {
		for _, verdict := range []reinv1.ApprovalVerdict{approveVerdict, rejectVerdict} {
			_, err := s.decide(run, verdict, "", as(tc.who))
			if codeOf(err) != tc.want {
				t.Errorf("%s, verdict %v: got %v, want %v", tc.who, verdict, err, tc.want)
			}
			s.unchanged(t, tc.who+"'s decision", before)
		}
	}
	// Input needs an operator: a viewer is refused on a waiting run.
	asked := s.begin(t, contract(nil, ask("which account?"), final("done")), stNeedsInput, as("a-operator"))
	askedBefore := s.mark(t, asked.GetRunId())
	_, err := s.client.ProvideInput(context.Background(), &reinv1.ProvideInputRequest{RunId: asked.GetRunId(), Text: "acct 42"}, as("a-viewer"))
	wantCode(t, err, codes.PermissionDenied)
	s.unchanged(t, "a viewer's input", askedBefore)
	if n := len(s.tools.commitCounts()); n != 0 {
		t.Fatalf("refused decisions committed %d writes", n)
	}

	// The twins: the approver approves; the operator answers.
	resp, err := s.decide(run, approveVerdict, "", as("a-approver"))
	if err != nil {
		t.Fatalf("a-approver: %v", err)
	}
	if resp.GetRun().GetStatus() == stNeedsApproval {
		t.Fatalf("after the approval the run still needs approval")
	}
	evs := s.watchToEnd(t, run.GetRunId(), run.GetVersion())
	if evs[0].GetActor() != "principal:a-approver" {
		t.Errorf("approval_decided by %q, want principal:a-approver", evs[0].GetActor())
	}
	wantChange(t, evs[len(evs)-1], stRunning, stCompleted, "final_answer")
	if _, err := s.client.ProvideInput(context.Background(), &reinv1.ProvideInputRequest{RunId: asked.GetRunId(), Text: "acct 42"}, as("a-operator")); err != nil {
		t.Fatalf("a-operator's input: %v", err)
	}
	s.watchToEnd(t, asked.GetRunId(), asked.GetVersion())
}

// TestSelfApprovalForbidden: with forbid_self_approval, the principal who
// started the run may not approveVerdict its write, even as an admin; another
// approver may. Without the policy, the starter may.
func TestSelfApprovalForbidden(t *testing.T) {
	s := newPeopleServer(t, Config{Directory: testDirectory(t)}, as("a-admin"))
	c := writeContract(refundCall(), final("refunded"))
	c.Approval = &reinv1.ApprovalPolicy{ForbidSelfApproval: true}
	run := s.begin(t, c, stNeedsApproval, as("a-admin"))
	if run.GetPrincipal() != "a-admin" {
		t.Fatalf("run started by %q, want a-admin", run.GetPrincipal())
	}
	before := s.mark(t, run.GetRunId())
	_, err := s.decide(run, approveVerdict, "", as("a-admin"))
	wantCode(t, err, codes.PermissionDenied)
	s.unchanged(t, "a self-approval", before)
	if n := len(s.tools.commitCounts()); n != 0 {
		t.Fatalf("a refused self-approval committed %d writes", n)
	}
	if _, err := s.decide(run, approveVerdict, "", as("a-approver")); err != nil {
		t.Fatalf("another approver: %v", err)
	}
	s.watchToEnd(t, run.GetRunId(), run.GetVersion())

	// Without the policy the starter may approveVerdict its own write.
	own := s.begin(t, writeContract(refundCall(), final("refunded")), stNeedsApproval, as("a-admin"))
	if _, err := s.decide(own, approveVerdict, "", as("a-admin")); err != nil {
		t.Fatalf("self-approval without the policy: %v", err)
	}
	evs := s.watchToEnd(t, own.GetRunId(), own.GetVersion())
	wantChange(t, evs[len(evs)-1], stRunning, stCompleted, "final_answer")
	if got := len(s.tools.commitCounts()); got != 2 {
		t.Errorf("%d writes committed, want 2", got)
	}
}

// TestRejectIsObservation: a rejection's reason is an observation, nothing
// is dispatched or committed, and the run goes on to complete. Its twin:
// a rejection that ends the run, denied, which ends the watch stream OK.
func TestRejectIsObservation(t *testing.T) {
	s := newPeopleServer(t, Config{})
	t.Run("run goes on", func(t *testing.T) {
		run := s.begin(t, writeContract(refundCall(), final("not refunded")), stNeedsApproval)
		resp, err := s.decide(run, rejectVerdict, "the amount is over the limit")
		if err != nil {
			t.Fatalf("reject: %v", err)
		}
		if got := resp.GetRun().GetStatus(); got != stRunning && got != stCompleted {
			t.Fatalf("reject answered a %v run, want running (or later)", got)
		}
		evs := s.watchToEnd(t, run.GetRunId(), run.GetVersion())
		if got := payloadNames(evs); !strings.HasPrefix(got, "approval_decided,status_changed,model_requested") {
			t.Fatalf("after the rejection: %s; log:\n%s", got, logText(evs))
		}
		d := evs[0].GetApprovalDecided()
		if d.GetApproved() || d.GetEndRun() || d.GetReason() != "the amount is over the limit" || d.GetProposalId() != run.GetPending().GetProposal().GetProposalId() {
			t.Errorf("approval_decided %v, want a rejection with the reason", d)
		}
		wantChange(t, evs[1], stNeedsApproval, stRunning, "write_rejected")
		wantChange(t, evs[len(evs)-1], stRunning, stCompleted, "final_answer")
		for _, name := range []string{"write_dispatched", "write_committed", "write_outcome_unknown"} {
			if n := countPayload(evs, name); n != 0 {
				t.Errorf("a rejected write has %d %s events", n, name)
			}
		}
		if !s.models.sawObservation(run.GetRunId(), "person", "the amount is over the limit") {
			t.Errorf("the model's next call was not shown the rejection's reason: %+v", s.models.requests(run.GetRunId()))
		}
	})
	t.Run("end run", func(t *testing.T) {
		run := s.begin(t, writeContract(refundCall(), final("not refunded")), stNeedsApproval)
		resp, err := s.client.DecideApproval(context.Background(), &reinv1.DecideApprovalRequest{
			RunId: run.GetRunId(), ProposalId: run.GetPending().GetProposal().GetProposalId(),
			ProposalHash: run.GetPending().GetProposal().GetHash(), Verdict: rejectVerdict, Reason: "fraud", EndRun: true,
		})
		if err != nil {
			t.Fatalf("reject and end: %v", err)
		}
		if resp.GetRun().GetStatus() != stDenied {
			t.Fatalf("reject with end_run answered a %v run, want denied", resp.GetRun().GetStatus())
		}
		evs := s.watchToEnd(t, run.GetRunId(), run.GetVersion())
		if got := payloadNames(evs); got != "approval_decided,status_changed" {
			t.Fatalf("after the rejection: %s, want approval_decided,status_changed; log:\n%s", got, logText(evs))
		}
		if d := evs[0].GetApprovalDecided(); d.GetApproved() || !d.GetEndRun() || d.GetReason() != "fraud" {
			t.Errorf("approval_decided %v, want a rejection that ends the run", d)
		}
		wantChange(t, evs[1], stNeedsApproval, stDenied, "write_rejected_run_ended")
		if n := len(s.models.requests(run.GetRunId())); n != 1 {
			t.Errorf("%d model calls, want only the one that proposed the write", n)
		}
		// A denied run takes no more decisions.
		before := s.mark(t, run.GetRunId())
		_, err = s.decide(run, approveVerdict, "")
		wantCode(t, err, codes.FailedPrecondition)
		s.unchanged(t, "an approval of a denied run", before)
	})
	if n := len(s.tools.commitCounts()); n != 0 {
		t.Errorf("rejected writes were committed %d times", n)
	}
}

// TestConcurrentApprovals: of eight approvals of one proposal at once,
// exactly one wins; the others are refused (FailedPrecondition or Aborted),
// and the write is dispatched and committed once.
func TestConcurrentApprovals(t *testing.T) {
	s := newPeopleServer(t, Config{})
	run := s.begin(t, writeContract(refundCall(), final("refunded")), stNeedsApproval)
	const n = 8
	start := make(chan struct{})
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := s.decide(run, approveVerdict, fmt.Sprintf("approver %d", i))
			errs <- err
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	won := 0
	for err := range errs {
		switch codeOf(err) {
		case codes.OK:
			won++
		case codes.FailedPrecondition, codes.Aborted:
		default:
			t.Errorf("a losing approval got %v, want FailedPrecondition or Aborted", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d of %d concurrent approvals succeeded, want exactly 1", won, n)
	}
	evs := s.watchToEnd(t, run.GetRunId(), run.GetVersion())
	for name, want := range map[string]int{"approval_decided": 1, "write_dispatched": 1, "write_committed": 1} {
		if got := countPayload(evs, name); got != want {
			t.Errorf("%d %s events, want %d; log:\n%s", got, name, want, logText(evs))
		}
	}
	wantChange(t, evs[len(evs)-1], stRunning, stCompleted, "final_answer")
	s.tools.wantCommits(t, evs[1].GetWriteDispatched().GetOperationId())
}

// outcome is the part of a run's log after `after`, once DecideApproval
// answered: the payloads and the operation ID of its first write_dispatched.
func (s *peopleServer) outcome(t *testing.T, runID string, after uint64) ([]*reinv1.Event, string) {
	t.Helper()
	evs := s.events(t, runID)[after:]
	for _, ev := range evs {
		if op := ev.GetWriteDispatched().GetOperationId(); op != "" {
			return evs, op
		}
	}
	t.Fatalf("no write_dispatched after %d; log:\n%s", after, logText(evs))
	return nil, ""
}

// TestCommitFailureLeavesOutcomeUnknown: a commit that fails, with a tool
// that cannot look writes up, is recorded as write_outcome_unknown: the run
// stays needs_approval with the proposal pending again and its key kept, and
// nothing sends the write again until a person decides. The twins: the
// person approves again, and the same key is sent once more and the run
// goes on; or rejects, and nothing more is sent.
func TestCommitFailureLeavesOutcomeUnknown(t *testing.T) {
	s := newPeopleServer(t, Config{})
	unknown := func(t *testing.T) (*reinv1.Run, string) {
		t.Helper()
		s.tools.failures.Store(1)
		run := s.begin(t, writeContract(refundCall(), final("refunded")), stNeedsApproval)
		p := run.GetPending().GetProposal()
		resp, err := s.decide(run, approveVerdict, "")
		if err != nil {
			t.Fatalf("approval: %v", err)
		}
		after := resp.GetRun()
		if got := after.GetPending().GetProposal(); after.GetStatus() != stNeedsApproval || got.GetProposalId() != p.GetProposalId() || got.GetHash() != p.GetHash() {
			t.Fatalf("after a failed commit the run is %v with pending %v, want needs_approval with proposal %s pending again",
				after.GetStatus(), after.GetPending(), p.GetProposalId())
		}
		evs, op := s.outcome(t, run.GetRunId(), run.GetVersion())
		if got := payloadNames(evs); got != "approval_decided,write_dispatched,write_outcome_unknown" {
			t.Fatalf("after the approval: %s, want approval_decided,write_dispatched,write_outcome_unknown; log:\n%s", got, logText(evs))
		}
		if u := evs[2].GetWriteOutcomeUnknown(); u.GetOperationId() != op || u.GetProposalId() != p.GetProposalId() || !strings.Contains(u.GetError(), "connection reset") {
			t.Errorf("write_outcome_unknown %v, want operation %s and the commit's error", u, op)
		}
		if after.GetWriteOperationId() != op || after.GetApprovedWrite().GetProposalId() != p.GetProposalId() {
			t.Errorf("the run shows approved write %v with key %q, want proposal %s with key %s",
				after.GetApprovedWrite().GetProposalId(), after.GetWriteOperationId(), p.GetProposalId(), op)
		}
		if stored := s.get(t, run.GetRunId()); !proto.Equal(stored, after) {
			t.Errorf("DecideApproval answered a run that differs from the stored one:\nanswer: %v\nstored: %v", after, stored)
		}
		if n := s.tools.commitCounts()[op]; n != 1 {
			t.Fatalf("operation %s committed %d times, want once", op, n)
		}
		// Nothing else is accepted meanwhile.
		before := s.mark(t, run.GetRunId())
		_, err = s.client.ProvideInput(context.Background(), &reinv1.ProvideInputRequest{RunId: run.GetRunId(), Text: "go on"})
		wantCode(t, err, codes.FailedPrecondition)
		s.unchanged(t, "input after an unknown outcome", before)
		_, err = s.client.DecideApproval(context.Background(), &reinv1.DecideApprovalRequest{
			RunId: run.GetRunId(), ProposalId: p.GetProposalId(), ProposalHash: "stale", Verdict: approveVerdict,
		})
		wantCode(t, err, codes.FailedPrecondition)
		s.unchanged(t, "an approval with a wrong hash after an unknown outcome", before)
		if err := s.node.Engine.Wait(context.Background(), run.GetRunId()); err != nil {
			t.Fatal(err)
		}
		s.unchanged(t, "the engine, after an unknown outcome", before)
		if n := s.tools.commitCounts()[op]; n != 1 {
			t.Fatalf("operation %s committed %d times before a person decided again, want once", op, n)
		}
		return after, op
	}
	t.Run("approve again", func(t *testing.T) {
		run, op := unknown(t)
		if _, err := s.decide(run, approveVerdict, "checked: not applied"); err != nil {
			t.Fatalf("second approval: %v", err)
		}
		evs := s.watchToEnd(t, run.GetRunId(), run.GetVersion())
		const head = "approval_decided,write_dispatched,write_committed,status_changed"
		if len(evs) < 4 || payloadNames(evs[:4]) != head {
			t.Fatalf("after the second approval: %s, want %s first; log:\n%s", payloadNames(evs), head, logText(evs))
		}
		if got := evs[1].GetWriteDispatched().GetOperationId(); got != op {
			t.Errorf("the second dispatch has key %q, want the first's %s", got, op)
		}
		wantChange(t, evs[3], stNeedsApproval, stRunning, "write_committed")
		wantChange(t, evs[len(evs)-1], stRunning, stCompleted, "final_answer")
		if n := s.tools.commitCounts()[op]; n != 2 {
			t.Errorf("operation %s committed %d times, want twice (once per approval)", op, n)
		}
	})
	t.Run("reject", func(t *testing.T) {
		run, op := unknown(t)
		if _, err := s.decide(run, rejectVerdict, "refunded by hand"); err != nil {
			t.Fatalf("rejection: %v", err)
		}
		evs := s.watchToEnd(t, run.GetRunId(), run.GetVersion())
		if got := payloadNames(evs); !strings.HasPrefix(got, "approval_decided,status_changed,model_requested") || countPayload(evs, "write_dispatched") != 0 {
			t.Fatalf("after the rejection: %s; log:\n%s", got, logText(evs))
		}
		wantChange(t, evs[1], stNeedsApproval, stRunning, "write_rejected")
		wantChange(t, evs[len(evs)-1], stRunning, stCompleted, "final_answer")
		if n := s.tools.commitCounts()[op]; n != 1 {
			t.Errorf("operation %s committed %d times, want once", op, n)
		}
	})
}

// TestCommitFailureLookup: when a commit fails and the tool can look writes
// up, the lookup settles it: applied → its receipt is the write's, with no
// second commit; not applied → the write is dispatched again with the same
// key; the lookup failing → the outcome is unknown. The twin: a commit that
// answers needs no lookup.
func TestCommitFailureLookup(t *testing.T) {
	found := structpb.NewStringValue("refund rf_77 found")
	for _, tc := range []struct {
		name     string
		failures int32
		lookup   func(op string) (*structpb.Value, bool, error)
		payloads string
		lookups  int32
		commits  int
		receipt  *structpb.Value
	}{
		{"commit answers", 0, func(string) (*structpb.Value, bool, error) { return nil, false, errors.New("not called") },
			"approval_decided,write_dispatched,write_committed,status_changed", 0, 1, refundReceipt},
		{"applied", 1, func(string) (*structpb.Value, bool, error) { return found, true, nil },
			"approval_decided,write_dispatched,write_committed,status_changed", 1, 1, found},
		{"not applied", 1, func(string) (*structpb.Value, bool, error) { return nil, false, nil },
			"approval_decided,write_dispatched,write_dispatched,write_committed,status_changed", 1, 2, refundReceipt},
		{"not applied, second commit fails", 2, func(string) (*structpb.Value, bool, error) { return nil, false, nil },
			"approval_decided,write_dispatched,write_dispatched,write_outcome_unknown", 1, 2, nil},
		{"lookup fails", 1, func(string) (*structpb.Value, bool, error) { return nil, false, errors.New("ledger unavailable") },
			"approval_decided,write_dispatched,write_outcome_unknown", 1, 1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := openPeopleServer(t, Config{}, tc.lookup)
			s.tools.failures.Store(tc.failures)
			run := s.begin(t, writeContract(refundCall(), final("refunded")), stNeedsApproval)
			resp, err := s.decide(run, approveVerdict, "")
			if err != nil {
				t.Fatalf("approval: %v", err)
			}
			evs, op := s.outcome(t, run.GetRunId(), run.GetVersion())
			if len(evs) > len(strings.Split(tc.payloads, ",")) {
				evs = evs[:len(strings.Split(tc.payloads, ","))]
			}
			if got := payloadNames(evs); got != tc.payloads {
				t.Fatalf("after the approval: %s, want %s first; log:\n%s", got, tc.payloads, logText(s.events(t, run.GetRunId())))
			}
			for _, ev := range evs {
				if wd := ev.GetWriteDispatched(); wd != nil && wd.GetOperationId() != op {
					t.Errorf("a second dispatch with key %q, want the first's %s", wd.GetOperationId(), op)
				}
			}
			if n := s.tools.commitCounts()[op]; n != tc.commits || len(s.tools.commitCounts()) != 1 {
				t.Errorf("commits %v, want %d of operation %s", s.tools.commitCounts(), tc.commits, op)
			}
			if n := s.lookup.lookups.Load(); n != tc.lookups {
				t.Errorf("%d lookups, want %d", n, tc.lookups)
			}
			if tc.receipt == nil {
				if resp.GetRun().GetStatus() != stNeedsApproval || resp.GetRun().GetPending().GetProposal() == nil {
					t.Errorf("after an unknown outcome the run is %v with pending %v, want needs_approval with the proposal pending again",
						resp.GetRun().GetStatus(), resp.GetRun().GetPending())
				}
				return
			}
			committed := evs[len(evs)-2].GetWriteCommitted()
			if committed.GetOperationId() != op || !proto.Equal(committed.GetReceipt(), tc.receipt) {
				t.Errorf("write_committed %v, want operation %s with receipt %v", committed, op, tc.receipt)
			}
			all := s.watchToEnd(t, run.GetRunId(), run.GetVersion())
			wantChange(t, all[len(all)-1], stRunning, stCompleted, "final_answer")
		})
	}
}

// TestUnknownOutcomeKeepsDeadline: a run left needs_approval by an unknown
// outcome is still paused, so its deadline still ends it (DESIGN §2:
// needs_approval → budget_exhausted when the deadline passes while waiting).
func TestUnknownOutcomeKeepsDeadline(t *testing.T) {
	s := newPeopleServer(t, Config{})
	s.tools.failures.Store(1)
	run := s.begin(t, withTimeout(writeContract(refundCall(), final("refunded")), 600*time.Millisecond), stNeedsApproval)
	resp, err := s.decide(run, approveVerdict, "")
	if err != nil {
		t.Fatalf("approval: %v", err)
	}
	if resp.GetRun().GetStatus() != stNeedsApproval {
		t.Fatalf("after a failed commit the run is %v, want needs_approval", resp.GetRun().GetStatus())
	}
	evs := s.watchToEnd(t, run.GetRunId(), resp.GetRun().GetVersion())
	if got := payloadNames(evs); got != "budget_reached,status_changed" {
		t.Fatalf("after the deadline: %s, want budget_reached,status_changed", got)
	}
	wantChange(t, evs[1], stNeedsApproval, stExhausted, "deadline")
	if n := len(s.tools.commitCounts()); n != 1 {
		t.Errorf("%d operations committed, want the one", n)
	}
}

// TestCancelDuringCommitKeepsOutcome: a run cancelled while its approved
// write is being committed still records the write's outcome: a write that
// happened is never missing from the log (DESIGN §3, §7).
func TestCancelDuringCommitKeepsOutcome(t *testing.T) {
	s := newPeopleServer(t, Config{})
	gate := &commitGate{entered: make(chan string, 1), release: make(chan struct{})}
	s.tools.gate.Store(gate)
	run := s.begin(t, writeContract(refundCall(), final("refunded")), stNeedsApproval)
	decided := make(chan error, 1)
	go func() {
		_, err := s.decide(run, approveVerdict, "")
		decided <- err
	}()
	var op string
	select {
	case op = <-gate.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the approved write was not committed within 10s")
	}
	cancelled := make(chan error, 1)
	go func() {
		_, err := s.client.CancelRun(context.Background(), &reinv1.CancelRunRequest{RunId: run.GetRunId(), Reason: "stop"})
		cancelled <- err
	}()
	// Let the commit answer once the cancel returned, or after a while if
	// the cancel waits for the write.
	var cerr error
	cancelReturned := false
	select {
	case cerr = <-cancelled:
		cancelReturned = true
	case <-time.After(500 * time.Millisecond):
	}
	close(gate.release)
	derr := <-decided
	if !cancelReturned {
		cerr = <-cancelled
	}
	evs := s.events(t, run.GetRunId())
	if n := s.tools.commitCounts()[op]; n != 1 {
		t.Fatalf("operation %s committed %d times, want once", op, n)
	}
	if countPayload(evs, "write_committed")+countPayload(evs, "write_outcome_unknown") != 1 {
		t.Errorf("the write was committed but the log has no outcome for it (approval: %v; cancel: %v); log:\n%s", derr, cerr, logText(evs))
	}
}

// TestPausedRunTimers: a paused run's timer ends it on time without any
// call: an expired proposal → expired; the run's deadline while it waits
// for input or approval → budget_exhausted. The twins are the decisions
// and input made in time (TestApproveCommitsThenRunGoesOn,
// TestProvideInputResumes).
func TestPausedRunTimers(t *testing.T) {
	for _, tc := range []struct {
		name     string
		contract *reinv1.TaskContract
		paused   reinv1.RunStatus
		want     string // payloads after the pause
		to       reinv1.RunStatus
		reason   string
	}{
		{"proposal expires", withTTL(writeContract(refundCall(), final("x")), 150*time.Millisecond), stNeedsApproval,
			"status_changed", stExpired, "proposal_expired"},
		{"deadline while waiting for input", withTimeout(contract(nil, ask("which account?"), final("x")), 400*time.Millisecond), stNeedsInput,
			"budget_reached,status_changed", stExhausted, "deadline"},
		{"deadline before the proposal expires", withTTL(withTimeout(writeContract(refundCall(), final("x")), 400*time.Millisecond), time.Hour), stNeedsApproval,
			"budget_reached,status_changed", stExhausted, "deadline"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newPeopleServer(t, Config{})
			run := s.begin(t, tc.contract, tc.paused)
			evs := s.watchToEnd(t, run.GetRunId(), run.GetVersion())
			if got := payloadNames(evs); got != tc.want {
				t.Fatalf("after the pause: %s, want %s; log:\n%s", got, tc.want, logText(evs))
			}
			last := evs[len(evs)-1]
			wantChange(t, last, tc.paused, tc.to, tc.reason)
			for _, ev := range evs {
				if ev.GetActor() != "harness" {
					t.Errorf("event %d by %q, want the harness", ev.GetSequence(), ev.GetActor())
				}
			}
			due := run.GetDeadline()
			if tc.to == stExpired {
				due = run.GetPending().GetProposal().GetExpiresAt()
			}
			if last.GetRecordedAt().AsTime().Before(due.AsTime()) {
				t.Errorf("ended at %v, before it was due at %v", last.GetRecordedAt().AsTime(), due.AsTime())
			}
			if tc.to == stExhausted {
				if br := evs[0].GetBudgetReached(); br.GetLimit() != "deadline" {
					t.Errorf("budget_reached %v, want limit deadline", br)
				}
			}
			if n := len(s.models.requests(run.GetRunId())); n != 1 {
				t.Errorf("%d model calls, want only the one before the pause", n)
			}
			if n := len(s.tools.commitCounts()); n != 0 {
				t.Errorf("%d writes committed", n)
			}
		})
	}
}

// TestPausedRunTimersAfterRestart: a node opened with Resume arms the
// timers of the paused runs it finds; the run expires on time without any
// call. Its twin: a node opened without Resume leaves the run as it is, past
// its expiry, until a node that resumes finds it (and expires it at once).
func TestPausedRunTimersAfterRestart(t *testing.T) {
	pause := func(t *testing.T, path string, ttl time.Duration) runstate.State {
		t.Helper()
		node, err := Open(context.Background(), Config{DBPath: path, Tools: newWriteTools(t)})
		if err != nil {
			t.Fatal(err)
		}
		defer node.Close()
		st, _, err := node.Engine.Start(context.Background(), harness.StartRequest{
			RequestID: "r", Contract: withTTL(writeContract(refundCall(), final("x")), ttl), Principal: "local", Tenant: "default",
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := node.Engine.Wait(context.Background(), st.RunID); err != nil {
			t.Fatal(err)
		}
		if st, err = node.Store.Load(context.Background(), st.RunID); err != nil || st.Status != stNeedsApproval {
			t.Fatalf("before the restart the run is %v (%v), want needs_approval", st.Status, err)
		}
		return st
	}
	// reopen opens the file again with a model log and write tools that
	// count what the new node calls.
	reopen := func(t *testing.T, path string, resume bool) (*Node, *modelLog, *writeTools) {
		t.Helper()
		w, m := newWriteTools(t), &modelLog{}
		node, err := Open(context.Background(), Config{DBPath: path, Tools: w, Models: m.models, Resume: resume})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(node.Close)
		return node, m, w
	}
	// waitEnd waits, on the hub, for the run to end.
	waitEnd := func(t *testing.T, node *Node, runID string) runstate.State {
		t.Helper()
		sub := node.Hub.Subscribe(runID)
		defer sub.Close()
		bound := time.After(10 * time.Second)
		for {
			st, err := node.Store.Load(context.Background(), runID)
			if err != nil {
				t.Fatal(err)
			}
			if runstate.Terminal(st.Status) {
				return st
			}
			select {
			case <-sub.C:
			case <-bound:
				t.Fatalf("run %s is still %v after 10s", runID, st.Status)
			}
		}
	}
	wantExpired := func(t *testing.T, node *Node, paused runstate.State, m *modelLog, w *writeTools) {
		t.Helper()
		got := waitEnd(t, node, paused.RunID)
		evs := watchLog(t, node.Store, paused.RunID)
		if got.Status != stExpired || got.Version != paused.Version+1 {
			t.Fatalf("after the restart the run is %v at version %d, want expired at %d; log:\n%s",
				got.Status, got.Version, paused.Version+1, logText(evs))
		}
		wantChange(t, evs[len(evs)-1], stNeedsApproval, stExpired, "proposal_expired")
		if at, due := evs[len(evs)-1].GetRecordedAt().AsTime(), paused.Pending.GetProposal().GetExpiresAt().AsTime(); at.Before(due) {
			t.Errorf("expired at %v, before the proposal's expiry %v", at, due)
		}
		if n := len(m.requests(paused.RunID)); n != 0 {
			t.Errorf("the restarted node made %d model calls", n)
		}
		if n := len(w.commitCounts()); n != 0 {
			t.Errorf("the restarted node committed %d writes", n)
		}
	}

	t.Run("resume arms the timer", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "rein.db")
		paused := pause(t, path, 500*time.Millisecond)
		node, m, w := reopen(t, path, true)
		if !time.Now().Before(paused.Pending.GetProposal().GetExpiresAt().AsTime()) {
			t.Logf("the proposal expired before the node reopened; the timer fires at once")
		}
		wantExpired(t, node, paused, m, w)
	})
	t.Run("no resume leaves it", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "rein.db")
		paused := pause(t, path, 200*time.Millisecond)
		node, _, _ := reopen(t, path, false)
		// Poll until well past the expiry: the run must not move.
		bound := time.After(time.Until(paused.Pending.GetProposal().GetExpiresAt().AsTime()) + 250*time.Millisecond)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
	poll:
		for {
			st, err := node.Store.Load(context.Background(), paused.RunID)
			if err != nil {
				t.Fatal(err)
			}
			if st.Version != paused.Version {
				t.Fatalf("a node opened without Resume changed the paused run: version %d → %d (%v)", paused.Version, st.Version, st.Status)
			}
			select {
			case <-tick.C:
			case <-bound:
				break poll
			}
		}
		node.Close()
		node, m, w := reopen(t, path, true)
		wantExpired(t, node, paused, m, w)
	})
}

// TestProvideInputResumes: input resumes a needs_input run, which goes on
// to complete; the model's next call sees the input. TestApprovalRefusals
// has the twins (input to a run that does not wait for it).
func TestProvideInputResumes(t *testing.T) {
	s := newPeopleServer(t, Config{})
	run := s.begin(t, contract(nil, ask("which account?"), final("refunded acct 42")), stNeedsInput)
	if q := run.GetPending().GetQuestion(); q.GetText() != "which account?" {
		t.Fatalf("pending question %v, want the model's", q)
	}
	resp, err := s.client.ProvideInput(context.Background(), &reinv1.ProvideInputRequest{RunId: run.GetRunId(), Text: "acct 42"})
	if err != nil {
		t.Fatalf("ProvideInput: %v", err)
	}
	if got := resp.GetRun().GetStatus(); got != stRunning && got != stCompleted {
		t.Fatalf("ProvideInput answered a %v run, want running (or later)", got)
	}
	if resp.GetRun().GetPending() != nil {
		t.Errorf("the resumed run still shows a pending action: %v", resp.GetRun().GetPending())
	}
	evs := s.watchToEnd(t, run.GetRunId(), run.GetVersion())
	const want = "input_provided,status_changed,model_requested,model_returned,status_changed"
	if got := payloadNames(evs); got != want {
		t.Fatalf("after the input: %s, want %s; log:\n%s", got, want, logText(evs))
	}
	if in := evs[0].GetInputProvided(); in.GetText() != "acct 42" || evs[0].GetActor() != "principal:"+LocalPrincipal.ID {
		t.Errorf("input_provided %v by %q, want the text by principal:%s", in, evs[0].GetActor(), LocalPrincipal.ID)
	}
	wantChange(t, evs[1], stNeedsInput, stRunning, "input_provided")
	wantChange(t, evs[len(evs)-1], stRunning, stCompleted, "final_answer")
	if !s.models.sawObservation(run.GetRunId(), "person", "acct 42") {
		t.Errorf("the model's next call was not shown the input: %+v", s.models.requests(run.GetRunId()))
	}

	// Input to the same run again, now completed: refused, nothing changes.
	before := s.mark(t, run.GetRunId())
	_, err = s.client.ProvideInput(context.Background(), &reinv1.ProvideInputRequest{RunId: run.GetRunId(), Text: "acct 43"})
	wantCode(t, err, codes.FailedPrecondition)
	s.unchanged(t, "input to a completed run", before)
}

// TestCancelPausedRun: a run paused for input or approval is cancelled at
// once, and its timer does not fire afterwards: nothing is stored after the
// cancellation, well past the time the timer was due. The twin is
// TestPausedRunTimers, where the timer fires.
func TestCancelPausedRun(t *testing.T) {
	for _, tc := range []struct {
		name     string
		contract *reinv1.TaskContract
		paused   reinv1.RunStatus
	}{
		{"needs_input", withTimeout(contract(nil, ask("which account?"), final("x")), 300*time.Millisecond), stNeedsInput},
		{"needs_approval", withTTL(writeContract(refundCall(), final("x")), 250*time.Millisecond), stNeedsApproval},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newPeopleServer(t, Config{})
			run := s.begin(t, tc.contract, tc.paused)
			due := run.GetDeadline()
			if tc.paused == stNeedsApproval {
				due = run.GetPending().GetProposal().GetExpiresAt()
			}
			if due == nil {
				t.Fatal("the paused run has no time to be due")
			}
			resp, err := s.client.CancelRun(context.Background(), &reinv1.CancelRunRequest{RunId: run.GetRunId(), Reason: "not needed"})
			if err != nil {
				t.Fatalf("CancelRun: %v", err)
			}
			if resp.GetRun().GetStatus() != stCancelled || resp.GetRun().GetPending() != nil {
				t.Fatalf("CancelRun answered a %v run with pending %v, want cancelled with nothing pending", resp.GetRun().GetStatus(), resp.GetRun().GetPending())
			}
			if !time.Now().Before(due.AsTime()) {
				t.Skipf("the run was cancelled after its timer was due (%v); the machine is too slow for this test", due.AsTime())
			}
			evs := s.watchToEnd(t, run.GetRunId(), run.GetVersion())
			if got := payloadNames(evs); got != "status_changed" {
				t.Fatalf("after the cancel: %s, want status_changed; log:\n%s", got, logText(evs))
			}
			wantChange(t, evs[0], tc.paused, stCancelled, "not needed")
			cancelled := s.mark(t, run.GetRunId())

			// Poll until well past the time the timer was due.
			bound := time.After(time.Until(due.AsTime()) + 250*time.Millisecond)
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for {
				st, err := s.node.Store.Load(context.Background(), run.GetRunId())
				if err != nil {
					t.Fatal(err)
				}
				if st.Version != cancelled.run.GetVersion() {
					t.Fatalf("the cancelled run moved to version %d; log:\n%s", st.Version, logText(s.events(t, run.GetRunId())))
				}
				select {
				case <-tick.C:
					continue
				case <-bound:
				}
				break
			}
			s.unchanged(t, "the paused run's timer", cancelled)
			if n := len(s.models.requests(run.GetRunId())); n != 1 {
				t.Errorf("%d model calls, want only the one before the pause", n)
			}
			if n := len(s.tools.commitCounts()); n != 0 {
				t.Errorf("%d writes committed", n)
			}
		})
	}
}
