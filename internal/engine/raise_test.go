package engine

// Tests of a run that pauses on its budget (budget.on_exhausted PAUSE)
// and of people raising it (RaiseBudget).

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/taskcontract"
)

const statusNeedsBudget = reinv1.RunStatus_RUN_STATUS_NEEDS_BUDGET

// pausing is c with one model call allowed, pausing when it is spent.
func pausing(c *reinv1.TaskContract) *reinv1.TaskContract {
	c.Budget = &reinv1.Budget{MaxSteps: 1, OnExhausted: reinv1.BudgetAction_BUDGET_ACTION_PAUSE}
	return c
}

// A run whose contract pauses on its budget stops before the call it may
// not pay for, as needs_budget naming the limit, with nothing paid lost; a
// raise records who gave it and what the limits are now, and the run goes
// on from where it stopped.
func TestBudgetPauseAndRaise(t *testing.T) {
	ex := searchTools(t)
	spy := &modelSpy{}
	e, s := setup(t, Config{Tools: ex, Models: spy.models(nil)})
	st, evs := runToRest(t, e, s, pausing(testContract(callReply("search", "c1", nil), finalReply("done"))))
	wantStatus(t, st, evs, statusNeedsBudget, "max_steps")
	pause := st.Pending.GetBudget()
	if pause.GetLimit() != "max_steps" || pause.GetExpiresAt() == nil {
		t.Fatalf("pending = %v, want the budget pause on max_steps with its end", st.Pending)
	}
	ex.wantCalls(t, 1, 0, 0) // the tool's result was kept
	next, err := e.RaiseBudget(testCtx(t), &reinv1.RaiseBudgetRequest{RunId: st.RunID, AddSteps: 2, Reason: "worth it"}, "carol")
	if err != nil {
		t.Fatalf("RaiseBudget: %v", err)
	}
	if next.Status != reinv1.RunStatus_RUN_STATUS_RUNNING || next.Limits().Steps != 3 {
		t.Errorf("after the raise: %s with %d steps allowed, want running with 3", runstate.StatusName(next.Status), next.Limits().Steps)
	}
	waitRun(t, e, st.RunID)
	st, evs = stored(t, s, st.RunID)
	wantStatus(t, st, evs, reinv1.RunStatus_RUN_STATUS_COMPLETED, "final_answer")
	raised := ofType(evs, "budget_raised")
	if len(raised) != 1 || raised[0].GetActor() != "principal:carol" || raised[0].GetBudgetRaised().GetBudget().GetMaxSteps() != 3 ||
		raised[0].GetBudgetRaised().GetReason() != "worth it" {
		t.Errorf("budget_raised = %v, want carol's raise to 3 steps with her reason", raised)
	}
	if n := spy.calls.Load(); n != 2 {
		t.Errorf("%d model calls, want 2: none repeated", n)
	}
	checkInputHashes(t, evs)
}

// A raise is refused, storing nothing, when it adds nothing, when it
// leaves the limit the run paused on reached, and when the run is not
// paused on its budget; by default a run still ends at its limit.
func TestBudgetRaiseRefused(t *testing.T) {
	e, s := setup(t, Config{Tools: searchTools(t)})
	ctx := testCtx(t)
	st, _ := runToRest(t, e, s, pausing(testContract(callReply("search", "c1", nil), finalReply("done"))))
	var fe *taskcontract.FieldError
	if _, err := e.RaiseBudget(ctx, &reinv1.RaiseBudgetRequest{RunId: st.RunID}, "carol"); !errors.As(err, &fe) {
		t.Errorf("a raise of nothing: %v, want a FieldError", err)
	}
	_, err := e.RaiseBudget(ctx, &reinv1.RaiseBudgetRequest{RunId: st.RunID, AddTokens: 1000}, "carol")
	if !errors.Is(err, ErrNotWaiting) || !strings.Contains(err.Error(), "max_steps") || !strings.Contains(err.Error(), "--add-steps") {
		t.Errorf("a raise that leaves max_steps reached: %v, want ErrNotWaiting naming the limit and --add-steps", err)
	}
	if after, _ := stored(t, s, st.RunID); after.Version != st.Version || after.Status != statusNeedsBudget {
		t.Errorf("a refused raise changed the run: version %d → %d, %s", st.Version, after.Version, runstate.StatusName(after.Status))
	}

	t.Run("not paused on its budget", func(t *testing.T) {
		ended, evs := runToRest(t, e, s, testContract(callReply("search", "c1", nil), finalReply("done")))
		wantStatus(t, ended, evs, reinv1.RunStatus_RUN_STATUS_COMPLETED, "final_answer")
		if _, err := e.RaiseBudget(ctx, &reinv1.RaiseBudgetRequest{RunId: ended.RunID, AddSteps: 1}, "carol"); !errors.Is(err, ErrNotWaiting) {
			t.Errorf("a raise of a completed run: %v, want ErrNotWaiting", err)
		}
	})
	t.Run("ends by default", func(t *testing.T) {
		c := testContract(callReply("search", "c1", nil), finalReply("done"))
		c.Budget = &reinv1.Budget{MaxSteps: 1}
		ended, evs := runToRest(t, e, s, c)
		wantStatus(t, ended, evs, reinv1.RunStatus_RUN_STATUS_BUDGET_EXHAUSTED, "max_steps")
	})
}

// A run paused on its budget that nobody raises ends expired when its
// raise_ttl runs out by the engine's clock (its deadline passing
// meanwhile does not end it budget_exhausted).
func TestBudgetPauseExpires(t *testing.T) {
	clock := newClock(t0, 0)
	e, s := setup(t, Config{Tools: searchTools(t), Clock: clock.Now})
	c := pausing(testContract(callReply("search", "c1", nil), finalReply("done")))
	c.Budget.RaiseTtl = durationpb.New(time.Hour)
	c.Budget.Timeout = durationpb.New(time.Minute)
	st, _ := runToRest(t, e, s, c)
	if st.Status != statusNeedsBudget {
		t.Fatalf("run is %s, want needs_budget", runstate.StatusName(st.Status))
	}
	setClock(clock, t0.Add(30*time.Minute)) // past the deadline, not the pause
	e.Expire(testCtx(t), st.RunID)
	if now, _ := stored(t, s, st.RunID); now.Status != statusNeedsBudget {
		t.Fatalf("run is %s before its pause ended, want needs_budget", runstate.StatusName(now.Status))
	}
	setClock(clock, t0.Add(time.Hour+time.Second))
	e.Expire(testCtx(t), st.RunID)
	st, evs := stored(t, s, st.RunID)
	wantStatus(t, st, evs, reinv1.RunStatus_RUN_STATUS_EXPIRED, "budget_not_raised")
	if _, err := e.RaiseBudget(testCtx(t), &reinv1.RaiseBudgetRequest{RunId: st.RunID, AddSteps: 1}, "carol"); !errors.Is(err, ErrNotWaiting) {
		t.Errorf("a raise after the pause ended: %v, want ErrNotWaiting", err)
	}
}

// A delegation tree's budget is its root's: a child that reaches the
// budget lent to it pauses, and its parent pauses for it, naming it. A
// raise of the child itself is refused (it names the root); a raise of
// the root is lent on to the child (the root's loan to it grows), both
// carry on, and the tree completes.
func TestTreeBudgetPausesTheRoot(t *testing.T) {
	e, w, s := delegSetup(t, Config{Tools: searchTools(t)})
	ctx := testCtx(t)
	root := treePaused(t, e, w, s)
	pause := root.Pending.GetBudget()
	if pause.GetChildRunId() == "" || pause.GetLimit() != "max_steps" || !strings.Contains(pause.GetDetail(), "child run") {
		t.Fatalf("root's pause %v, want one for its child at max_steps", pause)
	}
	kid := pausedOnBudget(t, w, s, pause.GetChildRunId())
	_, err := e.RaiseBudget(ctx, &reinv1.RaiseBudgetRequest{RunId: kid.RunID, AddSteps: 1}, "carol")
	if !errors.Is(err, ErrNotWaiting) || !strings.Contains(err.Error(), root.RunID) {
		t.Errorf("a raise of the child: %v, want ErrNotWaiting naming the root", err)
	}
	if _, err := e.RaiseBudget(ctx, &reinv1.RaiseBudgetRequest{RunId: root.RunID, AddTokens: 5}, "carol"); !errors.Is(err, ErrNotWaiting) {
		t.Errorf("a raise that leaves the child at its limit: %v, want ErrNotWaiting", err)
	}
	if now, _ := s.Load(ctx, kid.RunID); now.Version != kid.Version {
		t.Errorf("a refused raise changed the child: version %d → %d", kid.Version, now.Version)
	}
	if _, err := e.RaiseBudget(ctx, &reinv1.RaiseBudgetRequest{RunId: root.RunID, AddSteps: 1, Reason: "finish it"}, "carol"); err != nil {
		t.Fatalf("raise the root: %v", err)
	}
	w.wait(t, root.RunID)
	st, evs := stored(t, s, root.RunID)
	wantStatus(t, st, evs, reinv1.RunStatus_RUN_STATUS_COMPLETED, "final_answer")
	lent := ofType(evs, "budget_raised")
	if len(lent) != 1 || lent[0].GetBudgetRaised().GetChildRunId() != kid.RunID {
		t.Errorf("root's budget_raised %v, want one lent to %s", lent, kid.RunID)
	}
	kidEnd, kidEvs := stored(t, s, kid.RunID)
	wantStatus(t, kidEnd, kidEvs, reinv1.RunStatus_RUN_STATUS_COMPLETED, "final_answer")
	if got := ofType(kidEvs, "budget_raised"); len(got) != 1 || got[0].GetActor() != "principal:carol" || kidEnd.Limits().Steps != 2 {
		t.Errorf("child's budget_raised %v, limits %+v: want carol's raise of one step", got, kidEnd.Limits())
	}
}

// refusedAppends is the store with every append the fold refused counted.
type refusedAppends struct {
	Store
	refused atomic.Int64
}

func (s *refusedAppends) Append(ctx context.Context, runID string, expected uint64, events []*reinv1.Event, opts ...store.AppendOption) (runstate.State, error) {
	st, err := s.Store.Append(ctx, runID, expected, events, opts...)
	if runstate.Rejected(err) {
		s.refused.Add(1)
	}
	return st, err
}

// TestRootPausedForAChildTakesNoStep: a root that pauses for its child's
// budget takes no step after it: its driver stopped there. It went on to
// a model call, which the fold refused, and the refusal failed the tree
// when a raise landed between the two (TestTreeBudgetPausesTheRoot, now and
// then, on a loaded machine). Five trees, each left paused; the twin is
// TestTreeBudgetPausesTheRoot, where the root is raised and carries on.
func TestRootPausedForAChildTakesNoStep(t *testing.T) {
	for i := range 5 {
		s, _ := openStore(t)
		spy := &refusedAppends{Store: s}
		w := newEnded()
		e := newEngine(t, Config{Store: spy, Tools: searchTools(t), Published: w.published})
		root := treePaused(t, e, w, spy)
		waitRun(t, e, root.RunID) // its driver left
		if n := spy.refused.Load(); n != 0 {
			t.Fatalf("tree %d: %d appends refused by the fold once root %s paused for its child", i, n, root.RunID)
		}
		if st, err := s.Load(testCtx(t), root.RunID); err != nil || st.Status != statusNeedsBudget {
			t.Fatalf("tree %d: the root is %s (%v), want it paused on its budget", i, runstate.StatusName(st.Status), err)
		}
	}
}

// A raise the root recorded but its child never got (a crash between the
// two) is given to the child when the root is driven again.
func TestTreeBudgetLoanDeliveredAfterACrash(t *testing.T) {
	e, w, s := delegSetup(t, Config{Tools: searchTools(t)})
	ctx := testCtx(t)
	paused := treePaused(t, e, w, s)
	root := paused
	// The root's half of a raise, as a crash would leave it.
	kidID := paused.Pending.GetBudget().GetChildRunId()
	if _, err := s.Append(ctx, root.RunID, paused.Version, []*reinv1.Event{
		{RunId: root.RunID, Sequence: paused.Version + 1, RecordedAt: timestamppb.Now(), Actor: "principal:carol", Payload: &reinv1.Event_BudgetRaised{BudgetRaised: &reinv1.BudgetRaised{AddSteps: 1, ChildRunId: kidID}}},
		{RunId: root.RunID, Sequence: paused.Version + 2, RecordedAt: timestamppb.Now(), Actor: "principal:carol", Payload: &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{
			From: statusNeedsBudget, To: reinv1.RunStatus_RUN_STATUS_RUNNING, Reason: "budget_raised"}}},
	}); err != nil {
		t.Fatal(err)
	}
	e.schedule(root.RunID)
	w.wait(t, root.RunID)
	st, evs := stored(t, s, root.RunID)
	wantStatus(t, st, evs, reinv1.RunStatus_RUN_STATUS_COMPLETED, "final_answer")
	kid, kidEvs := stored(t, s, kidID)
	if got := ofType(kidEvs, "budget_raised"); len(got) != 1 || got[0].GetActor() != "harness" || kid.Status != reinv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Errorf("child %s with budget_raised %v, want the loan given by the harness and the child completed", runstate.StatusName(kid.Status), got)
	}
}

// treePaused starts a tree whose one child pauses at the one step lent to
// it, and returns the root once it paused for the child.
func treePaused(t *testing.T, e *Engine, w *ended, s Store) runstate.State {
	t.Helper()
	ask := task("read invoice 42", "search")
	ask.Budget = &reinv1.DelegatedBudget{MaxSteps: 1}
	c := delegating([]*reinv1.ScriptedReply{callReply("search", "c1", nil), finalReply("42")}, delegateReply(ask), finalReply("the total is 42"))
	c.Budget = &reinv1.Budget{MaxSteps: 5, OnExhausted: reinv1.BudgetAction_BUDGET_ACTION_PAUSE}
	return pausedOnBudget(t, w, s, startRun(t, e, c).RunID)
}

// pausedOnBudget waits until runID pauses on its budget and returns it;
// it fails if the run ends instead.
func pausedOnBudget(t *testing.T, w *ended, s Store, runID string) runstate.State {
	t.Helper()
	ctx := testCtx(t)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := s.Load(ctx, runID)
		if err != nil {
			t.Fatal(err)
		}
		if st.Status == statusNeedsBudget {
			return st
		}
		if runstate.Terminal(st.Status) {
			t.Fatalf("run %s ended %s, want it paused on its budget", runID, runstate.StatusName(st.Status))
		}
		select {
		case <-w.ch:
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("run %s never paused on its budget", runID)
		}
	}
}

// A parent paused for a child whose pause ends without a raise (here the
// child is cancelled) waits for its children again, records the child's
// end, and goes on.
func TestTreeBudgetChildEndsWithoutARaise(t *testing.T) {
	e, w, s := delegSetup(t, Config{Tools: searchTools(t)})
	root := treePaused(t, e, w, s)
	kid := root.Pending.GetBudget().GetChildRunId()
	if _, err := e.Cancel(testCtx(t), kid, "not needed", "principal:carol"); err != nil {
		t.Fatal(err)
	}
	w.wait(t, root.RunID)
	st, evs := stored(t, s, root.RunID)
	wantStatus(t, st, evs, reinv1.RunStatus_RUN_STATUS_COMPLETED, "final_answer")
	if got := ofType(evs, "delegation_returned"); len(got) != 1 || got[0].GetDelegationReturned().GetStatus() != reinv1.RunStatus_RUN_STATUS_CANCELLED {
		t.Errorf("delegation_returned %v, want the child's cancel", got)
	}
}

// A fork at a pause on the budget starts before it, under the fork's own
// budget: it goes on, where the parent waits for a raise.
func TestForkAtABudgetPause(t *testing.T) {
	e, s := setup(t, Config{Tools: searchTools(t)})
	st, _ := runToRest(t, e, s, pausing(testContract(callReply("search", "c1", nil), finalReply("done"))))
	fork, _, err := e.Fork(testCtx(t), ForkRequest{RunID: st.RunID, AtSequence: st.Version, RequestID: "fork-1",
		Budget: &reinv1.Budget{MaxSteps: 3}, Principal: "alice", Tenant: "acme"})
	if err != nil {
		t.Fatalf("Fork: %v", err)
	}
	waitRun(t, e, fork.RunID)
	got, evs := stored(t, s, fork.RunID)
	wantStatus(t, got, evs, reinv1.RunStatus_RUN_STATUS_COMPLETED, "final_answer")
	if n := len(ofType(evs, "budget_reached")); n != 0 {
		t.Errorf("the fork carried %d budget_reached, want the pause left behind", n)
	}
}

// A pause on max_tokens before a model call records what the call needs;
// a raise that clears what was spent but leaves no room for that call is
// refused, storing nothing, and one that does carries the run on.
func TestBudgetRaiseLeavesRoomForTheNextCall(t *testing.T) {
	e, s := setup(t, Config{Tools: searchTools(t)})
	ctx := testCtx(t)
	c := testContract(finalReply("done"))
	c.Budget = &reinv1.Budget{MaxTokens: 2, OnExhausted: reinv1.BudgetAction_BUDGET_ACTION_PAUSE}
	st, evs := runToRest(t, e, s, c)
	wantStatus(t, st, evs, statusNeedsBudget, "max_tokens")
	need := st.Pending.GetBudget().GetNextCallTokens()
	if need <= 3 {
		t.Fatalf("pause %v: want the next call's tokens, over the limit of 2 and a raise of 1", st.Pending.GetBudget())
	}
	_, err := e.RaiseBudget(ctx, &reinv1.RaiseBudgetRequest{RunId: st.RunID, AddTokens: 1}, "carol")
	if !errors.Is(err, ErrNotWaiting) || !strings.Contains(err.Error(), "next model call") {
		t.Errorf("a raise too small for the next call: %v, want ErrNotWaiting saying so", err)
	}
	if now, _ := s.Load(ctx, st.RunID); now.Version != st.Version {
		t.Errorf("a refused raise changed the run: version %d → %d", st.Version, now.Version)
	}
	if _, err := e.RaiseBudget(ctx, &reinv1.RaiseBudgetRequest{RunId: st.RunID, AddTokens: need * 4}, "carol"); err != nil {
		t.Fatalf("a raise with room: %v", err)
	}
	waitRun(t, e, st.RunID)
	st, evs = stored(t, s, st.RunID)
	wantStatus(t, st, evs, reinv1.RunStatus_RUN_STATUS_COMPLETED, "final_answer")
}

// cutOnce blocks its first call until the call's context ends (the run's
// deadline cuts it), then answers each call with a final answer.
type cutOnce struct{ calls atomic.Int32 }

func (m *cutOnce) Next(ctx context.Context, req *model.Request) (*model.Reply, error) {
	if m.calls.Add(1) == 1 {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return &model.Reply{Decision: &reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: "done"}}}, Usage: &reinv1.Usage{}}, nil
}

// A model call the run's deadline cuts pauses a run whose contract pauses
// on its budget, with the call in flight; a raise of the deadline sends
// the call again, marked resumed, and the run goes on. The twin: by
// default the cut call ends the run budget_exhausted.
func TestDeadlineCutCallPauses(t *testing.T) {
	for _, pause := range []bool{true, false} {
		m := &cutOnce{}
		e, s := setup(t, Config{Tools: searchTools(t), Clock: time.Now, Models: func(*reinv1.ModelSpec) (model.Model, error) { return m, nil }})
		c := testContract(finalReply("done"))
		// The cut call is the last the run may make: it is counted, and
		// sent again without a step added.
		c.Budget = &reinv1.Budget{Timeout: durationpb.New(300 * time.Millisecond), MaxSteps: 1}
		if pause {
			c.Budget.OnExhausted = reinv1.BudgetAction_BUDGET_ACTION_PAUSE
		}
		st, evs := runToRest(t, e, s, c)
		if !pause {
			wantStatus(t, st, evs, reinv1.RunStatus_RUN_STATUS_BUDGET_EXHAUSTED, "deadline")
			continue
		}
		wantStatus(t, st, evs, statusNeedsBudget, "deadline")
		if !st.ModelInFlight || st.Pending.GetBudget().GetLimit() != "deadline" {
			t.Fatalf("paused with call in flight %v, pending %v; want the cut call in flight, paused on the deadline", st.ModelInFlight, st.Pending)
		}
		if _, err := e.RaiseBudget(testCtx(t), &reinv1.RaiseBudgetRequest{RunId: st.RunID, ExtendDeadline: durationpb.New(time.Minute)}, "carol"); err != nil {
			t.Fatalf("RaiseBudget: %v", err)
		}
		waitRun(t, e, st.RunID)
		st, evs = stored(t, s, st.RunID)
		wantStatus(t, st, evs, reinv1.RunStatus_RUN_STATUS_COMPLETED, "final_answer")
		requested := ofType(evs, "model_requested")
		if len(requested) != 2 || requested[0].GetModelRequested().GetResumed() || !requested[1].GetModelRequested().GetResumed() ||
			requested[1].GetModelRequested().GetStep() != requested[0].GetModelRequested().GetStep() {
			t.Fatalf("model calls %v; want the cut call, then the same step sent again marked resumed", requested)
		}
	}
}

// GiveLentRaise gives a raise only to a child paused on its budget: a
// root, or a run not paused, is refused and nothing is stored.
func TestGiveLentRaiseRefused(t *testing.T) {
	e, w, s := delegSetup(t, Config{Tools: searchTools(t)})
	ctx := testCtx(t)
	root := treePaused(t, e, w, s)
	req := &reinv1.RaiseBudgetRequest{AddSteps: 1}
	if _, err := e.GiveLentRaise(ctx, root.RunID, req, "principal:carol"); !errors.Is(err, ErrNotWaiting) {
		t.Errorf("a lent raise given to the root: %v, want ErrNotWaiting", err)
	}
	if now, _ := s.Load(ctx, root.RunID); now.Version != root.Version {
		t.Errorf("a refused lent raise changed the root: version %d → %d", root.Version, now.Version)
	}
	kid := pausedOnBudget(t, w, s, root.Pending.GetBudget().GetChildRunId())
	next, err := e.GiveLentRaise(ctx, kid.RunID, req, "principal:carol")
	if err != nil || next.Status != reinv1.RunStatus_RUN_STATUS_RUNNING {
		t.Fatalf("a lent raise given to the paused child: %v, %s; want it running", err, runstate.StatusName(next.Status))
	}
}
