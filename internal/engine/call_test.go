package engine

// Tests of the model call's one retry and of cost: the price table, the
// run's cost, and budget.max_cost_usd.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/pricing"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/taskcontract"
	"github.com/reinhq/rein/internal/tools"
)

// flakyModel answers each call with the next of its outcomes: an error, or
// (when the error is nil) the scripted model's reply for the step. It
// records every request's output cap.
type flakyModel struct {
	script *model.Script
	mu     sync.Mutex
	errs   []error
	calls  int
	caps   []uint64
}

func (f *flakyModel) Next(ctx context.Context, req *model.Request) (*model.Reply, error) {
	f.mu.Lock()
	f.calls++
	f.caps = append(f.caps, req.MaxOutputTokens)
	var err error
	if len(f.errs) > 0 {
		err, f.errs = f.errs[0], f.errs[1:]
	}
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return f.script.Next(ctx, req)
}

func (f *flakyModel) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// waits records the retry waits the engine asked for, without sleeping.
type waits struct {
	mu sync.Mutex
	d  []time.Duration
}

func (w *waits) Wait(_ context.Context, d time.Duration) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.d = append(w.d, d)
	return nil
}

func httpErr(status int, after time.Duration) error {
	return &model.HTTPError{Provider: "test", StatusCode: status, Message: "boom", RetryAfter: after, KeyEnv: "TEST_API_KEY"}
}

func flakySetup(t *testing.T, c *reinv1.TaskContract, errs ...error) (*Engine, Store, *flakyModel, *waits) {
	t.Helper()
	f := &flakyModel{script: model.NewScript(c.GetModel().GetScript()), errs: errs}
	w := &waits{}
	e, s := setup(t, Config{Models: func(*reinv1.ModelSpec) (model.Model, error) { return f, nil }, Wait: w.Wait})
	return e, s, f, w
}

func TestRetryAfterRateLimitThenSuccess(t *testing.T) {
	c := testContract(finalReply("42"))
	e, s, f, w := flakySetup(t, c, httpErr(429, 3*time.Second))
	st, evs := runToRest(t, e, s, c)
	wantStatus(t, st, evs, statusCompleted, "final_answer")
	wantCount(t, evs, "model_retried", 1)
	wantCount(t, evs, "model_requested", 1)
	r := ofType(evs, "model_retried")[0].GetModelRetried()
	if r.GetWait().AsDuration() != 3*time.Second || r.GetStep() != 1 || !strings.Contains(r.GetError(), "429") {
		t.Fatalf("model_retried = %v, want step 1, the 429 and Retry-After's 3s", r)
	}
	if f.Calls() != 2 || len(w.d) != 1 || w.d[0] != 3*time.Second {
		t.Fatalf("%d calls, waits %v; want 2 calls after one 3s wait", f.Calls(), w.d)
	}
}

func TestServerErrorTwiceFails(t *testing.T) {
	c := testContract(finalReply("42"))
	e, s, f, w := flakySetup(t, c, httpErr(500, 0), httpErr(500, 0))
	st, evs := runToRest(t, e, s, c)
	wantStatus(t, st, evs, statusFailed, "model_error")
	wantCount(t, evs, "model_retried", 1)
	if f.Calls() != 2 || len(w.d) != 1 || w.d[0] != time.Second {
		t.Fatalf("%d calls, waits %v; want 2 calls, one default 1s wait", f.Calls(), w.d)
	}
	if !strings.Contains(st.LastError, "after one retry") {
		t.Fatalf("error %q does not say it was retried", st.LastError)
	}
}

func TestKeyRefusedFailsWithoutRetry(t *testing.T) {
	c := testContract(finalReply("42"))
	e, s, f, w := flakySetup(t, c, httpErr(401, 0))
	st, evs := runToRest(t, e, s, c)
	wantStatus(t, st, evs, statusFailed, "model_error")
	wantCount(t, evs, "model_retried", 0)
	if f.Calls() != 1 || len(w.d) != 0 {
		t.Fatalf("%d calls, %d waits; a 401 is not retried", f.Calls(), len(w.d))
	}
	if !strings.Contains(st.LastError, "TEST_API_KEY") {
		t.Fatalf("error %q does not say which key to set", st.LastError)
	}
}

func TestRetryPastDeadlineExhausts(t *testing.T) {
	c := testContract(finalReply("42"))
	c.Budget = &reinv1.Budget{Timeout: durationpb.New(time.Minute)}
	e, s, f, _ := flakySetup(t, c, httpErr(429, 2*time.Minute))
	st, evs := runToRest(t, e, s, c)
	wantStatus(t, st, evs, statusExhausted, "deadline")
	wantCount(t, evs, "model_retried", 0)
	if f.Calls() != 1 {
		t.Fatalf("%d calls; a retry that would pass the deadline is not sent", f.Calls())
	}
	// The failure is data on budget_reached, for replay.
	var late *reinv1.RetryPastDeadline
	for _, ev := range evs {
		if br := ev.GetBudgetReached(); br != nil {
			late = br.GetRetryPastDeadline()
		}
	}
	if late.GetStep() != 1 || late.GetWait().AsDuration() != 2*time.Minute || !strings.Contains(late.GetError(), "429") {
		t.Fatalf("budget_reached's retry_past_deadline %v; want step 1's 429 and its 2m wait", late)
	}
}

func TestRetryWaitTooLongFails(t *testing.T) {
	c := testContract(finalReply("42"))
	e, s, f, _ := flakySetup(t, c, httpErr(429, time.Hour))
	st, evs := runToRest(t, e, s, c)
	wantStatus(t, st, evs, statusFailed, "model_error")
	if f.Calls() != 1 || !strings.Contains(st.LastError, "try again later") {
		t.Fatalf("%d calls, error %q; want one call and advice to try later", f.Calls(), st.LastError)
	}
}

// priced is an engine whose price table charges $1 per million input tokens
// and $2 per million output tokens for script/test.
func priced(t *testing.T, c *reinv1.TaskContract) (*Engine, Store, *flakyModel) {
	t.Helper()
	f := &flakyModel{script: model.NewScript(c.GetModel().GetScript())}
	prices, err := pricing.Load(writeTemp(t, "prices.json", `{"script/test": {"input_per_mtok": 1, "output_per_mtok": 2}}`))
	if err != nil {
		t.Fatal(err)
	}
	e, s := setup(t, Config{Prices: prices, Models: func(*reinv1.ModelSpec) (model.Model, error) { return f, nil }})
	return e, s, f
}

func writeTemp(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCostIsFoldedFromEachCall(t *testing.T) {
	search := callReply("search", "c1", nil)
	search.Usage = usage(1_000_000, 500_000)
	final := finalReply("42")
	final.Usage = usage(2_000_000, 0)
	c := testContract(search, final)
	e, s, _ := priced(t, c)
	st, evs := runToRest(t, e, s, c)
	wantStatus(t, st, evs, statusCompleted, "final_answer")
	// $1 + $1 for the first call, $2 for the second.
	if math.Abs(st.CostUSD-4) > 1e-9 || math.Abs(st.Proto(false).GetCostUsd()-4) > 1e-9 {
		t.Fatalf("run cost $%v, want $4", st.CostUSD)
	}
	if got := ofType(evs, "model_returned")[0].GetModelReturned().GetCostUsd(); math.Abs(got-2) > 1e-9 {
		t.Fatalf("first call cost $%v, want $2", got)
	}
}

func TestMaxCostCapsOutput(t *testing.T) {
	first := callReply("search", "c1", nil)
	first.Usage = usage(100_000, 100_000) // $0.10 + $0.20
	c := testContract(first, finalReply("42"))
	c.Budget = &reinv1.Budget{MaxCostUsd: 0.5}
	e, s, f := priced(t, c)
	st, evs := runToRest(t, e, s, c)
	wantStatus(t, st, evs, statusCompleted, "final_answer")
	// $0.50 buys at most 250,000 output tokens; after the first call's
	// $0.30, $0.20 buys at most 100,000.
	if len(f.caps) != 2 || f.caps[0] == 0 || f.caps[0] > 250_000 || f.caps[1] == 0 || f.caps[1] > 100_000 {
		t.Fatalf("output caps %v, want (0, 250000] then (0, 100000]", f.caps)
	}
	for i, ev := range ofType(evs, "model_requested") {
		mr := ev.GetModelRequested()
		if mr.GetMaxOutputTokens() != f.caps[i] || mr.GetMaxCostUsd() <= 0 || st.CostUSD > 0.5 {
			t.Fatalf("call %d: model_requested %v (cap sent %d), run cost $%v", i+1, mr, f.caps[i], st.CostUSD)
		}
	}
}

func TestMaxCostReachedExhausts(t *testing.T) {
	first := callReply("search", "c1", nil)
	first.Usage = usage(1_000_000, 0) // $1: the whole budget
	c := testContract(first, finalReply("42"))
	c.Budget = &reinv1.Budget{MaxCostUsd: 1}
	e, s, f := priced(t, c)
	st, evs := runToRest(t, e, s, c)
	wantStatus(t, st, evs, statusExhausted, "max_cost_usd")
	if f.Calls() != 1 {
		t.Fatalf("%d model calls; the second must not be paid for", f.Calls())
	}
	if b := ofType(evs, "budget_reached"); len(b) != 1 || b[0].GetBudgetReached().GetLimit() != "max_cost_usd" {
		t.Fatalf("budget_reached = %v", b)
	}
}

func TestMaxCostWithoutPriceRefused(t *testing.T) {
	c := testContract(finalReply("42"))
	c.Model.Provider, c.Model.Name = "script", "test"
	c.Budget = &reinv1.Budget{MaxCostUsd: 1}
	e, _ := setup(t, Config{Prices: &pricing.Table{}})
	_, _, err := e.Start(testCtx(t), StartRequest{RequestID: "r", Contract: c, Principal: "alice", Tenant: "acme"})
	var fe *taskcontract.FieldError
	if !errors.As(err, &fe) || fe.Field != "contract.budget.max_cost_usd" || !strings.Contains(fe.Description, "--prices") {
		t.Fatalf("err = %v, want a FieldError on max_cost_usd naming --prices", err)
	}
}

// TestRecordedPriceOutlivesTheTable: a run carried on by a server without
// its model's price keeps the price its calls were recorded at, so its cost
// limit still holds; with no price anywhere, no call is paid for.
func TestRecordedPriceOutlivesTheTable(t *testing.T) {
	first := askReply("which?")
	first.Usage = usage(100_000, 0) // $0.10
	second := finalReply("done")
	second.Usage = usage(100_000, 0)
	c := testContract(first, second)
	c.Budget = &reinv1.Budget{MaxCostUsd: 1}
	prices, err := pricing.Load(writeTemp(t, "prices.json", `{"script/test": {"input_per_mtok": 1, "output_per_mtok": 2}}`))
	if err != nil {
		t.Fatal(err)
	}
	bs, _ := openStore(t)
	e1 := newEngine(t, Config{Store: bs, Prices: prices})
	st := startRun(t, e1, c)
	waitRun(t, e1, st.RunID)
	e1.Close()

	e2 := newEngine(t, Config{Store: bs, Prices: pricing.New(nil)})
	if _, err := e2.ProvideInput(testCtx(t), st.RunID, "that one", "alice"); err != nil {
		t.Fatal(err)
	}
	waitRun(t, e2, st.RunID)
	got, evs := stored(t, bs, st.RunID)
	wantStatus(t, got, evs, statusCompleted, "final_answer")
	if math.Abs(got.CostUSD-0.2) > 1e-9 {
		t.Fatalf("cost $%v, want $0.20: the second call priced at the recorded price", got.CostUSD)
	}
	for _, ev := range ofType(evs, "model_requested") {
		if p := ev.GetModelRequested().GetPrice(); p.GetInputPerMtok() != 1 || p.GetOutputPerMtok() != 2 {
			t.Fatalf("model_requested %d records price %v", ev.GetSequence(), p)
		}
	}
}

func TestNoPriceAnywhereStopsBeforePaying(t *testing.T) {
	c := taskcontract.WithDefaults(testContract(finalReply("done")))
	c.Budget.MaxCostUsd = 1
	bs, _ := openStore(t)
	// A run started where its model was priced, stopped before its first
	// call: its log records no price.
	started := &reinv1.Event{RunId: "run_unpriced", Sequence: 1, RecordedAt: timestamppb.New(t0), Actor: "principal:alice",
		Payload: &reinv1.Event_RunStarted{RunStarted: &reinv1.RunStarted{Contract: c, Principal: "alice", Tenant: "acme", RequestId: "r"}}}
	if _, _, err := bs.Create(testCtx(t), started); err != nil {
		t.Fatal(err)
	}
	f := &flakyModel{script: model.NewScript(c.GetModel().GetScript())}
	e := newEngine(t, Config{Store: bs, Prices: pricing.New(nil), Models: func(*reinv1.ModelSpec) (model.Model, error) { return f, nil }})
	if err := e.Resume(testCtx(t), "run_unpriced"); err != nil {
		t.Fatal(err)
	}
	waitRun(t, e, "run_unpriced")
	got, evs := stored(t, bs, "run_unpriced")
	wantStatus(t, got, evs, statusExhausted, "max_cost_usd")
	if f.Calls() != 0 {
		t.Fatalf("%d model calls paid for with no price to hold the limit", f.Calls())
	}
}

// TestRefusedWriteIsAnObservation: a commit its tool refuses (nothing was
// written) is write_refused, an observation for the model, and the run goes
// on; the twin, a commit that fails for an unknown reason, leaves the
// outcome to a person.
func TestRefusedWriteIsAnObservation(t *testing.T) {
	for _, tc := range []struct {
		name    string
		result  tools.FixtureResult
		payload string
		status  reinv1.RunStatus
	}{
		{"refused", tools.FixtureResult{Preview: mustValue(t, "send it"), Refused: "the mailbox is full"}, "write_refused", statusCompleted},
		{"unknown", tools.FixtureResult{Preview: mustValue(t, "send it"), Receipt: mustValue(t, "sent")}, "write_outcome_unknown", statusNeedsApproval},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spy := &modelSpy{}
			var ex tools.Executor = tools.NewFixtures(map[string][]tools.FixtureResult{"search": {{Output: mustValue(t, "found")}}, "send_email": {tc.result}})
			if tc.name == "unknown" {
				ex = commitFails{ex}
			}
			e, s := setup(t, Config{Tools: ex, Models: spy.models(nil)})
			c := testContract(callReply("send_email", "w1", nil), finalReply("could not send"))
			st := startRun(t, e, c)
			waitRun(t, e, st.RunID)
			paused, _ := stored(t, s, st.RunID)
			p := paused.Pending.GetProposal()
			if _, err := e.DecideApproval(testCtx(t), Verdict{RunID: st.RunID, ProposalID: p.GetProposalId(), ProposalHash: p.GetHash(),
				Approve: true, Principal: "bob"}); err != nil {
				t.Fatal(err)
			}
			waitRun(t, e, st.RunID)
			got, evs := stored(t, s, st.RunID)
			if got.Status != tc.status {
				t.Fatalf("run is %s, want %s:\n%s", runstate.StatusName(got.Status), runstate.StatusName(tc.status), dump(evs))
			}
			wantCount(t, evs, tc.payload, 1)
			wantCount(t, evs, "write_committed", 0)
			if tc.name == "refused" {
				last := spy.requests()[len(spy.requests())-1].Transcript
				o := last[len(last)-1].Observation
				if o == nil || !strings.Contains(o.Text, "the mailbox is full") || !strings.Contains(o.Text, "nothing was written") {
					t.Fatalf("the model was last shown %+v, want the refusal", last[len(last)-1])
				}
				if got.ApprovedWrite != nil || got.WriteOperationID != "" {
					t.Fatalf("a refused write is still in flight: %v %q", got.ApprovedWrite, got.WriteOperationID)
				}
			}
		})
	}
}

// commitFails is an executor whose commits fail for a reason it cannot
// tell (a lost connection), and that has no lookup.
type commitFails struct{ tools.Executor }

func (commitFails) Commit(context.Context, tools.Call, string) (*structpb.Value, error) {
	return nil, errors.New("connection reset")
}

// resendRefused is a write tool whose first commit is lost (an unknown
// outcome), whose lookup says it was not applied, and whose second commit
// is refused.
type resendRefused struct {
	tools.Executor
	commits int
}

func (r *resendRefused) Commit(context.Context, tools.Call, string) (*structpb.Value, error) {
	r.commits++
	if r.commits == 1 {
		return nil, errors.New("connection reset")
	}
	return nil, fmt.Errorf("%w: the file changed since the proposal", tools.ErrRefused)
}

func (r *resendRefused) Lookup(context.Context, tools.Call, string) (*structpb.Value, bool, error) {
	return nil, false, nil
}

// TestRefusalOfAResendIsUnknown: a write sent again after an unknown outcome
// and then refused is not known to be unwritten (the first send may have
// applied it), so it is left to a person, never told to the model as
// refused.
func TestRefusalOfAResendIsUnknown(t *testing.T) {
	ex := &resendRefused{Executor: tools.NewFixtures(map[string][]tools.FixtureResult{
		"search":     {{Output: mustValue(t, "found")}},
		"send_email": {{Preview: mustValue(t, "send it"), Receipt: mustValue(t, "sent")}},
	})}
	e, s := setup(t, Config{Tools: ex})
	st := startRun(t, e, testContract(callReply("send_email", "w1", nil), finalReply("done")))
	waitRun(t, e, st.RunID)
	paused, _ := stored(t, s, st.RunID)
	p := paused.Pending.GetProposal()
	if _, err := e.DecideApproval(testCtx(t), Verdict{RunID: st.RunID, ProposalID: p.GetProposalId(), ProposalHash: p.GetHash(), Approve: true, Principal: "bob"}); err != nil {
		t.Fatal(err)
	}
	got, evs := stored(t, s, st.RunID)
	if got.Status != statusNeedsApproval || ex.commits != 2 {
		t.Fatalf("run %s after %d commits:\n%s", runstate.StatusName(got.Status), ex.commits, dump(evs))
	}
	wantCount(t, evs, "write_refused", 0)
	wantCount(t, evs, "write_outcome_unknown", 1)
	// A fork inside the decision (after approval_decided, before the
	// outcome's status change) would wait for nobody: refused.
	for _, ev := range evs {
		if ev.GetApprovalDecided() != nil {
			_, _, err := e.Fork(testCtx(t), ForkRequest{RunID: st.RunID, AtSequence: ev.GetSequence(), RequestID: "fork", Principal: "alice", Tenant: "acme"})
			var fe *taskcontract.FieldError
			if !errors.As(err, &fe) || !strings.Contains(fe.Description, "inside a person's decision") {
				t.Fatalf("fork at approval_decided: %v, want a refusal", err)
			}
		}
	}
}
