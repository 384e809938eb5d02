package engine

// Tests of how one step routes a model's reply (docs/design.md §3 steps 3-5): each
// status a single step can reach (the budget's limits are in budget_test.go),
// and the observations that let a run go on.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/eventkind"
	"github.com/reinhq/rein/internal/step"
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
	if p.GetHash() == "" || p.GetHash() != step.ProposalHash(p) {
		t.Errorf("proposal hash = %q, want step.ProposalHash(p) = %q", p.GetHash(), step.ProposalHash(p))
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
		"search":     {{Output: mustValue(t, "found")}},
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
				"send_email":        {{Preview: mustValue(t, "send it")}},
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
			if got := eventkind.ValueText(tr.GetOutput()); got != tc.want || tr.GetTruncated() != tc.truncated || tr.GetOutputBytes() != tc.bytes {
				t.Errorf("tool_returned output %q, truncated %v, output_bytes %d; want %q, %v, %d",
					got, tr.GetTruncated(), tr.GetOutputBytes(), tc.want, tc.truncated, tc.bytes)
			}
			if uint64(len(eventkind.ValueText(tr.GetOutput()))) > tc.max {
				t.Errorf("stored output is %d bytes, over max_output_bytes %d", len(eventkind.ValueText(tr.GetOutput())), tc.max)
			}
		})
	}
}
