package engine

// Tests of the engine around the step loop: starting runs (validation,
// idempotency), cancelling them, refusing terminal runs, bounding how many
// step at once, and carrying a run on after a restart.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/taskcontract"
	"github.com/reinhq/rein/internal/tools"
)

func listRuns(t *testing.T, s store.Store) []runstate.State {
	t.Helper()
	page, err := s.List(testCtx(t), store.Filter{Limit: 100})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	return page.Runs
}

// Start with a request ID seen before returns the first run and stores
// nothing; another ID, or the same ID from another tenant, is a new run.
func TestStartIdempotent(t *testing.T) {
	for _, tc := range []struct {
		name      string
		requestID string
		tenant    string
		same      bool
	}{
		{"same request id", "req-1", "acme", true},
		{"another request id (twin)", "req-2", "acme", false},
		{"same request id, another tenant (twin)", "req-1", "globex", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spy := &modelSpy{}
			e, s := setup(t, Config{Models: spy.models(nil)})
			ctx := testCtx(t)
			c := testContract(finalReply("done"))
			first, created, err := e.Start(ctx, StartRequest{RequestID: "req-1", Contract: c, Principal: "alice", Tenant: "acme"})
			if err != nil || !created {
				t.Fatalf("first Start: created %v, %v", created, err)
			}
			waitRun(t, e, first.RunID)

			second, created, err := e.Start(ctx, StartRequest{RequestID: tc.requestID, Contract: c, Principal: "alice", Tenant: tc.tenant})
			if err != nil {
				t.Fatalf("second Start: %v", err)
			}
			waitRun(t, e, second.RunID)
			if (second.RunID == first.RunID) != tc.same || created == tc.same {
				t.Fatalf("second Start: run %s (first %s), created %v; want the same run: %v", second.RunID, first.RunID, created, tc.same)
			}
			st, evs := stored(t, s, first.RunID)
			wantStatus(t, st, evs, statusCompleted, "final_answer")
			wantCount(t, evs, "run_started", 1)
			wantCount(t, evs, "model_requested", 1)
			runs, calls := 2, int32(2)
			if tc.same {
				runs, calls = 1, 1
				if second.Version != st.Version || second.Status != st.Status {
					t.Errorf("second Start returned version %d (%s), want the stored run's %d (%s)",
						second.Version, runstate.StatusName(second.Status), st.Version, runstate.StatusName(st.Status))
				}
			}
			if got := len(listRuns(t, s)); got != runs {
				t.Errorf("%d runs stored, want %d", got, runs)
			}
			if got := spy.calls.Load(); got != calls {
				t.Errorf("%d model calls, want %d", got, calls)
			}
		})
	}
}

// Start refuses an invalid contract with a *taskcontract.FieldError naming the field, and
// stores nothing.
func TestStartRejectsInvalidContract(t *testing.T) {
	for _, tc := range []struct {
		name      string
		requestID string
		mutate    func(c *reinv1.TaskContract) *reinv1.TaskContract
		field     string // "" for a valid request (the twin)
	}{
		{"valid (twin)", "req", func(c *reinv1.TaskContract) *reinv1.TaskContract { return c }, ""},
		{"missing request id", "", func(c *reinv1.TaskContract) *reinv1.TaskContract { return c }, "request_id"},
		{"no contract", "req", func(*reinv1.TaskContract) *reinv1.TaskContract { return nil }, "contract"},
		{"missing goal", "req", func(c *reinv1.TaskContract) *reinv1.TaskContract { c.Goal = ""; return c }, "contract.goal"},
		{"contract over its bound", "req", func(c *reinv1.TaskContract) *reinv1.TaskContract {
			c.Goal = strings.Repeat("g", taskcontract.MaxBytes)
			return c
		}, "contract"},
		{"contract just under its bound (twin)", "req", func(c *reinv1.TaskContract) *reinv1.TaskContract {
			c.Goal = strings.Repeat("g", taskcontract.MaxBytes-4096)
			return c
		}, ""},
		{"tier unspecified", "req", func(c *reinv1.TaskContract) *reinv1.TaskContract {
			c.Tools[0].Tier = reinv1.ToolTier_TOOL_TIER_UNSPECIFIED
			return c
		}, "contract.tools[0].tier"},
		{"unknown tier", "req", func(c *reinv1.TaskContract) *reinv1.TaskContract { c.Tools[2].Tier = 99; return c }, "contract.tools[2].tier"},
		{"duplicate tool", "req", func(c *reinv1.TaskContract) *reinv1.TaskContract {
			c.Tools[1].Name = c.Tools[0].Name
			return c
		}, "contract.tools[1].name"},
		{"bad tool name", "req", func(c *reinv1.TaskContract) *reinv1.TaskContract { c.Tools[0].Name = "rm -rf"; return c }, "contract.tools[0].name"},
		{"no model", "req", func(c *reinv1.TaskContract) *reinv1.TaskContract { c.Model = nil; return c }, "contract.model"},
		{"unknown model provider", "req", func(c *reinv1.TaskContract) *reinv1.TaskContract {
			c.Model.Provider = "oracle-of-delphi"
			return c
		}, "contract.model.provider"},
		{"zero timeout", "req", func(c *reinv1.TaskContract) *reinv1.TaskContract {
			c.Budget = &reinv1.Budget{Timeout: durationpb.New(0)}
			return c
		}, "contract.budget.timeout"},
		{"negative proposal ttl", "req", func(c *reinv1.TaskContract) *reinv1.TaskContract {
			c.Approval = &reinv1.ApprovalPolicy{ProposalTtl: durationpb.New(-time.Second)}
			return c
		}, "contract.approval.proposal_ttl"},
		{"completion checks without a workspace", "req", func(c *reinv1.TaskContract) *reinv1.TaskContract {
			c.Checks = []*reinv1.Check{{Name: "tests", Argv: []string{"go", "test"}}}
			return c
		}, "contract.checks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, s := setup(t, Config{})
			c := tc.mutate(testContract(finalReply("done")))
			st, _, err := e.Start(testCtx(t), StartRequest{RequestID: tc.requestID, Contract: c, Principal: "alice", Tenant: "acme"})
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Start: %v", err)
				}
				waitRun(t, e, st.RunID)
				if got := len(listRuns(t, s)); got != 1 {
					t.Errorf("%d runs stored, want 1", got)
				}
				return
			}
			var fe *taskcontract.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Start: %v (%T), want a *taskcontract.FieldError", err, err)
			}
			if fe.Field != tc.field || fe.Description == "" {
				t.Errorf("FieldError{%q, %q}, want field %q with a description", fe.Field, fe.Description, tc.field)
			}
			if got := listRuns(t, s); len(got) != 0 {
				t.Errorf("a refused Start stored %d runs", len(got))
			}
		})
	}
}

// Cancel ends a paused run and returns the cancelled state it recorded.
func TestCancelPausedRun(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply *reinv1.ScriptedReply
		from  reinv1.RunStatus
	}{
		{"needs_input", askReply("Which quarter?"), statusNeedsInput},
		{"needs_approval", callReply("send_email", "call-1", nil), statusNeedsApproval},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ex := searchTools(t)
			e, s := setup(t, Config{Tools: ex})
			paused, _ := runToRest(t, e, s, testContract(tc.reply))
			if paused.Status != tc.from {
				t.Fatalf("run is %s, want %s", runstate.StatusName(paused.Status), runstate.StatusName(tc.from))
			}
			got, err := e.Cancel(testCtx(t), paused.RunID, "no longer needed", "principal:bob")
			if err != nil {
				t.Fatalf("Cancel: %v", err)
			}
			st, evs := stored(t, s, paused.RunID)
			if got.Status != statusCancelled || !proto.Equal(got.Proto(true), st.Proto(true)) {
				t.Errorf("Cancel returned %v, want the stored cancelled state %v", got.Proto(false), st.Proto(false))
			}
			last := evs[len(evs)-1]
			sc := last.GetStatusChanged()
			if sc.GetFrom() != tc.from || sc.GetTo() != statusCancelled || sc.GetReason() != "no longer needed" || last.GetActor() != "principal:bob" {
				t.Errorf("last event = %v (actor %s), want %s→cancelled by principal:bob", sc, last.GetActor(), runstate.StatusName(tc.from))
			}
			if st.Pending != nil {
				t.Errorf("a cancelled run keeps a pending action: %v", st.Pending)
			}
			ex.wantCalls(t, 0, int32(len(ofType(evs, "approval_requested"))), 0)
		})
	}
}

// Cancel reaches a running run's in-flight model call through its context,
// and records cancelled before it returns.
func TestCancelRunningRun(t *testing.T) {
	entered := make(chan struct{}, 1)
	type outcome struct{ err, cause error }
	ended := make(chan outcome, 1)
	spy := &modelSpy{
		before: func(context.Context, *model.Request) { entered <- struct{}{} },
		after:  func(ctx context.Context, err error) { ended <- outcome{err, context.Cause(ctx)} },
	}
	e, s := setup(t, Config{Models: spy.models(nil)})
	reply := finalReply("too late")
	reply.DelayMs = 60 * 60 * 1000
	ctx := testCtx(t)
	started := startRun(t, e, testContract(reply))
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the model call never started")
	}

	got, err := e.Cancel(ctx, started.RunID, "", "principal:bob")
	if err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	// The driver has exited by the time Cancel returns, so its call has too.
	select {
	case o := <-ended:
		if !errors.Is(o.err, context.Canceled) || !errors.Is(o.cause, errCancelled) {
			t.Errorf("the in-flight model call ended with %v (cause %v), want it cancelled by the run's cancellation", o.err, o.cause)
		}
	default:
		t.Fatal("Cancel returned while the model call was still in flight")
	}
	st, evs := stored(t, s, started.RunID)
	wantStatus(t, st, evs, statusCancelled, "cancelled by principal:bob")
	if !proto.Equal(got.Proto(true), st.Proto(true)) {
		t.Errorf("Cancel returned %v, want the stored state %v", got.Proto(false), st.Proto(false))
	}
	want := []string{"run_started", "model_requested", "status_changed"}
	if fmt.Sprint(payloads(evs)) != fmt.Sprint(want) {
		t.Errorf("log = %v, want %v", payloads(evs), want)
	}
	if st.ModelInFlight {
		t.Errorf("a cancelled run has a model call in flight")
	}
}

// A terminal run takes no more events: the store refuses an append and
// Cancel refuses with runstate.ErrTerminal; nothing is stored.
func TestTerminalRunTakesNoEvents(t *testing.T) {
	budget := &reinv1.Budget{MaxSteps: 1}
	for _, tc := range []struct {
		name   string
		script []*reinv1.ScriptedReply
		cancel bool // cancel the run once it pauses
		status reinv1.RunStatus
	}{
		{"completed", []*reinv1.ScriptedReply{finalReply("done")}, false, statusCompleted},
		{"failed", []*reinv1.ScriptedReply{errorReply("HTTP 401")}, false, statusFailed},
		{"budget_exhausted", []*reinv1.ScriptedReply{callReply("search", "call-1", nil)}, false, statusExhausted},
		{"cancelled", []*reinv1.ScriptedReply{askReply("Which quarter?")}, true, statusCancelled},
		{"needs_input (twin)", []*reinv1.ScriptedReply{askReply("Which quarter?")}, false, statusNeedsInput},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, s := setup(t, Config{Tools: searchTools(t)})
			ctx := testCtx(t)
			c := testContract(tc.script...)
			c.Budget = budget
			st, _ := runToRest(t, e, s, c)
			if tc.cancel {
				if _, err := e.Cancel(ctx, st.RunID, "", "principal:bob"); err != nil {
					t.Fatalf("Cancel: %v", err)
				}
			}
			before, evs := stored(t, s, st.RunID)
			if before.Status != tc.status {
				t.Fatalf("run is %s, want %s; log:\n%s", runstate.StatusName(before.Status), runstate.StatusName(tc.status), dump(evs))
			}

			// A budget_reached is legal in every status that is not
			// terminal, so only terminality can refuse it.
			ev := &reinv1.Event{RunId: st.RunID, Sequence: before.Version + 1, RecordedAt: evs[len(evs)-1].GetRecordedAt(), Actor: "harness",
				Payload: &reinv1.Event_BudgetReached{BudgetReached: &reinv1.BudgetReached{Limit: "deadline"}}}
			_, err := s.Append(ctx, st.RunID, before.Version, []*reinv1.Event{ev})
			if !runstate.Terminal(tc.status) {
				if err != nil {
					t.Fatalf("Append to a %s run: %v", runstate.StatusName(tc.status), err)
				}
				if _, err := e.Cancel(ctx, st.RunID, "", "principal:bob"); err != nil {
					t.Errorf("Cancel of a %s run: %v", runstate.StatusName(tc.status), err)
				}
				return
			}
			if !errors.Is(err, runstate.ErrTerminal) {
				t.Errorf("Append to a %s run: %v, want ErrTerminal", runstate.StatusName(tc.status), err)
			}
			got, err := e.Cancel(ctx, st.RunID, "", "principal:bob")
			var se *StatusError
			if !errors.Is(err, runstate.ErrTerminal) || !errors.As(err, &se) || se.Status != tc.status {
				t.Errorf("Cancel of a %s run: %v, want a StatusError wrapping ErrTerminal", runstate.StatusName(tc.status), err)
			}
			if got.Status != tc.status {
				t.Errorf("Cancel returned status %s, want the run's %s", runstate.StatusName(got.Status), runstate.StatusName(tc.status))
			}
			after, afterEvs := stored(t, s, st.RunID)
			if after.Version != before.Version || len(afterEvs) != len(evs) {
				t.Errorf("a refused request stored something: version %d→%d, %d→%d events", before.Version, after.Version, len(evs), len(afterEvs))
			}
		})
	}
}

// gateModel holds every call until the test releases it, and tracks how many
// calls are in flight at once.
type gateModel struct {
	inFlight, peak atomic.Int32
	entered        chan struct{}
	release        chan struct{}
}

func (m *gateModel) Next(ctx context.Context, _ *model.Request) (*model.Reply, error) {
	n := m.inFlight.Add(1)
	defer m.inFlight.Add(-1)
	for p := m.peak.Load(); n > p && !m.peak.CompareAndSwap(p, n); p = m.peak.Load() {
	}
	m.entered <- struct{}{}
	select {
	case <-m.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return &model.Reply{Decision: &reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: "done"}}}}, nil
}

// The executor steps at most Workers runs at once; the others wait their turn
// and complete.
func TestWorkersBoundConcurrency(t *testing.T) {
	const workers, runs = 2, 6
	m := &gateModel{entered: make(chan struct{}, runs), release: make(chan struct{})}
	e, s := setup(t, Config{Workers: workers, Models: func(*reinv1.ModelSpec) (model.Model, error) { return m, nil }})
	ctx := testCtx(t)
	c := testContract()
	c.Model = &reinv1.ModelSpec{Provider: "gate"}
	release := func() {
		t.Helper()
		select {
		case m.release <- struct{}{}:
		case <-ctx.Done():
			t.Fatal("no model call took the release")
		}
	}
	var ids []string
	for i := range runs {
		st, _, err := e.Start(ctx, StartRequest{RequestID: fmt.Sprintf("req-%d", i), Contract: c, Principal: "alice", Tenant: "acme"})
		if err != nil {
			t.Fatalf("Start %d: %v", i, err)
		}
		ids = append(ids, st.RunID)
	}
	// Release the calls one at a time: each release lets one run end and
	// the next waiting run start its call.
	for i := range runs {
		select {
		case <-m.entered:
		case <-ctx.Done():
			t.Fatalf("only %d of %d model calls started", i, runs)
		}
		if i == workers-1 {
			if n := m.inFlight.Load(); n != workers {
				t.Errorf("%d calls in flight once %d started, want %d", n, workers, workers)
			}
		}
		if i >= workers-1 {
			release()
		}
	}
	for range workers - 1 {
		release()
	}
	for _, id := range ids {
		waitRun(t, e, id)
		st, evs := stored(t, s, id)
		wantStatus(t, st, evs, statusCompleted, "final_answer")
	}
	if p := m.peak.Load(); p != workers {
		t.Errorf("at most %d model calls were in flight at once, want %d (Workers)", p, workers)
	}
}

// A run whose engine closed during a model call carries on under a new
// engine over the reopened store: the lost call is requested again, marked
// resumed, and the fold accepts it.
func TestResumeAfterRestart(t *testing.T) {
	s1, path := openStore(t)
	entered := make(chan struct{}, 1)
	spy := &modelSpy{before: func(context.Context, *model.Request) { entered <- struct{}{} }}
	e1 := newEngine(t, Config{Store: s1, Models: spy.models(nil)})
	reply := finalReply("done")
	reply.DelayMs = 60 * 60 * 1000
	ctx := testCtx(t)
	st := startRun(t, e1, testContract(reply))
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the model call never started")
	}
	e1.Close()
	mid, _ := stored(t, s1, st.RunID)
	if mid.Status != statusRunning || !mid.ModelInFlight || mid.Steps != 1 {
		t.Fatalf("after Close the run is %s, model_in_flight %v, steps %d; want running with its call in flight",
			runstate.StatusName(mid.Status), mid.ModelInFlight, mid.Steps)
	}
	if err := s1.Close(); err != nil {
		t.Fatalf("close store: %v", err)
	}

	s2 := reopenStore(t, path)
	// The restarted server's model answers at once: the script's delay only
	// kept the first call in flight until the engine closed.
	noDelay := func(spec *reinv1.ModelSpec) (model.Model, error) {
		spec = proto.Clone(spec).(*reinv1.ModelSpec)
		for _, r := range spec.GetScript() {
			r.DelayMs = 0
		}
		return model.New(spec)
	}
	e2 := newEngine(t, Config{Store: s2, Models: noDelay})
	page, err := s2.List(ctx, store.Filter{Statuses: []reinv1.RunStatus{statusRunning}, Limit: 10})
	if err != nil || len(page.Runs) != 1 || page.Runs[0].RunID != st.RunID {
		t.Fatalf("running runs after restart: %v, %v; want %s", page.Runs, err, st.RunID)
	}
	if err := e2.Resume(ctx, st.RunID); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	waitRun(t, e2, st.RunID)

	end, evs := stored(t, s2, st.RunID)
	wantStatus(t, end, evs, statusCompleted, "final_answer")
	want := []string{"run_started", "model_requested", "run_taken", "model_requested", "model_returned", "status_changed"}
	if fmt.Sprint(payloads(evs)) != fmt.Sprint(want) {
		t.Fatalf("log = %v, want %v", payloads(evs), want)
	}
	// The restarted engine recorded that it took the run, under a newer
	// epoch, in the run's trace.
	if taken := evs[2].GetRunTaken(); taken.GetOwner() == "" || taken.GetEpoch() < 2 || taken.GetTraceId() != end.TraceID {
		t.Errorf("run_taken = %v; want the new owner, an epoch past the first, trace %q", taken, end.TraceID)
	}
	first, again := evs[1].GetModelRequested(), evs[3].GetModelRequested()
	if first.GetResumed() || !again.GetResumed() || again.GetStep() != first.GetStep() || again.GetInputHash() != first.GetInputHash() {
		t.Errorf("model_requested %v then %v; want the same step and input, the second marked resumed", first, again)
	}
	if end.Steps != 1 {
		t.Errorf("steps = %d, want 1: a resumed call repeats its step", end.Steps)
	}
}

// The twin of TestResumeAfterRestart: Resume leaves a paused run alone, and
// refuses a run that does not exist.
func TestResumeIgnoresPausedRun(t *testing.T) {
	spy := &modelSpy{}
	e, s := setup(t, Config{Models: spy.models(nil)})
	st, evs := runToRest(t, e, s, testContract(askReply("Which quarter?")))
	ctx := testCtx(t)
	if err := e.Resume(ctx, st.RunID); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	waitRun(t, e, st.RunID)
	after, afterEvs := stored(t, s, st.RunID)
	if after.Version != st.Version || len(afterEvs) != len(evs) || spy.calls.Load() != 1 {
		t.Errorf("Resume of a paused run changed it: version %d→%d, %d model calls", st.Version, after.Version, spy.calls.Load())
	}
	if err := e.Resume(ctx, "run_missing"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Resume of a missing run: %v, want ErrNotFound", err)
	}
	if _, err := e.Cancel(ctx, "run_missing", "", "principal:bob"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Cancel of a missing run: %v, want ErrNotFound", err)
	}
}

// A read cut short by a restart is not lost silently: after Resume, every
// tool call the model made is answered by a tool_returned (its result, or
// an error saying it was interrupted) before the model is called again.
func TestRestartDuringToolRead(t *testing.T) {
	s1, path := openStore(t)
	entered := make(chan struct{}, 1)
	ex := searchTools(t)
	ex.beforeRead = func(ctx context.Context, _ tools.Call) {
		entered <- struct{}{}
		<-ctx.Done()
	}
	e1 := newEngine(t, Config{Store: s1, Tools: ex})
	ctx := testCtx(t)
	st := startRun(t, e1, testContract(callReply("search", "call-1", nil), finalReply("done")))
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the read never started")
	}
	e1.Close()
	if err := s1.Close(); err != nil {
		t.Fatalf("close store: %v", err)
	}

	s2 := reopenStore(t, path)
	e2 := newEngine(t, Config{Store: s2, Tools: searchTools(t)})
	if err := e2.Resume(ctx, st.RunID); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	waitRun(t, e2, st.RunID)
	end, evs := stored(t, s2, st.RunID)
	wantStatus(t, end, evs, statusCompleted, "final_answer")
	open := map[string]bool{}
	for _, ev := range evs {
		switch {
		case ev.GetToolRequested() != nil:
			open[ev.GetToolRequested().GetCallId()] = true
		case ev.GetToolReturned() != nil:
			delete(open, ev.GetToolReturned().GetCallId())
		case ev.GetModelRequested() != nil && len(open) > 0:
			t.Errorf("model_requested %d while tool calls %v have no tool_returned; log:\n%s", ev.GetSequence(), open, dump(evs))
		}
	}
}

// A model that cannot be built when the driver starts (the server's
// configuration changed since Start) ends the run as failed, naming why.
func TestModelBuildFailureFails(t *testing.T) {
	var builds atomic.Int32
	models := func(spec *reinv1.ModelSpec) (model.Model, error) {
		if builds.Add(1) > 1 {
			return nil, errors.New("no API key for provider script")
		}
		return model.New(spec)
	}
	e, s := setup(t, Config{Models: models})
	st, evs := runToRest(t, e, s, testContract(finalReply("done")))

	wantStatus(t, st, evs, statusFailed, "harness_defect")
	if !strings.Contains(st.LastError, "no API key") {
		t.Errorf("last_error = %q, want it to name the model error", st.LastError)
	}
	wantCount(t, evs, "model_requested", 0)
}
