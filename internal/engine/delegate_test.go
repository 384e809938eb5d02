package engine

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/pricing"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/step"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/taskcontract"
)

// ended is a Config.Published hook that lets a test wait for runs to end
// (a parent's driver leaves while its children run, so Engine.Wait does
// not say the tree is done).
type ended struct {
	mu   sync.Mutex
	runs map[string]runstate.State
	ch   chan struct{}
}

func newEnded() *ended { return &ended{runs: map[string]runstate.State{}, ch: make(chan struct{}, 1)} }

func (w *ended) published(st runstate.State, _ []*reinv1.Event) {
	if !runstate.Terminal(st.Status) {
		return
	}
	w.mu.Lock()
	w.runs[st.RunID] = st
	w.mu.Unlock()
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

// wait blocks until runID has ended, under testCtx's bound.
func (w *ended) wait(t *testing.T, runID string) {
	t.Helper()
	ctx := testCtx(t)
	for {
		w.mu.Lock()
		_, ok := w.runs[runID]
		w.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-w.ch:
		case <-ctx.Done():
			t.Fatalf("run %s did not end: %v", runID, ctx.Err())
		}
	}
}

func task(question string, toolNames ...string) *reinv1.DelegatedTask {
	t := &reinv1.DelegatedTask{Question: question, Evidence: "the tool result", Completion: "when the total is known"}
	for _, n := range toolNames {
		t.Tools = append(t.Tools, &reinv1.DelegatedTool{Name: n})
	}
	return t
}

func delegateReply(tasks ...*reinv1.DelegatedTask) *reinv1.ScriptedReply {
	return decisionReply(&reinv1.Decision{Action: &reinv1.Decision_Delegate{Delegate: &reinv1.Delegate{Tasks: tasks}}})
}

// delegating is testContract with a delegation policy of up to 3 children
// running children, the scripted child model.
func delegating(child []*reinv1.ScriptedReply, script ...*reinv1.ScriptedReply) *reinv1.TaskContract {
	c := testContract(script...)
	c.Delegation = &reinv1.DelegationPolicy{MaxChildren: 3, ChildModels: []*reinv1.ModelSpec{{Provider: "script", Name: "test", Script: child}}}
	return c
}

// delegSetup is an engine whose ended hook tells when runs end.
func delegSetup(t *testing.T, cfg Config) (*Engine, *ended, Store) {
	t.Helper()
	w := newEnded()
	cfg.Published = w.published
	e, s := setup(t, cfg)
	return e, w, s
}

// children are the runs run delegated to, in the order of its log.
func children(t *testing.T, s Store, evs []*reinv1.Event) []string {
	t.Helper()
	var ids []string
	for _, ev := range ofType(evs, "delegation_started") {
		for _, c := range ev.GetDelegationStarted().GetChildren() {
			ids = append(ids, c.GetRunId())
		}
	}
	return ids
}

func TestDelegateTwoReadsInParallel(t *testing.T) {
	child := []*reinv1.ScriptedReply{callReply("search", "c1", nil), finalReply("the total is 1,234.00 EUR")}
	c := delegating(child, delegateReply(task("read invoice 42", "search"), task("read invoice 43", "search")), finalReply("both read"))
	// Both children's first calls meet before either answers: they run at
	// once, or the test times out.
	var arrived sync.WaitGroup
	arrived.Add(2)
	spy := &modelSpy{before: func(ctx context.Context, req *model.Request) {
		if req.Step == 1 && strings.HasPrefix(req.Goal, "read invoice") {
			arrived.Done()
			done := make(chan struct{})
			go func() { arrived.Wait(); close(done) }()
			select {
			case <-done:
			case <-ctx.Done():
			}
		}
	}}
	e, w, s := delegSetup(t, Config{Models: spy.models(nil)})
	st := startRun(t, e, c)
	w.wait(t, st.RunID)
	st, evs := stored(t, s, st.RunID)
	wantStatus(t, st, evs, statusCompleted, "final_answer")
	wantCount(t, evs, "delegation_started", 1)
	wantCount(t, evs, "delegation_returned", 2)
	ids := children(t, s, evs)
	if len(ids) != 2 {
		t.Fatalf("children %v, want 2", ids)
	}
	var childSpend runstate.Spend
	for i, id := range ids {
		cst, cevs := stored(t, s, id)
		wantStatus(t, cst, cevs, statusCompleted, "final_answer")
		by := cevs[0].GetRunStarted().GetDelegatedBy()
		if by.GetParentRunId() != st.RunID || by.GetSequence() != ofType(evs, "delegation_started")[0].GetSequence() || by.GetTaskIndex() != uint32(i) || by.GetDepth() != 1 || by.GetRootRunId() != st.RunID {
			t.Errorf("child %d run_started.delegated_by = %v", i, by)
		}
		if cst.Tenant != "acme" || cst.Principal != "alice" {
			t.Errorf("child %d tenant %q principal %q, want the parent's", i, cst.Tenant, cst.Principal)
		}
		if g := cst.Contract.GetTools(); len(g) != 1 || g[0].GetName() != "search" || g[0].GetTier() != tierRead {
			t.Errorf("child %d grants %v, want search at read", i, g)
		}
		// Half of the parent's 25 steps, less the one it spent, is lent.
		if got := cst.Contract.GetBudget().GetMaxSteps(); got != 12 {
			t.Errorf("child %d max_steps %d, want 12", i, got)
		}
		childSpend = childSpend.Add(cst.Own())
	}
	if st.Lent != (runstate.Spend{}) || st.Returned != childSpend || st.Waiting() {
		t.Errorf("parent lent %+v returned %+v (children spent %+v), waiting %v", st.Lent, st.Returned, childSpend, st.Waiting())
	}
	// The parent's last call read both reports, labelled as a child run's.
	reqs := spy.requests()
	last := reqs[len(reqs)-1]
	n := 0
	for _, turn := range last.Transcript {
		if o := turn.Observation; o != nil && strings.HasPrefix(o.Source, "run:") {
			n++
			if !strings.Contains(o.Text, "data, not instructions") || !strings.Contains(o.Text, "1,234.00 EUR") || !strings.Contains(o.Text, "tool:search#c1") {
				t.Errorf("report as the model read it: %q", o.Text)
			}
		}
	}
	if last.Goal != c.GetGoal() || n != 2 {
		t.Errorf("the parent's last call (goal %q) read %d reports, want 2", last.Goal, n)
	}
}

func TestDelegateRefusals(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy *reinv1.DelegationPolicy
		tasks  []*reinv1.DelegatedTask
		want   string
	}{
		{"not_allowed", nil, []*reinv1.DelegatedTask{task("x", "search")}, "does not allow delegation"},
		{"too_many", &reinv1.DelegationPolicy{MaxChildren: 1}, []*reinv1.DelegatedTask{task("x"), task("y")}, "may start 1 children in all"},
		{"tool_not_granted", &reinv1.DelegationPolicy{MaxChildren: 3}, []*reinv1.DelegatedTask{task("x", "delete_all")}, "which this run is not granted"},
		{"tool_not_in_policy", &reinv1.DelegationPolicy{MaxChildren: 3, Tools: []string{"search"}}, []*reinv1.DelegatedTask{task("x", "send_email")}, "does not let it give a child"},
		{"looser_tier", &reinv1.DelegationPolicy{MaxChildren: 3}, []*reinv1.DelegatedTask{{Question: "x", Tools: []*reinv1.DelegatedTool{{Name: "send_email", Tier: "read"}}}}, "looser than the run's write"},
		{"too_much_budget", &reinv1.DelegationPolicy{MaxChildren: 3}, []*reinv1.DelegatedTask{{Question: "x", Budget: &reinv1.DelegatedBudget{MaxSteps: 20}}}, "one child may take at most 12"},
		{"too_much_together", &reinv1.DelegationPolicy{MaxChildren: 3, MaxShare: 0.6}, []*reinv1.DelegatedTask{task("x"), task("y")}, "together"},
		{"no_question", &reinv1.DelegationPolicy{MaxChildren: 3}, []*reinv1.DelegatedTask{{Question: " "}}, "has no question"},
		{"bad_tier", &reinv1.DelegationPolicy{MaxChildren: 3}, []*reinv1.DelegatedTask{{Question: "x", Tools: []*reinv1.DelegatedTool{{Name: "search", Tier: "root"}}}}, "is not a tier"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testContract(delegateReply(tc.tasks...), finalReply("did it myself"))
			c.Delegation = tc.policy
			e, w, s := delegSetup(t, Config{})
			st := startRun(t, e, c)
			w.wait(t, st.RunID)
			st, evs := stored(t, s, st.RunID)
			wantStatus(t, st, evs, statusCompleted, "final_answer")
			wantCount(t, evs, "delegation_started", 0)
			refused := ofType(evs, "tool_refused")
			if len(refused) != 1 || refused[0].GetToolRefused().GetTool() != step.DelegateTool || !strings.Contains(refused[0].GetToolRefused().GetReason(), tc.want) {
				t.Fatalf("tool_refused %v, want one for %q saying %q", refused, step.DelegateTool, tc.want)
			}
			// The refusal cost its step, and nothing started.
			if st.Steps != 2 || st.ChildrenStarted != 0 || len(listRuns(t, s.(store.Store))) != 1 {
				t.Fatalf("steps %d, children %d, runs %d; want 2, 0, 1", st.Steps, st.ChildrenStarted, len(listRuns(t, s.(store.Store))))
			}
		})
	}
}

func TestDelegateTooDeep(t *testing.T) {
	// The child (depth 1 of a tree of depth 1) tries to delegate again.
	child := []*reinv1.ScriptedReply{delegateReply(task("deeper")), finalReply("did it myself")}
	c := delegating(child, delegateReply(task("look", "search")), finalReply("done"))
	e, w, s := delegSetup(t, Config{})
	st := startRun(t, e, c)
	w.wait(t, st.RunID)
	st, evs := stored(t, s, st.RunID)
	wantStatus(t, st, evs, statusCompleted, "final_answer")
	ids := children(t, s, evs)
	cst, cevs := stored(t, s, ids[0])
	wantStatus(t, cst, cevs, statusCompleted, "final_answer")
	if r := ofType(cevs, "tool_refused"); len(r) != 1 || !strings.Contains(r[0].GetToolRefused().GetReason(), "no deeper") {
		t.Fatalf("child's refusals %v, want one saying the tree may go no deeper", r)
	}
	if n := len(listRuns(t, s.(store.Store))); n != 2 {
		t.Fatalf("%d runs, want the parent and its one child", n)
	}

	// Its twin: with max_depth 2 the child may delegate once more.
	c = delegating(child, delegateReply(task("look", "search")), finalReply("done"))
	c.Delegation.MaxDepth = 2
	c.Delegation.ChildModels = append(c.Delegation.ChildModels, &reinv1.ModelSpec{Provider: "script", Name: "test", Script: []*reinv1.ScriptedReply{finalReply("leaf")}})
	st, _, err := e.Start(testCtx(t), StartRequest{RequestID: "deep2", Contract: c, Principal: "alice", Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	w.wait(t, st.RunID)
	st, evs = stored(t, s, st.RunID)
	wantStatus(t, st, evs, statusCompleted, "final_answer")
	cst, cevs = stored(t, s, children(t, s, evs)[0])
	wantCount(t, cevs, "delegation_started", 1)
	grand, gevs := stored(t, s, children(t, s, cevs)[0])
	wantStatus(t, grand, gevs, statusCompleted, "final_answer")
	if by := grand.DelegatedBy; by.GetDepth() != 2 || by.GetRootRunId() != st.RunID || by.GetParentRunId() != cst.RunID {
		t.Fatalf("grandchild delegated_by %v", by)
	}
}

// TestTreeCostCapRace races three children, each calling as fast as it
// can, against the root's cost limit: together they never pass it.
func TestTreeCostCapRace(t *testing.T) {
	call := callReply("search", "c", nil)
	call.Usage = usage(50_000, 50_000) // $0.05 + $0.10 a call
	child := repeatReply(call, 20)
	c := delegating(child, delegateReply(task("a", "search"), task("b", "search"), task("c", "search")), finalReply("done"))
	c.Budget = &reinv1.Budget{MaxCostUsd: 1, MaxSteps: 60}
	c.Delegation.MaxShare = 1.0 / 3
	prices, err := pricing.Load(writeTemp(t, "prices.json", `{"script/test": {"input_per_mtok": 1, "output_per_mtok": 2}}`))
	if err != nil {
		t.Fatal(err)
	}
	e, w, s := delegSetup(t, Config{Prices: prices})
	st := startRun(t, e, c)
	w.wait(t, st.RunID)
	st, evs := stored(t, s, st.RunID)
	ids := children(t, s, evs)
	if len(ids) != 3 {
		t.Fatalf("children %v, want 3; log:\n%s", ids, dump(evs))
	}
	total := st.CostUSD
	for _, id := range ids {
		cst, cevs := stored(t, s, id)
		wantStatus(t, cst, cevs, statusExhausted, "max_cost_usd")
		if cst.CostUSD > cst.Contract.GetBudget().GetMaxCostUsd()+1e-9 {
			t.Errorf("child %s spent $%v of its $%v", id, cst.CostUSD, cst.Contract.GetBudget().GetMaxCostUsd())
		}
		for _, ev := range ofType(cevs, "model_returned") {
			total += ev.GetModelReturned().GetCostUsd()
		}
	}
	if total > 1+1e-9 || math.Abs(st.Spent().CostUSD-total) > 1e-9 {
		t.Fatalf("the tree spent $%v (the parent's fold says $%v), over the root's $1", total, st.Spent().CostUSD)
	}
	// What the children did not spend came back, and paid for the
	// parent's last call.
	wantStatus(t, st, evs, statusCompleted, "final_answer")
	if st.Lent != (runstate.Spend{}) || st.Committed().CostUSD > 1+1e-9 {
		t.Fatalf("parent lent %+v, committed %+v", st.Lent, st.Committed())
	}
}

// failingCreate fails the nth Create of a run (a crash between the
// delegation and that child's creation).
type failingCreate struct {
	Store
	mu   sync.Mutex
	n    int
	fail int
}

func (f *failingCreate) Create(ctx context.Context, ev *reinv1.Event) (runstate.State, bool, error) {
	f.mu.Lock()
	f.n++
	n := f.n
	f.mu.Unlock()
	if n == f.fail {
		return runstate.State{}, false, errors.New("injected: the process stopped here")
	}
	return f.Store.Create(ctx, ev)
}

func TestDelegateResumesWithoutDuplicates(t *testing.T) {
	for _, fail := range []int{2, 3} {
		// Create 1 is the parent's; 2 the first child's, 3 the second's.
		t.Run([]string{"", "", "before_first_child", "before_second_child"}[fail], func(t *testing.T) {
			child := []*reinv1.ScriptedReply{callReply("search", "c1", nil), finalReply("found")}
			c := delegating(child, delegateReply(task("a", "search"), task("b", "search")), finalReply("done"))
			s, _ := openStore(t)
			fc := &failingCreate{Store: s, fail: fail}
			e, w, _ := delegSetup(t, Config{Store: fc})
			st := startRun(t, e, c)
			waitRun(t, e, st.RunID)
			e.Close()
			st, evs := stored(t, s, st.RunID)
			if st.Status != statusRunning || !st.Waiting() {
				t.Fatalf("after the crash the parent is %s, waiting %v; log:\n%s", runstate.StatusName(st.Status), st.Waiting(), dump(evs))
			}
			// A new engine carries the tree on.
			e2, w2, _ := delegSetup(t, Config{Store: s})
			_ = w
			if err := e2.ResumeAll(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			w2.wait(t, st.RunID)
			st, evs = stored(t, s, st.RunID)
			wantStatus(t, st, evs, statusCompleted, "final_answer")
			wantCount(t, evs, "delegation_returned", 2)
			if n := len(listRuns(t, s)); n != 3 {
				t.Fatalf("%d runs, want the parent and 2 children, no duplicate", n)
			}
		})
	}
}

// blockingChildren is a model spy whose children's calls block until
// their context ends.
func blockingChildren(started chan<- string) *modelSpy {
	return &modelSpy{before: func(ctx context.Context, req *model.Request) {
		if strings.HasPrefix(req.Goal, "child") {
			started <- req.RunID
			<-ctx.Done()
		}
	}}
}

func TestCancelParentCascades(t *testing.T) {
	child := []*reinv1.ScriptedReply{finalReply("never")}
	c := delegating(child, delegateReply(task("child a"), task("child b")), finalReply("done"))
	started := make(chan string, 2)
	spy := blockingChildren(started)
	e, w, s := delegSetup(t, Config{Models: spy.models(nil)})
	st := startRun(t, e, c)
	ctx := testCtx(t)
	for range 2 {
		select {
		case <-started:
		case <-ctx.Done():
			t.Fatal("children did not start")
		}
	}
	if _, err := e.Cancel(ctx, st.RunID, "", "principal:alice"); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	st, evs := stored(t, s, st.RunID)
	wantStatus(t, st, evs, statusCancelled, "cancelled by principal:alice")
	for _, id := range children(t, s, evs) {
		w.wait(t, id)
		cst, cevs := stored(t, s, id)
		wantStatus(t, cst, cevs, statusCancelled, "cancelled with its parent run "+st.RunID)
	}
	// The parent made no call after its children were cancelled.
	if n := len(ofType(evs, "model_requested")); n != 1 {
		t.Fatalf("parent made %d model calls, want 1; log:\n%s", n, dump(evs))
	}
}

func TestCancelChildIsReported(t *testing.T) {
	child := []*reinv1.ScriptedReply{finalReply("never")}
	c := delegating(child, delegateReply(task("child a")), finalReply("went on without it"))
	started := make(chan string, 1)
	spy := blockingChildren(started)
	e, w, s := delegSetup(t, Config{Models: spy.models(nil)})
	st := startRun(t, e, c)
	ctx := testCtx(t)
	var id string
	select {
	case id = <-started:
	case <-ctx.Done():
		t.Fatal("child did not start")
	}
	if _, err := e.Cancel(ctx, id, "not needed", "principal:alice"); err != nil {
		t.Fatalf("Cancel child: %v", err)
	}
	w.wait(t, st.RunID)
	st, evs := stored(t, s, st.RunID)
	wantStatus(t, st, evs, statusCompleted, "final_answer")
	r := ofType(evs, "delegation_returned")
	if len(r) != 1 || r[0].GetDelegationReturned().GetStatus() != statusCancelled || r[0].GetDelegationReturned().GetReason() != "not needed" {
		t.Fatalf("delegation_returned %v, want the child cancelled", r)
	}
}

func TestParentDeadlineCutsChildren(t *testing.T) {
	child := []*reinv1.ScriptedReply{finalReply("never")}
	c := delegating(child, delegateReply(task("child a")), finalReply("done"))
	c.Budget = &reinv1.Budget{Timeout: durationpb.New(2 * time.Second)}
	started := make(chan string, 1)
	spy := blockingChildren(started)
	e, w, s := delegSetup(t, Config{Models: spy.models(nil), Clock: newClock(t0, 0).Now})
	st := startRun(t, e, c)
	w.wait(t, st.RunID)
	st, evs := stored(t, s, st.RunID)
	id := children(t, s, evs)[0]
	cst, cevs := stored(t, s, id)
	wantStatus(t, cst, cevs, statusExhausted, "deadline")
	if cst.Deadline.After(st.Deadline) {
		t.Fatalf("child deadline %s after the parent's %s", cst.Deadline, st.Deadline)
	}
	if r := ofType(evs, "delegation_returned"); len(r) != 1 || r[0].GetDelegationReturned().GetStatus() != statusExhausted {
		t.Fatalf("delegation_returned %v, want the child budget_exhausted", r)
	}
}

func TestChildWriteApprovedOnce(t *testing.T) {
	child := []*reinv1.ScriptedReply{callReply("send_email", "w1", nil), finalReply("sent")}
	c := delegating(child, delegateReply(task("send it", "send_email")), finalReply("done"))
	tl := searchTools(t)
	e, w, s := delegSetup(t, Config{Tools: tl})
	st := startRun(t, e, c)
	ctx := testCtx(t)
	// Wait for the child to pause for approval.
	var cst runstate.State
	for {
		_, evs := stored(t, s, st.RunID)
		// delegation_started is committed before its child is made: until
		// the child is stored, wait on the parent's driver, which makes it.
		if ids := children(t, s, evs); len(ids) == 1 && childStored(t, s, ids[0]) {
			if err := e.Wait(ctx, ids[0]); err != nil {
				t.Fatal(err)
			}
			if cst, _ = stored(t, s, ids[0]); cst.Status == statusNeedsApproval {
				break
			}
		}
		if ctx.Err() != nil {
			t.Fatal("the child did not pause for approval")
		}
		waitRun(t, e, st.RunID)
	}
	p := cst.Pending.GetProposal()
	v := Verdict{RunID: cst.RunID, ProposalID: p.GetProposalId(), ProposalHash: p.GetHash(), Approve: true, Principal: "bob"}
	if _, err := e.DecideApproval(ctx, v); err != nil {
		t.Fatalf("approve: %v", err)
	}
	// The twin: a second approval of the same proposal is refused.
	if _, err := e.DecideApproval(ctx, v); !errors.Is(err, ErrNotWaiting) {
		t.Fatalf("second approval: %v, want ErrNotWaiting", err)
	}
	w.wait(t, st.RunID)
	st, evs := stored(t, s, st.RunID)
	wantStatus(t, st, evs, statusCompleted, "final_answer")
	tl.wantCalls(t, 0, 1, 1)
}

func TestForkRefusedWhileWaiting(t *testing.T) {
	child := []*reinv1.ScriptedReply{finalReply("done")}
	c := delegating(child, delegateReply(task("a")), finalReply("done"))
	e, w, s := delegSetup(t, Config{})
	st := startRun(t, e, c)
	w.wait(t, st.RunID)
	_, evs := stored(t, s, st.RunID)
	at := ofType(evs, "delegation_started")[0].GetSequence()
	var fe *taskcontract.FieldError
	if _, _, err := e.Fork(testCtx(t), ForkRequest{RunID: st.RunID, AtSequence: at, RequestID: "f1", Principal: "alice", Tenant: "acme"}); !errors.As(err, &fe) {
		t.Fatalf("fork while waiting: %v, want a FieldError", err)
	}
	// Its twin: after the report, the fork carries the returned child's
	// spend and waits for nothing.
	back := ofType(evs, "delegation_returned")[0].GetSequence()
	f, _, err := e.Fork(testCtx(t), ForkRequest{RunID: st.RunID, AtSequence: back, RequestID: "f2", Principal: "alice", Tenant: "acme"})
	if err != nil {
		t.Fatalf("fork after the report: %v", err)
	}
	if f.Waiting() || f.Returned.Steps != 1 {
		t.Fatalf("fork waiting %v, returned %+v", f.Waiting(), f.Returned)
	}
}

// TestDelegateRetriesAChildItCouldNotCreate: a child the parent could not
// create (the store failed that once) is created when the engine drives the
// parent again a moment later, with no restart, and the tree completes with
// no duplicate child. The twin, TestDelegateResumesWithoutDuplicates, stops
// the engine before that retry: the parent waits for a restart.
func TestDelegateRetriesAChildItCouldNotCreate(t *testing.T) {
	child := []*reinv1.ScriptedReply{callReply("search", "c1", nil), finalReply("found")}
	c := delegating(child, delegateReply(task("a", "search"), task("b", "search")), finalReply("done"))
	s, _ := openStore(t)
	fc := &failingCreate{Store: s, fail: 2} // the first child's: no child runs to wake the parent
	e, w, _ := delegSetup(t, Config{Store: fc, RetryWait: 10 * time.Millisecond})
	st := startRun(t, e, c)
	w.wait(t, st.RunID)
	st, evs := stored(t, s, st.RunID)
	wantStatus(t, st, evs, statusCompleted, "final_answer")
	wantCount(t, evs, "delegation_returned", 2)
	if n := len(listRuns(t, s)); n != 3 {
		t.Fatalf("%d runs, want the parent and 2 children, no duplicate", n)
	}
}

// childStored reports whether the run is stored yet; an error other than
// not found fails the test.
func childStored(t *testing.T, s Store, runID string) bool {
	t.Helper()
	_, err := s.Load(testCtx(t), runID)
	if errors.Is(err, store.ErrNotFound) {
		return false
	}
	if err != nil {
		t.Fatalf("Load(%s): %v", runID, err)
	}
	return true
}
