package engine

// A tool that never returns, whatever its context says: a cancel, a
// shutdown, the tool timeout and a person's approved write each end within
// a bound, and the run is recorded as the contract says.

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/tools"
)

// interrupted is the result the step records of a tool call cut short
// because the run's driver stopped.
const interrupted = "the call was interrupted because the run stopped; its result is unknown"

// hungTools is an executor whose Read (and, with commits, Commit) blocks
// until the test ends, ignoring its context, as a read of a FIFO did. It
// signals entered when a call starts.
type hungTools struct {
	tools.Executor
	entered chan struct{}
	release chan struct{}
	commits bool
}

func newHungTools(t *testing.T, commits bool) *hungTools {
	h := &hungTools{Executor: searchTools(t), entered: make(chan struct{}, 4), release: make(chan struct{}), commits: commits}
	t.Cleanup(func() { close(h.release) })
	return h
}

func (h *hungTools) hang() {
	h.entered <- struct{}{}
	<-h.release
}

func (h *hungTools) Read(context.Context, tools.Call) (*structpb.Value, error) {
	h.hang()
	return nil, nil
}

func (h *hungTools) Commit(ctx context.Context, c tools.Call, op string) (*structpb.Value, error) {
	if !h.commits {
		return h.Executor.Commit(ctx, c, op)
	}
	h.hang()
	return nil, nil
}

// bound is the most a test waits for what must not hang.
func bound(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func (h *hungTools) waitEntered(t *testing.T) {
	t.Helper()
	select {
	case <-h.entered:
	case <-bound(t).Done():
		t.Fatal("the tool call never started")
	}
}

// Cancel returns while the tool still hangs, and the run is cancelled with
// the call answered as interrupted. Before, Cancel waited for the driver,
// which waited for the tool: forever.
func TestCancelDoesNotWaitForAHungTool(t *testing.T) {
	h := newHungTools(t, false)
	e, s := setup(t, Config{Tools: h})
	st := startRun(t, e, testContract(callReply("search", "call-1", nil), finalReply("done")))
	h.waitEntered(t)
	if _, err := e.Cancel(bound(t), st.RunID, "", "principal:bob"); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	got, evs := stored(t, s, st.RunID)
	wantStatus(t, got, evs, statusCancelled, "cancelled by principal:bob")
	tr := ofType(evs, "tool_returned")
	if len(tr) != 1 || tr[0].GetToolReturned().GetError() != interrupted {
		t.Errorf("the hung call is answered by %v, want one tool_returned saying it was interrupted:\n%s", tr, dump(evs))
	}
}

// Shutdown with a short context returns while the tool hangs; the run is
// left running, to resume, and a resumed run with a tool that answers
// completes (the twin).
func TestShutdownDoesNotWaitForAHungTool(t *testing.T) {
	s, _ := openStore(t)
	h := newHungTools(t, false)
	e1 := newEngine(t, Config{Store: s, Tools: h})
	st := startRun(t, e1, testContract(callReply("search", "call-1", nil), finalReply("done")))
	h.waitEntered(t)
	done := make(chan struct{})
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		e1.Shutdown(ctx)
		close(done)
	}()
	select {
	case <-done:
	case <-bound(t).Done():
		t.Fatal("Shutdown did not return while a tool hung")
	}
	left, evs := stored(t, s, st.RunID)
	wantStatus(t, left, evs, statusRunning, left.StatusReason)
	wantCount(t, evs, "tool_returned", 1)

	e2 := newEngine(t, Config{Store: s, Tools: searchTools(t)})
	if err := e2.Resume(bound(t), st.RunID); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	waitRun(t, e2, st.RunID)
	end, evs := stored(t, s, st.RunID)
	wantStatus(t, end, evs, statusCompleted, "final_answer")
}

// A read that outlives the tool timeout is answered as timed out, and the
// run goes on: the model sees why.
func TestToolTimeoutCutsAHungTool(t *testing.T) {
	h := newHungTools(t, false)
	e, s := setup(t, Config{Tools: h, ToolTimeout: 50 * time.Millisecond})
	got, evs := runToRest(t, e, s, testContract(callReply("search", "call-1", nil), finalReply("done")))
	wantStatus(t, got, evs, statusCompleted, "final_answer")
	tr := ofType(evs, "tool_returned")
	if len(tr) != 1 || !strings.Contains(tr[0].GetToolReturned().GetError(), "did not answer within its timeout of 50ms") {
		t.Errorf("the timed-out call is answered by %v, want the timeout:\n%s", tr, dump(evs))
	}
}

// A read is cut by the run's deadline when it comes before the tool
// timeout: the call's context carries the deadline, as the model call's
// does, and the model is told why.
func TestDeadlineCutsAHungTool(t *testing.T) {
	h := newHungTools(t, false)
	e, s := setup(t, Config{Tools: h, Clock: newClock(t0, time.Millisecond).Now})
	c := testContract(callReply("search", "call-1", nil), finalReply("done"))
	c.Budget = &reinv1.Budget{Timeout: durationpb.New(200 * time.Millisecond)}
	got, evs := runToRest(t, e, s, c)
	tr := ofType(evs, "tool_returned")
	if len(tr) != 1 || !strings.Contains(tr[0].GetToolReturned().GetError(), "cut by the run's deadline") {
		t.Errorf("the hung call is answered by %v, want the deadline:\n%s", tr, dump(evs))
	}
	// The injected clock moved a few milliseconds, so the run went on.
	wantStatus(t, got, evs, statusCompleted, "final_answer")
}

// An approved write whose commit hangs ends, after the tool timeout, as an
// unknown outcome for a person; DecideApproval returns, and so does a
// cancel after it.
func TestHungCommitIsUnknown(t *testing.T) {
	h := newHungTools(t, true)
	e, s := setup(t, Config{Tools: h, ToolTimeout: 50 * time.Millisecond})
	st := startRun(t, e, testContract(callReply("send_email", "w1", nil), finalReply("sent")))
	waitRun(t, e, st.RunID)
	paused, _ := stored(t, s, st.RunID)
	p := paused.Pending.GetProposal()
	if _, err := e.DecideApproval(bound(t), Verdict{RunID: st.RunID, ProposalID: p.GetProposalId(), ProposalHash: p.GetHash(), Approve: true, Principal: "bob"}); err != nil {
		t.Fatalf("DecideApproval: %v", err)
	}
	got, evs := stored(t, s, st.RunID)
	wantStatus(t, got, evs, statusNeedsApproval, got.StatusReason)
	unknown := ofType(evs, "write_outcome_unknown")
	if len(unknown) != 1 || !strings.Contains(unknown[0].GetWriteOutcomeUnknown().GetError(), "did not answer within its timeout") {
		t.Fatalf("the hung commit is recorded as %v, want an unknown outcome naming the timeout:\n%s", unknown, dump(evs))
	}
	if _, err := e.Cancel(bound(t), st.RunID, "", "principal:bob"); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
}
