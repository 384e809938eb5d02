package harness

// Tests of how one step routes a model's reply (DESIGN §3 steps 3-5): each
// status a single step can reach, and the observations that let a run go on.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/tools"
)

func TestFinalAnswerCompletes(t *testing.T) {
	e, s := setup(t, Config{})
	c := testContract(decisionReply(&reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{
		Text: "the total is 1,234.00 EUR", Data: mustValue(t, map[string]any{"total": 1234.0}),
	}}}))
	st, evs := runToRest(t, e, s, c)

	wantStatus(t, st, evs, statusCompleted, "final_answer")
	if got := st.Result.GetText(); got != "the total is 1,234.00 EUR" {
		t.Errorf("result text = %q", got)
	}
	if got := st.Result.GetData().GetStructValue().GetFields()["total"].GetNumberValue(); got != 1234 {
		t.Errorf("result data total = %v, want 1234", got)
	}
	want := []string{"run_started", "model_requested", "model_returned", "status_changed"}
	if got := payloads(evs); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("log = %v, want %v", got, want)
	}
	if st.Steps != 1 || st.InputTokens != 10 || st.OutputTokens != 5 {
		t.Errorf("steps %d, tokens %d/%d; want 1 step, 10/5 tokens", st.Steps, st.InputTokens, st.OutputTokens)
	}
}

// TestModelErrorFails is the failure twin of TestFinalAnswerCompletes: a
// client error ends the run as failed, and last_error names it.
func TestModelErrorFails(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script []*reinv1.ScriptedReply
		calls  int
		want   string
	}{
		{"error reply", []*reinv1.ScriptedReply{errorReply("quota exceeded (HTTP 429)")}, 1, "quota exceeded (HTTP 429)"},
		{"script ran out", []*reinv1.ScriptedReply{callReply("search", "c1", nil)}, 2, "ran out of replies"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, s := setup(t, Config{Tools: searchTools(t)})
			st, evs := runToRest(t, e, s, testContract(tc.script...))

			wantStatus(t, st, evs, statusFailed, "model_error")
			if !strings.Contains(st.LastError, tc.want) {
				t.Errorf("last_error = %q, want it to name %q", st.LastError, tc.want)
			}
			wantCount(t, evs, "model_requested", tc.calls)
			wantCount(t, evs, "model_returned", tc.calls-1)
			if st.Result != nil {
				t.Errorf("a failed run has a result: %v", st.Result)
			}
		})
	}
}

func TestAskHumanNeedsInput(t *testing.T) {
	e, s := setup(t, Config{})
	st, evs := runToRest(t, e, s, testContract(askReply("Which quarter do you mean?")))

	wantStatus(t, st, evs, statusNeedsInput, "question")
	if got := st.Pending.GetQuestion().GetText(); got != "Which quarter do you mean?" {
		t.Errorf("pending question = %q", got)
	}
	wantCount(t, evs, "input_requested", 1)
	if st.ModelInFlight {
		t.Errorf("a paused run has a model call in flight")
	}
}

// An ask_human-tier tool call pauses for a person; the executor is never
// asked to run it.
func TestAskHumanTierToolNeedsInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		args map[string]any
		want string
	}{
		{"question argument", map[string]any{"question": "May I read the Q3 ledger?"}, "May I read the Q3 ledger?"},
		{"arguments as JSON", map[string]any{"ledger": "Q3"}, `{"ledger":"Q3"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ex := searchTools(t)
			e, s := setup(t, Config{Tools: ex})
			st, evs := runToRest(t, e, s, testContract(callReply("ask_manager", "call-7", mustStruct(t, tc.args))))

			wantStatus(t, st, evs, statusNeedsInput, "question")
			q := st.Pending.GetQuestion()
			if q.GetText() != tc.want || q.GetCallId() != "call-7" {
				t.Errorf("pending question = %q (call %q), want %q (call-7)", q.GetText(), q.GetCallId(), tc.want)
			}
			ex.wantCalls(t, 0, 0, 0)
			wantCount(t, evs, "tool_requested", 0)
			if st.ToolCalls != 0 {
				t.Errorf("tool_calls = %d, want 0", st.ToolCalls)
			}
		})
	}
}

// A write pauses the run with its proposal stored, and nothing committed.
func TestWriteNeedsApproval(t *testing.T) {
	ex := searchTools(t)
	clock := newClock(t0, time.Second)
	e, s := setup(t, Config{Tools: ex, Clock: clock.Now})
	c := testContract(callReply("send_email", "call-1", mustStruct(t, map[string]any{"to": "bob@example.com"})))
	c.Approval = &reinv1.ApprovalPolicy{ProposalTtl: durationpb.New(2 * time.Hour)}
	st, evs := runToRest(t, e, s, c)

	wantStatus(t, st, evs, statusNeedsApproval, "write_proposed")
	ex.wantCalls(t, 0, 1, 0)
	for _, name := range []string{"write_dispatched", "write_committed", "write_outcome_unknown", "tool_returned"} {
		wantCount(t, evs, name, 0)
	}
	reqs := ofType(evs, "approval_requested")
	if len(reqs) != 1 {
		t.Fatalf("%d approval_requested events, want 1; log:\n%s", len(reqs), dump(evs))
	}
	ev := reqs[0]
	p := ev.GetApprovalRequested().GetProposal()
	if p.GetHash() == "" || p.GetHash() != ProposalHash(p) {
		t.Errorf("proposal hash = %q, want ProposalHash(p) = %q", p.GetHash(), ProposalHash(p))
	}
	stepAt := ev.GetRecordedAt().AsTime()
	if want := t0.Add(time.Second); !stepAt.Equal(want) {
		t.Errorf("approval_requested recorded at %v, want the step's clock reading %v", stepAt, want)
	}
	if got, want := p.GetExpiresAt().AsTime(), stepAt.Add(2*time.Hour); !got.Equal(want) {
		t.Errorf("expires_at = %v, want step time + TTL = %v", got, want)
	}
	if p.GetRunVersion() != ev.GetSequence()-1 {
		t.Errorf("run_version = %d, want the version the proposal was made at, %d", p.GetRunVersion(), ev.GetSequence()-1)
	}
	if !strings.HasPrefix(p.GetProposalId(), "prop_") || p.GetTool() != "send_email" || p.GetCallId() != "call-1" {
		t.Errorf("proposal id %q, tool %q, call %q", p.GetProposalId(), p.GetTool(), p.GetCallId())
	}
	if got := p.GetPreview().GetStructValue().GetFields()["to"].GetStringValue(); got != "bob@example.com" {
		t.Errorf("preview = %v, want the tool's proposal", p.GetPreview())
	}
	if got := p.GetArguments().GetFields()["to"].GetStringValue(); got != "bob@example.com" {
		t.Errorf("arguments = %v", p.GetArguments())
	}
	if !proto.Equal(st.Pending.GetProposal(), p) {
		t.Errorf("pending proposal = %v, want the stored one %v", st.Pending.GetProposal(), p)
	}
	if st.ToolCalls != 1 {
		t.Errorf("tool_calls = %d, want 1", st.ToolCalls)
	}
}

// The failure twin of TestWriteNeedsApproval: a write whose proposal fails is
// an observation, nothing is written, and the run goes on.
func TestWriteProposalErrorIsObservation(t *testing.T) {
	ex := &countingTools{inner: tools.NewFixtures(map[string][]tools.FixtureResult{
		"send_email": {{Error: "smtp relay unreachable"}},
	})}
	e, s := setup(t, Config{Tools: ex})
	st, evs := runToRest(t, e, s, testContract(
		callReply("send_email", "call-1", mustStruct(t, map[string]any{"to": "bob@example.com"})),
		finalReply("could not send"),
	))

	wantStatus(t, st, evs, statusCompleted, "final_answer")
	ex.wantCalls(t, 0, 1, 0)
	wantCount(t, evs, "approval_requested", 0)
	tr := ofType(evs, "tool_returned")
	if len(tr) != 1 || !strings.Contains(tr[0].GetToolReturned().GetError(), "nothing was written") ||
		!strings.Contains(tr[0].GetToolReturned().GetError(), "smtp relay unreachable") {
		t.Fatalf("tool_returned = %v, want the proposal error, saying nothing was written", tr)
	}
}

// A tool the contract does not grant is refused: it never runs, the refusal
// is an observation, and the run goes on.
func TestRefusedToolNeverRuns(t *testing.T) {
	for _, tc := range []struct {
		name    string
		tool    string
		reads   int32
		refused int
	}{
		{"not granted", "delete_everything", 0, 1},
		{"granted read (twin)", "search", 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The fixtures provide the refused tool too: only the grant
			// stands between the model and it.
			ex := &countingTools{inner: tools.NewFixtures(map[string][]tools.FixtureResult{
				"search":            {{Output: mustValue(t, "found")}},
				"delete_everything": {{Output: mustValue(t, "deleted")}},
			})}
			spy := &modelSpy{}
			e, s := setup(t, Config{Tools: ex, Models: spy.models(nil)})
			st, evs := runToRest(t, e, s, testContract(callReply(tc.tool, "call-1", nil), finalReply("done")))

			wantStatus(t, st, evs, statusCompleted, "final_answer")
			ex.wantCalls(t, tc.reads, 0, 0)
			wantCount(t, evs, "tool_refused", tc.refused)
			wantCount(t, evs, "tool_requested", int(tc.reads))
			if st.ToolCalls != uint32(tc.reads) || st.Steps != 2 {
				t.Errorf("tool_calls %d, steps %d; want %d, 2", st.ToolCalls, st.Steps, tc.reads)
			}
			if tc.refused == 0 {
				return
			}
			ref := ofType(evs, "tool_refused")[0].GetToolRefused()
			if ref.GetTool() != tc.tool || ref.GetCallId() != "call-1" || !strings.Contains(ref.GetReason(), "not granted") {
				t.Errorf("tool_refused = %v", ref)
			}
			o := lastObservation(t, spy.requests()[1])
			if o.Source != "harness" || o.CallID != "call-1" || !strings.Contains(o.Text, "not granted") {
				t.Errorf("the model was shown %+v, want the refusal", o)
			}
		})
	}
}

// A reply that is not a routable decision is an observation that costs the
// step; the run goes on.
func TestInvalidReplyIsRejected(t *testing.T) {
	empty := func(d *reinv1.Decision) *reinv1.ScriptedReply { return decisionReply(d) }
	for _, tc := range []struct {
		name     string
		reply    *reinv1.ScriptedReply
		rejected bool
		want     string
	}{
		{"unparseable raw", rawReply(`{"raw"}`), true, "not a decision"},
		{"empty decision", empty(&reinv1.Decision{}), true, "decision is empty"},
		{"tool call without tool", callReply("", "call-1", nil), true, "tool_call.tool is empty"},
		{"ask_human without question", askReply(""), true, "ask_human.question is empty"},
		{"valid tool call (twin)", callReply("search", "call-1", nil), false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spy := &modelSpy{}
			e, s := setup(t, Config{Tools: searchTools(t), Models: spy.models(nil)})
			st, evs := runToRest(t, e, s, testContract(tc.reply, finalReply("done")))

			wantStatus(t, st, evs, statusCompleted, "final_answer")
			if st.Steps != 2 || st.InputTokens != 20 {
				t.Errorf("steps %d, input tokens %d; want 2 steps, 20 tokens (the rejected reply is paid for)", st.Steps, st.InputTokens)
			}
			wantCount(t, evs, "model_returned", 2)
			if !tc.rejected {
				wantCount(t, evs, "decision_rejected", 0)
				return
			}
			rej := ofType(evs, "decision_rejected")
			if len(rej) != 1 {
				t.Fatalf("%d decision_rejected, want 1; log:\n%s", len(rej), dump(evs))
			}
			dr := rej[0].GetDecisionRejected()
			if !strings.Contains(dr.GetError(), tc.want) || dr.GetRaw() != tc.reply.GetRaw() {
				t.Errorf("decision_rejected = %v, want error naming %q and the raw reply", dr, tc.want)
			}
			wantCount(t, evs, "tool_requested", 0)
			if o := lastObservation(t, spy.requests()[1]); o.Source != "harness" || !strings.Contains(o.Text, tc.want) {
				t.Errorf("the model was shown %+v, want the rejection", o)
			}
		})
	}
}

// A tool's error is an observation: tool_returned carries it, the model sees
// it, and the run goes on.
func TestToolErrorIsObservation(t *testing.T) {
	for _, tc := range []struct {
		name    string
		result  tools.FixtureResult
		wantErr string
	}{
		{"error", tools.FixtureResult{Error: "index offline"}, "index offline"},
		{"success (twin)", tools.FixtureResult{Output: &structpb.Value{Kind: &structpb.Value_StringValue{StringValue: "total 12"}}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, s := setup(t, Config{Tools: searchTools(t, tc.result)})
			st, evs := runToRest(t, e, s, testContract(callReply("search", "call-1", nil), finalReply("done")))

			wantStatus(t, st, evs, statusCompleted, "final_answer")
			tr := ofType(evs, "tool_returned")
			if len(tr) != 1 {
				t.Fatalf("%d tool_returned, want 1; log:\n%s", len(tr), dump(evs))
			}
			got := tr[0].GetToolReturned()
			if got.GetError() != tc.wantErr || got.GetCallId() != "call-1" || tr[0].GetActor() != "tool:search" {
				t.Errorf("tool_returned = %v (actor %s), want error %q", got, tr[0].GetActor(), tc.wantErr)
			}
			if (got.GetOutput() != nil) == (tc.wantErr != "") {
				t.Errorf("tool_returned output = %v with error %q", got.GetOutput(), got.GetError())
			}
			if st.LastError != tc.wantErr {
				t.Errorf("last_error = %q, want %q", st.LastError, tc.wantErr)
			}
		})
	}
}

// Tool output over max_output_bytes is cut; tool_returned says so and keeps
// the full size.
func TestToolOutputTruncated(t *testing.T) {
	long := strings.Repeat("x", 100)
	for _, tc := range []struct {
		name      string
		output    any
		max       uint64
		want      string // the stored output, as text
		truncated bool
		bytes     uint64
	}{
		{"over the limit", long, 10, "xxxxxxxxxx", true, 100},
		{"at the limit (twin)", "0123456789", 10, "0123456789", false, 10},
		{"cut inside a UTF-8 rune", "aaaaaaaaaé", 10, "aaaaaaaaa", true, 11},
		{"JSON over the limit", map[string]any{"k": "vvvvvvvvvv"}, 8, `{"k":"vv`, true, 18},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, s := setup(t, Config{Tools: searchTools(t, tools.FixtureResult{Output: mustValue(t, tc.output)})})
			c := testContract(callReply("search", "call-1", nil), finalReply("done"))
			c.Budget = &reinv1.Budget{MaxOutputBytes: tc.max}
			st, evs := runToRest(t, e, s, c)

			wantStatus(t, st, evs, statusCompleted, "final_answer")
			tr := ofType(evs, "tool_returned")[0].GetToolReturned()
			if got := valueText(tr.GetOutput()); got != tc.want || tr.GetTruncated() != tc.truncated || tr.GetOutputBytes() != tc.bytes {
				t.Errorf("tool_returned output %q, truncated %v, output_bytes %d; want %q, %v, %d",
					got, tr.GetTruncated(), tr.GetOutputBytes(), tc.want, tc.truncated, tc.bytes)
			}
			if uint64(len(valueText(tr.GetOutput()))) > tc.max {
				t.Errorf("stored output is %d bytes, over max_output_bytes %d", len(valueText(tr.GetOutput())), tc.max)
			}
		})
	}
}

// The model's next call is built from everything the log holds before its
// model_requested, including the last tool's result: the transcript it is
// sent ends with that observation, and model_requested.input_hash is the
// hash of the transcript the log implies (what a resumed driver rebuilds).
func TestNextCallSeesToolResult(t *testing.T) {
	for _, tc := range []struct {
		name   string
		call   *reinv1.ScriptedReply
		result tools.FixtureResult
		want   string
	}{
		{"read output", callReply("search", "call-1", nil), tools.FixtureResult{Output: &structpb.Value{Kind: &structpb.Value_StringValue{StringValue: "total 12"}}}, "total 12"},
		{"read error", callReply("search", "call-1", nil), tools.FixtureResult{Error: "index offline"}, "error: index offline"},
		{"proposal error", callReply("send_email", "call-1", nil), tools.FixtureResult{Error: "smtp relay unreachable"}, "smtp relay unreachable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ex := &countingTools{inner: tools.NewFixtures(map[string][]tools.FixtureResult{"search": {tc.result}, "send_email": {tc.result}})}
			spy := &modelSpy{}
			e, s := setup(t, Config{Tools: ex, Models: spy.models(nil)})
			st, evs := runToRest(t, e, s, testContract(tc.call, finalReply("done")))

			wantStatus(t, st, evs, statusCompleted, "final_answer")
			reqs := spy.requests()
			if len(reqs) != 2 {
				t.Fatalf("%d model calls, want 2", len(reqs))
			}
			if n := len(reqs[1].Transcript); n == 0 || reqs[1].Transcript[n-1].Observation == nil ||
				!strings.Contains(reqs[1].Transcript[n-1].Observation.Text, tc.want) {
				t.Errorf("call 2 was sent a transcript of %d turns that does not end with the tool's result %q", n, tc.want)
			}
			checkInputHashes(t, evs)
		})
	}
}

// checkInputHashes recomputes each model_requested's input_hash from the
// events before it, the way a driver that loads the run rebuilds its
// transcript, and compares.
func checkInputHashes(t *testing.T, evs []*reinv1.Event) {
	t.Helper()
	r := &runner{toolIndex: map[string]int{}}
	r.tx.init(evs[0].GetRunStarted().GetContract())
	for _, ev := range evs {
		if mr := ev.GetModelRequested(); mr != nil && mr.GetInputHash() != r.tx.inputHash() {
			t.Errorf("model_requested %d (step %d): input_hash %.12s…, but the log before it hashes to %.12s…",
				ev.GetSequence(), mr.GetStep(), mr.GetInputHash(), r.tx.inputHash())
		}
		r.observe(ev)
	}
}

func repeatReply(r *reinv1.ScriptedReply, n int) []*reinv1.ScriptedReply {
	out := make([]*reinv1.ScriptedReply, n)
	for i := range out {
		out[i] = r
	}
	return out
}

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
// budget check: a run replayed with its recorded clock (DESIGN §8), or
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
