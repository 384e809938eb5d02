package engine

// Tests of the limits a step checks before it pays for a model call: the
// count limits (max_steps, max_tool_calls), the token budget and the output
// cap each call is given, and the run's deadline, before and during a call.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/model"
)

// A model that asks for the same read over and over is stopped by the count
// limits before the call past them: no model call is paid for past a limit.
func TestCountLimitsExhaust(t *testing.T) {
	read := callReply("search", "call", nil)
	for _, tc := range []struct {
		name   string
		budget *reinv1.Budget
		script []*reinv1.ScriptedReply
		status reinv1.RunStatus
		reason string
		calls  int
		reads  int32
	}{
		{"max_steps", &reinv1.Budget{MaxSteps: 5}, repeatReply(read, 50), statusExhausted, "max_steps", 5, 5},
		{"final answer at the last step (twin)", &reinv1.Budget{MaxSteps: 5},
			append(repeatReply(read, 4), finalReply("done")), statusCompleted, "final_answer", 5, 4},
		{"max_tool_calls", &reinv1.Budget{MaxSteps: 50, MaxToolCalls: 3}, repeatReply(read, 50), statusExhausted, "max_tool_calls", 3, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ex := searchTools(t)
			spy := &modelSpy{}
			e, s := setup(t, Config{Tools: ex, Models: spy.models(nil)})
			c := testContract(tc.script...)
			c.Budget = tc.budget
			st, evs := runToRest(t, e, s, c)

			wantStatus(t, st, evs, tc.status, tc.reason)
			if got := spy.calls.Load(); got != int32(tc.calls) {
				t.Errorf("%d model calls, want %d", got, tc.calls)
			}
			wantCount(t, evs, "model_requested", tc.calls)
			if st.Steps != uint32(tc.calls) {
				t.Errorf("steps = %d, want %d", st.Steps, tc.calls)
			}
			ex.wantCalls(t, tc.reads, 0, 0)
			// Every read that ran has its result in the log, the last one too.
			wantCount(t, evs, "tool_returned", int(tc.reads))
			br := ofType(evs, "budget_reached")
			if tc.status != statusExhausted {
				wantCount(t, evs, "budget_reached", 0)
				return
			}
			if len(br) != 1 || br[0].GetBudgetReached().GetLimit() != tc.reason {
				t.Fatalf("budget_reached = %v, want one with limit %q", br, tc.reason)
			}
		})
	}
}

// tokenModel counts 100 input tokens for every call, replies with a read
// that reports 100 input and 20 output tokens (cut to the cap it is given),
// and records the cap of each call.
type tokenModel struct {
	mu   sync.Mutex
	caps []uint64
}

func (m *tokenModel) CountTokens(context.Context, *model.Request) (uint64, error) { return 100, nil }

func (m *tokenModel) Next(_ context.Context, req *model.Request) (*model.Reply, error) {
	m.mu.Lock()
	m.caps = append(m.caps, req.MaxOutputTokens)
	m.mu.Unlock()
	out := uint64(20)
	if req.MaxOutputTokens > 0 && out > req.MaxOutputTokens {
		out = req.MaxOutputTokens
	}
	return &model.Reply{Decision: callDecision("search", fmt.Sprintf("call-%d", req.Step), nil), Usage: usage(100, out)}, nil
}

// The token budget stops before the call that would exceed it, and each call
// is capped at the tokens left: max - used - input.
func TestTokenBudget(t *testing.T) {
	for _, tc := range []struct {
		name    string
		max     uint64
		specCap uint32
		caps    []uint64
		tokens  uint64
	}{
		{"third call would exceed", 250, 0, []uint64{150, 30}, 240},
		{"input alone fills the rest", 340, 0, []uint64{240, 120}, 240},
		{"one token of room is a call (twin)", 341, 0, []uint64{241, 121, 1}, 341},
		{"the model spec's cap is lower", 250, 25, []uint64{25, 25}, 240},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &tokenModel{}
			e, s := setup(t, Config{Tools: searchTools(t), Models: func(*reinv1.ModelSpec) (model.Model, error) { return m, nil }})
			c := testContract()
			c.Model = &reinv1.ModelSpec{Provider: "test", MaxOutputTokens: tc.specCap}
			c.Budget = &reinv1.Budget{MaxSteps: 50, MaxTokens: tc.max}
			st, evs := runToRest(t, e, s, c)

			wantStatus(t, st, evs, statusExhausted, "max_tokens")
			m.mu.Lock()
			caps := append([]uint64(nil), m.caps...)
			m.mu.Unlock()
			if fmt.Sprint(caps) != fmt.Sprint(tc.caps) {
				t.Errorf("the model was called with caps %v, want %v", caps, tc.caps)
			}
			mrs := ofType(evs, "model_requested")
			if len(mrs) != len(tc.caps) {
				t.Fatalf("%d model_requested, want %d; log:\n%s", len(mrs), len(tc.caps), dump(evs))
			}
			for i, ev := range mrs {
				mr := ev.GetModelRequested()
				if mr.GetMaxOutputTokens() != tc.caps[i] || mr.GetInputTokens() != 100 {
					t.Errorf("model_requested %d: cap %d, input %d; want %d, 100", i+1, mr.GetMaxOutputTokens(), mr.GetInputTokens(), tc.caps[i])
				}
			}
			if st.Tokens() != tc.tokens || st.Tokens() > tc.max {
				t.Errorf("the run used %d tokens, want %d (max %d)", st.Tokens(), tc.tokens, tc.max)
			}
			br := ofType(evs, "budget_reached")
			if len(br) != 1 || br[0].GetBudgetReached().GetLimit() != "max_tokens" {
				t.Errorf("budget_reached = %v, want limit max_tokens", br)
			}
		})
	}
}

// A deadline already past at a step's clock reading ends the run before any
// model call is paid for.
func TestDeadlinePassedBeforeCall(t *testing.T) {
	const timeout = 10 * time.Minute
	for _, tc := range []struct {
		name   string
		step   time.Duration // how far each clock reading moves on
		status reinv1.RunStatus
		reason string
		calls  int
	}{
		{"at the deadline", timeout, statusExhausted, "deadline", 0},
		{"after the deadline", timeout + time.Hour, statusExhausted, "deadline", 0},
		{"a second before the deadline (twin)", timeout - time.Second, statusCompleted, "final_answer", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spy := &modelSpy{}
			e, s := setup(t, Config{Models: spy.models(nil), Clock: newClock(t0, tc.step).Now})
			c := testContract(finalReply("done"))
			c.Budget = &reinv1.Budget{Timeout: durationpb.New(timeout)}
			st, evs := runToRest(t, e, s, c)

			wantStatus(t, st, evs, tc.status, tc.reason)
			if !st.Deadline.Equal(t0.Add(timeout)) {
				t.Errorf("deadline = %v, want start + timeout = %v", st.Deadline, t0.Add(timeout))
			}
			if got := spy.calls.Load(); got != int32(tc.calls) {
				t.Errorf("%d model calls, want %d", got, tc.calls)
			}
			wantCount(t, evs, "model_requested", tc.calls)
		})
	}
}

// A model call cut by the run's deadline ends the run as budget_exhausted,
// not failed: the budget ran out, the client did not fail.
func TestDeadlineCutsModelCall(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		delayMs uint32
		status  reinv1.RunStatus
		reason  string
	}{
		{"reply slower than the deadline", 50 * time.Millisecond, 10 * 60 * 1000, statusExhausted, "deadline"},
		{"reply within the deadline (twin)", time.Hour, 0, statusCompleted, "final_answer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := make(chan error, 1)
			spy := &modelSpy{after: func(_ context.Context, err error) { errs <- err }}
			// The real time, read once: the budget check before the call
			// cannot see the deadline pass however slowly the test machine
			// schedules the driver, so the only thing that can end the run is
			// the model call's context, whose deadline is real.
			start := time.Now()
			e, s := setup(t, Config{Models: spy.models(nil), Clock: func() time.Time { return start }})
			reply := finalReply("done")
			reply.DelayMs = tc.delayMs
			c := testContract(reply)
			c.Budget = &reinv1.Budget{Timeout: durationpb.New(tc.timeout)}
			st, evs := runToRest(t, e, s, c)

			wantStatus(t, st, evs, tc.status, tc.reason)
			wantCount(t, evs, "model_requested", 1)
			if err := <-errs; (err != nil) != (tc.status == statusExhausted) || (err != nil && !errors.Is(err, context.DeadlineExceeded)) {
				t.Errorf("the model call returned %v", err)
			}
			if tc.status != statusExhausted {
				return
			}
			wantCount(t, evs, "model_returned", 0)
			br := ofType(evs, "budget_reached")
			if len(br) != 1 || br[0].GetBudgetReached().GetLimit() != "deadline" {
				t.Errorf("budget_reached = %v, want limit deadline", br)
			}
			if st.LastError != "" || st.ModelInFlight {
				t.Errorf("last_error %q, model_in_flight %v; want neither", st.LastError, st.ModelInFlight)
			}
		})
	}
}

// The deadline the model call carries follows the injected clock, like the
// budget check: a run replayed with its recorded clock (docs/design.md §8), or
// driven by any clock behind the real one, is not cut at once.
func TestDeadlineFollowsInjectedClock(t *testing.T) {
	recorded := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	e, s := setup(t, Config{Clock: newClock(recorded, time.Second).Now})
	c := testContract(finalReply("done"))
	c.Budget = &reinv1.Budget{Timeout: durationpb.New(time.Hour)}
	st, evs := runToRest(t, e, s, c)

	// One second of the run's hour has passed on its clock.
	wantStatus(t, st, evs, statusCompleted, "final_answer")
}

// noUsage answers with a final answer and reports no usage.
type noUsage struct{ usage *reinv1.Usage }

func (m noUsage) Next(context.Context, *model.Request) (*model.Reply, error) {
	return &model.Reply{Decision: &reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: "done"}}}, Usage: m.usage}, nil
}

// A call whose provider reports no usage is counted at rein's estimate
// (its model_requested's input tokens, and its reply's bytes), never as
// free; one that reports usage is counted as reported.
func TestUsageNotReportedIsEstimated(t *testing.T) {
	for _, reported := range []*reinv1.Usage{nil, {InputTokens: 7, OutputTokens: 3}} {
		e, s := setup(t, Config{Tools: searchTools(t), Models: func(*reinv1.ModelSpec) (model.Model, error) { return noUsage{reported}, nil }})
		c := testContract(finalReply("done"))
		c.Budget = &reinv1.Budget{MaxTokens: 100000}
		st, evs := runToRest(t, e, s, c)
		got := ofType(evs, "model_returned")[0].GetModelReturned().GetUsage()
		if reported != nil {
			if got.GetInputTokens() != 7 || got.GetOutputTokens() != 3 || st.Committed().Tokens != 10 {
				t.Errorf("reported usage recorded as %v, counted %d; want 7+3", got, st.Committed().Tokens)
			}
			continue
		}
		in := ofType(evs, "model_requested")[0].GetModelRequested().GetInputTokens()
		if got.GetInputTokens() != in || got.GetOutputTokens() == 0 || st.Committed().Tokens == 0 {
			t.Errorf("no usage reported: recorded %v (the estimate was %d input tokens), counted %d; want the estimate", got, in, st.Committed().Tokens)
		}
	}
}
