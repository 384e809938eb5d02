package engine

// Tests of the one commit path and the registry of driven runs: a person's
// decision is fenced by the lease like a driver's step; an approved write is
// committed by the run's driver, so a cancel and a shutdown wait for it;
// ResumeAll carries on what a stopped server left.

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/taskcontract"
	"github.com/reinhq/rein/internal/tools"
)

// gatedCommit is an executor whose Commit waits for release, after saying
// it entered.
type gatedCommit struct {
	*countingTools
	entered chan struct{}
	release chan struct{}
}

func (g *gatedCommit) Commit(ctx context.Context, call tools.Call, op string) (*structpb.Value, error) {
	g.entered <- struct{}{}
	<-g.release
	return g.countingTools.Commit(ctx, call, op)
}

func newGatedCommit(t *testing.T) *gatedCommit {
	return &gatedCommit{countingTools: searchTools(t), entered: make(chan struct{}, 1), release: make(chan struct{})}
}

func pendingProposal(t *testing.T, st runstate.State) *reinv1.Proposal {
	t.Helper()
	p := st.Pending.GetProposal()
	if st.Status != statusNeedsApproval || p == nil {
		t.Fatalf("run is %s with pending %v, want a proposal waiting", runstate.StatusName(st.Status), st.Pending)
	}
	return p
}

// TestPersonsDecisionIsFenced: an engine whose lease on a paused run was
// taken by another owner cannot record a person's input; nothing is
// written. Its twin: the owner's own input goes through.
func TestPersonsDecisionIsFenced(t *testing.T) {
	for _, takenOver := range []bool{true, false} {
		name := map[bool]string{true: "taken_over", false: "own_lease"}[takenOver]
		t.Run(name, func(t *testing.T) {
			e, s := setup(t, Config{Owner: "old", Tools: searchTools(t)})
			ctx := testCtx(t)
			paused, _ := runToRest(t, e, s, testContract(askReply("Which quarter?"), finalReply("Q3")))
			if paused.Status != statusNeedsInput {
				t.Fatalf("run is %s, want needs_input", runstate.StatusName(paused.Status))
			}
			if takenOver {
				if _, err := s.Acquire(ctx, paused.RunID, "new"); err != nil {
					t.Fatal(err)
				}
			}
			_, err := e.ProvideInput(ctx, paused.RunID, "Q3", "alice")
			after, evs := stored(t, s, paused.RunID)
			if !takenOver {
				if err != nil {
					t.Fatalf("input on the owner's own run: %v", err)
				}
				waitRun(t, e, paused.RunID)
				return
			}
			if !errors.Is(err, store.ErrFenced) {
				t.Fatalf("input after a takeover: %v, want ErrFenced", err)
			}
			if after.Version != paused.Version || len(evs) != int(paused.Version) {
				t.Fatalf("the fenced engine wrote: version %d → %d (%s)", paused.Version, after.Version, dump(evs))
			}
		})
	}
}

// TestCancelWaitsForApprovedWrite: the approved write is committed by the
// run's driver, so a cancel that arrives while the tool commits waits for
// the receipt, then records cancelled; the write is committed exactly once
// and its receipt is in the log before the cancel.
func TestCancelWaitsForApprovedWrite(t *testing.T) {
	ex := newGatedCommit(t)
	e, s := setup(t, Config{Tools: ex})
	ctx := testCtx(t)
	paused, _ := runToRest(t, e, s, testContract(callReply("send_email", "call-1", nil), finalReply("sent")))
	p := pendingProposal(t, paused)
	decided := make(chan error, 1)
	go func() {
		_, err := e.DecideApproval(ctx, Verdict{RunID: paused.RunID, ProposalID: p.GetProposalId(), ProposalHash: p.GetHash(), Approve: true, Principal: "bob"})
		decided <- err
	}()
	<-ex.entered // the write is being committed
	cancelled := make(chan error, 1)
	go func() {
		_, err := e.Cancel(ctx, paused.RunID, "stop", "principal:alice")
		cancelled <- err
	}()
	select {
	case err := <-cancelled:
		t.Fatalf("cancel returned (%v) while the approved write was still being committed", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(ex.release)
	if err := <-decided; err != nil {
		t.Fatalf("approve: %v", err)
	}
	if err := <-cancelled; err != nil {
		t.Fatalf("cancel after the write: %v", err)
	}
	st, evs := stored(t, s, paused.RunID)
	wantStatus(t, st, evs, reinv1.RunStatus_RUN_STATUS_CANCELLED, "stop")
	wantCount(t, evs, "write_committed", 1)
	ex.wantCalls(t, 0, 1, 1)
}

// TestShutdownWaitsForApprovedWrite: a graceful shutdown waits for an
// approved write being committed; the receipt is stored. Its twin: a
// shutdown cut at once (Close) after the write was dispatched leaves it for
// ResumeAll to settle, which looks it up instead of sending it again.
func TestShutdownWaitsForApprovedWrite(t *testing.T) {
	ex := newGatedCommit(t)
	e, s := setup(t, Config{Tools: ex})
	ctx := testCtx(t)
	paused, _ := runToRest(t, e, s, testContract(callReply("send_email", "call-1", nil), finalReply("sent")))
	p := pendingProposal(t, paused)
	go func() {
		_, _ = e.DecideApproval(ctx, Verdict{RunID: paused.RunID, ProposalID: p.GetProposalId(), ProposalHash: p.GetHash(), Approve: true, Principal: "bob"})
	}()
	<-ex.entered
	stopped := make(chan struct{})
	go func() {
		e.Shutdown(ctx)
		close(stopped)
	}()
	select {
	case <-stopped:
		t.Fatal("shutdown returned while the approved write was still being committed")
	case <-time.After(50 * time.Millisecond):
	}
	close(ex.release)
	<-stopped
	_, evs := stored(t, s, paused.RunID)
	wantCount(t, evs, "write_committed", 1)
	if _, err := e.DecideApproval(ctx, Verdict{RunID: paused.RunID, ProposalID: p.GetProposalId(), ProposalHash: p.GetHash(), Approve: true, Principal: "bob"}); err == nil {
		t.Fatal("a decision on a shut-down engine was accepted")
	}
}

// TestResumeAll: a new engine on a stopped server's store carries on a
// running run to its end, settles a dispatched write by its lookup (never a
// second send), and leaves a paused run paused. The failure twin: a store
// that cannot list is an error.
func TestResumeAll(t *testing.T) {
	ctx := testCtx(t)
	s, _ := openStore(t)
	// A dispatched write with no outcome, as a crash leaves it.
	first := newEngine(t, Config{Store: s, Tools: searchTools(t)})
	writing, _ := runToRest(t, first, s, testContract(callReply("send_email", "call-1", nil), finalReply("sent")))
	p := pendingProposal(t, writing)
	if _, err := first.commit(ctx, writing, "principal:bob", []*reinv1.Event{
		decidedEvent(Verdict{ProposalID: p.GetProposalId(), Approve: true}),
		{Payload: &reinv1.Event_WriteDispatched{WriteDispatched: &reinv1.WriteDispatched{ProposalId: p.GetProposalId(), OperationId: "op_" + p.GetProposalId()}}},
	}); err != nil {
		t.Fatal(err)
	}
	asking, _, err := first.Start(ctx, StartRequest{RequestID: "ask", Contract: testContract(askReply("Which quarter?"), finalReply("Q3")), Principal: "alice", Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	waitRun(t, first, asking.RunID)
	first.Close()
	// A running run with no driver, as a crash leaves it.
	running, _, err := s.Create(ctx, &reinv1.Event{RunId: "run_resumed", Sequence: 1, Actor: "principal:alice", RecordedAt: timestamppb.Now(),
		Payload: &reinv1.Event_RunStarted{RunStarted: &reinv1.RunStarted{Contract: taskcontract.WithDefaults(testContract(finalReply("done"))), Principal: "alice", Tenant: "acme", RequestId: "r"}}})
	if err != nil {
		t.Fatal(err)
	}

	lookups := &lookupTools{countingTools: searchTools(t), applied: true}
	second := newEngine(t, Config{Store: s, Tools: lookups})
	if err := second.ResumeAll(ctx); err != nil {
		t.Fatal(err)
	}
	waitRun(t, second, running.RunID)
	if st, evs := stored(t, s, running.RunID); st.Status != statusCompleted {
		t.Fatalf("running run after ResumeAll: %s (%s)", runstate.StatusName(st.Status), dump(evs))
	}
	waitRun(t, second, writing.RunID)
	_, evs := stored(t, s, writing.RunID)
	wantCount(t, evs, "write_committed", 1)
	lookups.wantCalls(t, 0, 0, 0)
	if lookups.lookups.Load() != 1 {
		t.Fatalf("%d lookups, want 1", lookups.lookups.Load())
	}
	if st, _ := stored(t, s, asking.RunID); st.Status != statusNeedsInput {
		t.Fatalf("paused run after ResumeAll: %s, want needs_input", runstate.StatusName(st.Status))
	}

	if err := newEngine(t, Config{Store: failingList{s}}).ResumeAll(ctx); err == nil {
		t.Fatal("ResumeAll over a store that cannot list returned nil")
	}
}

// failingList is a store whose List fails.
type failingList struct{ Store }

func (failingList) List(context.Context, store.Filter) (store.Page, error) {
	return store.Page{}, errors.New("disk on fire")
}

// lookupTools answers every lookup with applied and a receipt.
type lookupTools struct {
	*countingTools
	applied bool
	lookups atomic.Int32
}

func (l *lookupTools) Lookup(context.Context, tools.Call, string) (*structpb.Value, bool, error) {
	l.lookups.Add(1)
	return structpb.NewStringValue("found by lookup"), l.applied, nil
}
