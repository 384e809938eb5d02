package remote_test

// The harness over a remote tool service: a real engine.Engine on the
// in-memory store, a scripted model, and the fixture billing service with
// its durable ledger behind real gRPC on a loopback port, which the tests
// stop and start again on the same ledger and address.

import (
	"context"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/engine"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store/mem"
	"github.com/reinhq/rein/internal/tools"
	"github.com/reinhq/rein/internal/tools/remote"
)

// dying is a tool service that dies mid-commit: the write is applied (the
// inner service has made it durable), then the server stops hard, before
// the reply, as a process that crashes there would.
type dying struct {
	reinv1.ToolServiceServer
	server *grpc.Server
}

func (d *dying) CommitWrite(ctx context.Context, req *reinv1.CommitWriteRequest) (*reinv1.CommitWriteResponse, error) {
	if _, err := d.ToolServiceServer.CommitWrite(ctx, req); err != nil {
		return nil, err
	}
	d.server.Stop()
	return nil, status.Error(codes.Unavailable, "the tool service died before it replied")
}

// rig is rein (an engine, its store, a Client) and the billing service at
// a fixed address over a fixed ledger.
type rig struct {
	t              *testing.T
	ctx            context.Context
	addr, ledger   string
	cc             *grpc.ClientConn
	client         *remote.Client
	engine         *engine.Engine
	store          *mem.Store
	lookups        atomic.Int32
	asked, release chan struct{}
}

// newRig starts the billing service (dying mid-commit when dies is set) and
// an engine that runs its tools. With hold set, each LookupWrite waits,
// once it has said so on asked, until release is closed.
func newRig(t *testing.T, dies, hold bool) *rig {
	t.Helper()
	r := &rig{t: t, ctx: testCtx(t), ledger: filepath.Join(t.TempDir(), "ledger"), store: mem.New()}
	r.start(dies)
	if hold {
		r.asked, r.release = make(chan struct{}, 1), make(chan struct{})
	}
	watch := grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if method == reinv1.ToolService_LookupWrite_FullMethodName {
			r.lookups.Add(1)
			if r.asked != nil {
				r.asked <- struct{}{}
				select {
				case <-r.release:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	})
	cc, err := grpc.NewClient(r.addr, grpc.WithTransportCredentials(insecure.NewCredentials()), watch)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	r.cc, r.client = cc, remote.New("billing", cc)
	r.engine = engine.New(engine.Config{Store: r.store, Tools: r.client})
	t.Cleanup(r.engine.Close)
	return r
}

// start serves the billing service over the rig's ledger: on a fresh port
// the first time, on the same address after.
func (r *rig) start(dies bool) {
	lis := listen(r.t, r.addr)
	r.addr = lis.Addr().String()
	srv := remote.NewServer(billing(r.t, r.ledger))
	serveWith(r.t, lis, func(gs *grpc.Server) reinv1.ToolServiceServer {
		if dies {
			return &dying{ToolServiceServer: srv, server: gs}
		}
		return srv
	})
}

// ready waits until the rig's connection is up again (after a restart),
// skipping the reconnect backoff.
func (r *rig) ready() {
	r.t.Helper()
	r.cc.Connect()
	for s := r.cc.GetState(); s != connectivity.Ready; s = r.cc.GetState() {
		if s == connectivity.TransientFailure || s == connectivity.Idle {
			r.cc.ResetConnectBackoff()
			r.cc.Connect()
		}
		if !r.cc.WaitForStateChange(r.ctx, s) {
			r.t.Fatalf("the connection to %s is still %v", r.addr, s)
		}
	}
}

// propose starts a run whose model asks for the refund, then answers, and
// returns it paused for approval.
func (r *rig) propose() runstate.State {
	r.t.Helper()
	args, err := structpb.NewStruct(map[string]any{"invoice_id": "INV-42", "amount": "1200.00"})
	if err != nil {
		r.t.Fatal(err)
	}
	decide := func(d *reinv1.Decision) *reinv1.ScriptedReply {
		return &reinv1.ScriptedReply{Reply: &reinv1.ScriptedReply_Decision{Decision: d}, Usage: &reinv1.Usage{InputTokens: 10, OutputTokens: 5}}
	}
	c := &reinv1.TaskContract{
		Goal:  "Refund the duplicate charge on invoice INV-42.",
		Tools: []*reinv1.ToolGrant{{Name: "refunds.create", Tier: reinv1.ToolTier_TOOL_TIER_WRITE}},
		Model: &reinv1.ModelSpec{Provider: "script", Name: "test", Script: []*reinv1.ScriptedReply{
			decide(&reinv1.Decision{Action: &reinv1.Decision_ToolCall{ToolCall: &reinv1.ToolCall{Tool: "refunds.create", CallId: "c1", Arguments: args}}}),
			decide(&reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: "Refunded."}}}),
		}},
	}
	st, _, err := r.engine.Start(r.ctx, engine.StartRequest{RequestID: "req-" + r.t.Name(), Contract: c, Principal: "alice", Tenant: "acme"})
	if err != nil {
		r.t.Fatalf("Start: %v", err)
	}
	st = r.rest(st.RunID)
	if st.Status != reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL || st.Pending.GetProposal() == nil {
		r.t.Fatalf("the run is %s with pending %v, want needs_approval with the refund proposed", runstate.StatusName(st.Status), st.Pending)
	}
	return st
}

// rest waits until the run's driver exits, and returns its stored state.
func (r *rig) rest(runID string) runstate.State {
	r.t.Helper()
	if err := r.engine.Wait(r.ctx, runID); err != nil {
		r.t.Fatalf("Wait: %v", err)
	}
	st, err := r.store.Load(r.ctx, runID)
	if err != nil {
		r.t.Fatalf("Load: %v", err)
	}
	return st
}

// approve approves the run's pending proposal, as bob.
func (r *rig) approve(st runstate.State) (runstate.State, error) {
	p := st.Pending.GetProposal()
	return r.engine.DecideApproval(r.ctx, engine.Verdict{
		RunID: st.RunID, ProposalID: p.GetProposalId(), ProposalHash: p.GetHash(), Approve: true, Principal: "bob",
	})
}

// after is the run's events with a sequence above version.
func (r *rig) after(runID string, version uint64) []*reinv1.Event {
	r.t.Helper()
	evs, err := r.store.Events(r.ctx, runID, version, 1000)
	if err != nil {
		r.t.Fatalf("Events: %v", err)
	}
	return evs
}

func names(evs []*reinv1.Event) string {
	var out []string
	for _, ev := range evs {
		out = append(out, runstate.PayloadName(ev))
	}
	return strings.Join(out, ",")
}

// committed checks that evs start with the commit of op, with the first
// receipt, and the run going on.
func (r *rig) committed(evs []*reinv1.Event, op string) {
	r.t.Helper()
	const want = "approval_decided,write_dispatched,write_committed,status_changed"
	if got := names(evs); !strings.HasPrefix(got, want) {
		r.t.Fatalf("events %s, want %s first", got, want)
	}
	wc := evs[2].GetWriteCommitted()
	if wc.GetOperationId() != op || !proto.Equal(wc.GetReceipt(), refundReceipt(r.t)) {
		r.t.Errorf("write_committed %v, want operation %s with the first receipt %v", wc, op, refundReceipt(r.t))
	}
}

// wantLedger checks the service's storage: the writes it applied and the
// repeats it answered from its record.
func (r *rig) wantLedger(want ...string) {
	r.t.Helper()
	if got := strings.Join(ledgerLines(r.t, r.ledger), " "); got != strings.Join(want, " ") {
		r.t.Errorf("ledger %q, want %q", got, strings.Join(want, " "))
	}
}

// wantCompleted waits for the run to end and checks it completed.
func (r *rig) wantCompleted(runID string) {
	r.t.Helper()
	if st := r.rest(runID); st.Status != reinv1.RunStatus_RUN_STATUS_COMPLETED {
		r.t.Errorf("the run ended %s, want completed", runstate.StatusName(st.Status))
	}
}

// TestServiceDiesMidCommit: a remote tool service that applies a write and
// dies before it replies never gets the write applied twice, and the run
// learns the first receipt once the service is back:
//
//   - back before rein's lookup: the lookup settles it (write_committed
//     with the first receipt, no second commit);
//   - still down at the lookup: the outcome is unknown (write_outcome_unknown,
//     the run needs_approval again, the proposal pending); once it is back
//     on the same storage its lookup knows the write, and approving again
//     re-dispatches it with the same key, which the service answers with
//     the first receipt from its record: one write in storage.
//
// The twin: a service that replies needs no lookup at all.
func TestServiceDiesMidCommit(t *testing.T) {
	t.Run("replies", func(t *testing.T) {
		t.Parallel()
		r := newRig(t, false, false)
		st := r.propose()
		next, err := r.approve(st)
		if err != nil || next.Status != reinv1.RunStatus_RUN_STATUS_RUNNING {
			t.Fatalf("approve: %s, %v; want running", runstate.StatusName(next.Status), err)
		}
		op := "op_" + st.Pending.GetProposal().GetProposalId()
		r.committed(r.after(st.RunID, st.Version), op)
		if n := r.lookups.Load(); n != 0 {
			t.Errorf("%d lookups, want none", n)
		}
		r.wantCompleted(st.RunID)
		r.wantLedger(op + ":refunds.create:applied")
	})

	t.Run("back before the lookup", func(t *testing.T) {
		t.Parallel()
		r := newRig(t, true, true)
		st := r.propose()
		type result struct {
			st  runstate.State
			err error
		}
		done := make(chan result, 1)
		go func() {
			next, err := r.approve(st)
			done <- result{next, err}
		}()
		select {
		case <-r.asked:
		case res := <-done:
			t.Fatalf("the approval returned (%s, %v) without a lookup", runstate.StatusName(res.st.Status), res.err)
		case <-r.ctx.Done():
			t.Fatal("no lookup after the service died mid-commit")
		}
		op := "op_" + st.Pending.GetProposal().GetProposalId()
		r.wantLedger(op + ":refunds.create:applied")
		r.start(false)
		r.ready()
		close(r.release)
		res := <-done
		if res.err != nil || res.st.Status != reinv1.RunStatus_RUN_STATUS_RUNNING {
			t.Fatalf("approve: %s, %v; want running", runstate.StatusName(res.st.Status), res.err)
		}
		evs := r.after(st.RunID, st.Version)
		r.committed(evs, op)
		if strings.Contains(names(evs), "write_outcome_unknown") {
			t.Errorf("events %s: the lookup answered, so the outcome was never unknown", names(evs))
		}
		r.wantCompleted(st.RunID)
		r.wantLedger(op + ":refunds.create:applied") // no second commit at all
		if n := r.lookups.Load(); n != 1 {
			t.Errorf("%d lookups, want 1", n)
		}
	})

	t.Run("down at the lookup", func(t *testing.T) {
		t.Parallel()
		r := newRig(t, true, false)
		st := r.propose()
		op := "op_" + st.Pending.GetProposal().GetProposalId()
		unknown, err := r.approve(st)
		if err != nil {
			t.Fatalf("approve: %v", err)
		}
		if unknown.Status != reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL || unknown.Pending.GetProposal().GetProposalId() != st.Pending.GetProposal().GetProposalId() {
			t.Fatalf("after the service died the run is %s with pending %v, want needs_approval with the proposal pending again",
				runstate.StatusName(unknown.Status), unknown.Pending)
		}
		evs := r.after(st.RunID, st.Version)
		if got := names(evs); got != "approval_decided,write_dispatched,write_outcome_unknown" {
			t.Fatalf("events %s, want approval_decided,write_dispatched,write_outcome_unknown", got)
		}
		msg := evs[2].GetWriteOutcomeUnknown().GetError()
		for _, want := range []string{"the tool server billing at " + r.addr + " is unreachable: start it or check --tool-server", op} {
			if !strings.Contains(msg, want) {
				t.Errorf("write_outcome_unknown says %q, want it to contain %q", msg, want)
			}
		}
		if n := r.lookups.Load(); n != 1 {
			t.Errorf("%d lookups, want 1", n)
		}
		r.wantLedger(op + ":refunds.create:applied")

		// Back on the same storage: the service's lookup knows the write.
		r.start(false)
		r.ready()
		call := tools.Call{RunID: st.RunID, CallID: "c1", Tool: "refunds.create"}
		receipt, applied, err := r.client.Lookup(r.ctx, call, op)
		if err != nil || !applied || !proto.Equal(receipt, refundReceipt(t)) {
			t.Fatalf("Lookup(%s) after the restart: %v, %v, %v; want applied with the first receipt", op, receipt, applied, err)
		}
		next, err := r.approve(unknown)
		if err != nil || next.Status != reinv1.RunStatus_RUN_STATUS_RUNNING {
			t.Fatalf("approve again: %s, %v; want running", runstate.StatusName(next.Status), err)
		}
		// The second approval asks the service first: the lookup settles
		// the write with its first receipt, and nothing is sent again.
		evs = r.after(st.RunID, unknown.Version)
		const want = "approval_decided,write_committed,status_changed"
		if got := names(evs); !strings.HasPrefix(got, want) {
			t.Fatalf("events %s, want %s first", got, want)
		}
		if wc := evs[1].GetWriteCommitted(); wc.GetOperationId() != op || !proto.Equal(wc.GetReceipt(), refundReceipt(t)) {
			t.Errorf("write_committed %v, want operation %s with the first receipt", wc, op)
		}
		if n := r.lookups.Load(); n != 3 {
			t.Errorf("%d lookups, want 3 (at the failed commit, this test's own, at the second approval)", n)
		}
		r.wantCompleted(st.RunID)
		r.wantLedger(op + ":refunds.create:applied")
	})
}
