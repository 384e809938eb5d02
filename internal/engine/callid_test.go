package engine

// Tests of the call ID a tool call goes by (docs/design.md §3): a model
// may give none, or one an earlier call of the run went by, and rein gives
// the call one of its own before anything records it, so that a policy's
// decision, a proposal and a result are tied to their call on every path.

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/policy"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/tools"
)

// derivedID is the call ID rein gives the call of step of run runID,
// written out here as docs/design.md §3 states it.
func derivedID(runID string, step int) string {
	sum := sha256.Sum256([]byte(runID))
	return fmt.Sprintf("call_%d_%s", step, hex.EncodeToString(sum[:6]))
}

// callIDs are the call IDs the log's events of tool calls carry, in
// order, each as "payload id".
func callIDs(evs []*reinv1.Event) []string {
	var out []string
	for _, ev := range evs {
		var id string
		switch {
		case ev.GetModelReturned().GetDecision().GetToolCall() != nil:
			id = ev.GetModelReturned().GetDecision().GetToolCall().GetCallId()
		case ev.GetPolicyDecided() != nil:
			id = ev.GetPolicyDecided().GetCallId()
		case ev.GetToolRequested() != nil:
			id = ev.GetToolRequested().GetCallId()
		case ev.GetToolReturned() != nil:
			id = ev.GetToolReturned().GetCallId()
		case ev.GetToolRefused() != nil:
			id = ev.GetToolRefused().GetCallId()
		case ev.GetApprovalRequested() != nil:
			id = ev.GetApprovalRequested().GetProposal().GetCallId()
		case ev.GetInputRequested().GetQuestion() != nil:
			id = ev.GetInputRequested().GetQuestion().GetCallId()
		default:
			continue
		}
		out = append(out, runstate.PayloadName(ev)+" "+id)
	}
	return out
}

// wantCallIDs fails unless the log's call events carry, in order, the
// payloads and IDs of want ("payload id").
func wantCallIDs(t *testing.T, evs []*reinv1.Event, want ...string) {
	t.Helper()
	if got := callIDs(evs); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("call events:\n  %s\nwant:\n  %s\nlog:\n%s", strings.Join(got, "\n  "), strings.Join(want, "\n  "), dump(evs))
	}
}

// refundTools is a fixture executor with a write tool "refund" and the
// read tool "search".
func refundTools(t *testing.T) *countingTools {
	t.Helper()
	return &countingTools{inner: tools.NewFixtures(map[string][]tools.FixtureResult{
		"search": {{Output: mustValue(t, "invoice 42: total 20.00 EUR")}},
		"refund": {{Preview: mustValue(t, "refund 20 EUR"), Receipt: mustValue(t, "re_1")}},
	})}
}

// refundContract grants refund (a write) with rules, and search (a read),
// and scripts one refund of 20 EUR with call ID id, then an answer.
func refundContract(t *testing.T, id string, rules ...*reinv1.PolicyRule) *reinv1.TaskContract {
	return &reinv1.TaskContract{
		Goal: "refund the duplicate charge",
		Tools: []*reinv1.ToolGrant{
			{Name: "refund", Tier: tierWrite, Rules: rules},
			{Name: "search", Tier: tierRead},
		},
		Model: &reinv1.ModelSpec{Provider: "script", Name: "test", Script: []*reinv1.ScriptedReply{
			callReply("refund", id, mustStruct(t, map[string]any{"amount": 20, "currency": "EUR"})),
			finalReply("refunded"),
		}},
	}
}

var smallRefunds = []*reinv1.PolicyRule{{Name: "small", Effect: effectAllow, When: "args.amount <= 100"}}

// TestCallWithoutIDAllowedByPolicy: a write an allow rule matches, which
// the model called with no call ID, is allowed and committed with no
// person; the call goes by the ID rein derives from the run and the step,
// in its decision and every event of it.
func TestCallWithoutIDAllowedByPolicy(t *testing.T) {
	ex := refundTools(t)
	e, s := setup(t, Config{Tools: ex})
	st, evs := runToRest(t, e, s, refundContract(t, "", smallRefunds...))
	wantStatus(t, st, evs, statusCompleted, "final_answer")
	ex.wantCalls(t, 0, 1, 1)
	id := derivedID(st.RunID, 1)
	wantCallIDs(t, evs, "model_returned "+id, "policy_decided "+id, "tool_requested "+id, "approval_requested "+id)
}

// TestCallWithIDAllowedByPolicy: the twin: a call the model gave an ID
// keeps it.
func TestCallWithIDAllowedByPolicy(t *testing.T) {
	ex := refundTools(t)
	e, s := setup(t, Config{Tools: ex})
	st, evs := runToRest(t, e, s, refundContract(t, "r1", smallRefunds...))
	wantStatus(t, st, evs, statusCompleted, "final_answer")
	ex.wantCalls(t, 0, 1, 1)
	wantCallIDs(t, evs, "model_returned r1", "policy_decided r1", "tool_requested r1", "approval_requested r1")
}

// TestCallWithoutIDAskedByPolicy: a write without a call ID that an ask
// rule pauses is proposed under the derived ID, and a person's approval
// commits it.
func TestCallWithoutIDAskedByPolicy(t *testing.T) {
	for _, id := range []string{"", "r1"} {
		t.Run("id="+id, func(t *testing.T) {
			ex := refundTools(t)
			e, s := setup(t, Config{Tools: ex})
			rules := []*reinv1.PolicyRule{{Name: "look", Effect: effectAsk, When: "args.amount > 10", Message: "a person looks at refunds over 10"}}
			paused, evs := runToRest(t, e, s, refundContract(t, id, rules...))
			wantStatus(t, paused, evs, statusNeedsApproval, "write_proposed")
			want := id
			if want == "" {
				want = derivedID(paused.RunID, 1)
			}
			p := paused.Pending.GetProposal()
			if p.GetCallId() != want || p.GetPolicyRule() != "look" {
				t.Fatalf("pending proposal %v, want call %s asked by look", p, want)
			}
			if _, err := e.DecideApproval(testCtx(t), Verdict{RunID: paused.RunID, ProposalID: p.GetProposalId(), ProposalHash: p.GetHash(), Approve: true, Principal: "bob"}); err != nil {
				t.Fatal(err)
			}
			waitEnded(t, s, paused.RunID)
			st, evs := stored(t, s, paused.RunID)
			wantStatus(t, st, evs, statusCompleted, "final_answer")
			ex.wantCalls(t, 0, 1, 1)
			wantCallIDs(t, evs, "model_returned "+want, "policy_decided "+want, "tool_requested "+want, "approval_requested "+want)
		})
	}
}

// TestReadWithoutIDAllowedByPolicy: a read without a call ID that a rule
// decides runs, and its result goes by the derived ID.
func TestReadWithoutIDAllowedByPolicy(t *testing.T) {
	for _, id := range []string{"", "s1"} {
		t.Run("id="+id, func(t *testing.T) {
			ex := refundTools(t)
			e, s := setup(t, Config{Tools: ex})
			c := refundContract(t, id)
			c.Tools[1].Rules = []*reinv1.PolicyRule{{Name: "reads", Effect: effectAllow, When: "true"}}
			c.Model.Script[0] = callReply("search", id, mustStruct(t, map[string]any{"q": "invoice 42"}))
			st, evs := runToRest(t, e, s, c)
			wantStatus(t, st, evs, statusCompleted, "final_answer")
			ex.wantCalls(t, 1, 0, 0)
			want := id
			if want == "" {
				want = derivedID(st.RunID, 1)
			}
			wantCallIDs(t, evs, "model_returned "+want, "policy_decided "+want, "tool_requested "+want, "tool_returned "+want)
		})
	}
}

// TestChildCallWithoutIDAllowedByPolicy: a child run's read without a
// call ID, which the server's rules decide, runs; the child completes and
// its report reaches the parent under the child's derived ID.
func TestChildCallWithoutIDAllowedByPolicy(t *testing.T) {
	srv, err := policy.ParseFile("policy.toml", []byte("[[rules]]\nname = \"reads\"\ntools = [\"search\"]\neffect = \"allow\"\nwhen = \"true\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	child := []*reinv1.ScriptedReply{callReply("search", "", nil), finalReply("the total is 1,234.00 EUR")}
	c := delegating(child, delegateReply(task("read invoice 42", "search")), finalReply("read"))
	e, w, s := delegSetup(t, Config{Policy: &policy.Checker{Server: srv}})
	st := startRun(t, e, c)
	w.wait(t, st.RunID)
	st, evs := stored(t, s, st.RunID)
	wantStatus(t, st, evs, statusCompleted, "final_answer")
	ids := children(t, s, evs)
	if len(ids) != 1 {
		t.Fatalf("children %v, want 1", ids)
	}
	cst, cevs := stored(t, s, ids[0])
	wantStatus(t, cst, cevs, statusCompleted, "final_answer")
	id := derivedID(cst.RunID, 1)
	wantCallIDs(t, cevs, "model_returned "+id, "policy_decided "+id, "tool_requested "+id, "tool_returned "+id)
	dr := ofType(evs, "delegation_returned")
	if len(dr) != 1 || !strings.Contains(fmt.Sprint(dr[0].GetDelegationReturned()), "tool:search#"+id) {
		t.Errorf("delegation_returned %v, want evidence tool:search#%s", dr, id)
	}
}

// TestDuplicateCallID: a model that gives a second call the ID of an
// earlier one (here, a write a rule allows after a read) has the second
// call go by the ID rein derives for its step, so that no two calls of a
// run share one; the first keeps the model's.
func TestDuplicateCallID(t *testing.T) {
	ex := refundTools(t)
	e, s := setup(t, Config{Tools: ex})
	c := refundContract(t, "c1", smallRefunds...)
	c.Tools[1].Rules = []*reinv1.PolicyRule{{Name: "reads", Effect: effectAllow, When: "true"}}
	c.Model.Script = append([]*reinv1.ScriptedReply{callReply("search", "c1", nil)}, c.Model.Script...)
	st, evs := runToRest(t, e, s, c)
	wantStatus(t, st, evs, statusCompleted, "final_answer")
	ex.wantCalls(t, 1, 1, 1)
	id := derivedID(st.RunID, 2)
	wantCallIDs(t, evs,
		"model_returned c1", "policy_decided c1", "tool_requested c1", "tool_returned c1",
		"model_returned "+id, "policy_decided "+id, "tool_requested "+id, "approval_requested "+id)
	// The script, the contract's own message, still says c1.
	if got := st.Contract.GetModel().GetScript()[1].GetDecision().GetToolCall().GetCallId(); got != "c1" {
		t.Errorf("the contract's script now gives call ID %q, want c1 as written", got)
	}
}

// TestForkCallsWithoutID: a fork carries its parent's calls under the IDs
// they went by, and its own calls without an ID go by IDs derived from the
// fork's run; a write an ask rule paused in the fork is approved and
// committed.
func TestForkCallsWithoutID(t *testing.T) {
	ex := refundTools(t)
	e, s := setup(t, Config{Tools: ex})
	rules := []*reinv1.PolicyRule{{Name: "look", Effect: effectAsk, When: "true"}}
	c := refundContract(t, "", rules...)
	c.Tools[1].Rules = []*reinv1.PolicyRule{{Name: "reads", Effect: effectAllow, When: "true"}}
	c.Model.Script = append([]*reinv1.ScriptedReply{callReply("search", "", nil)}, c.Model.Script...)
	parent, evs := runToRest(t, e, s, c)
	wantStatus(t, parent, evs, statusNeedsApproval, "write_proposed")
	read, write := derivedID(parent.RunID, 1), derivedID(parent.RunID, 2)
	wantCallIDs(t, evs,
		"model_returned "+read, "policy_decided "+read, "tool_requested "+read, "tool_returned "+read,
		"model_returned "+write, "policy_decided "+write, "tool_requested "+write, "approval_requested "+write)
	at := ofType(evs, "tool_returned")[0].GetSequence()
	fork, _, err := e.Fork(testCtx(t), ForkRequest{RunID: parent.RunID, AtSequence: at, RequestID: "fork", Principal: "alice", Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	waitRun(t, e, fork.RunID)
	paused, _ := stored(t, s, fork.RunID)
	p := paused.Pending.GetProposal()
	if paused.Status != statusNeedsApproval || p == nil {
		t.Fatalf("fork is %s, want paused on its refund", runstate.StatusName(paused.Status))
	}
	if _, err := e.DecideApproval(testCtx(t), Verdict{RunID: fork.RunID, ProposalID: p.GetProposalId(), ProposalHash: p.GetHash(), Approve: true, Principal: "bob"}); err != nil {
		t.Fatal(err)
	}
	waitEnded(t, s, fork.RunID)
	st, fevs := stored(t, s, fork.RunID)
	wantStatus(t, st, fevs, statusCompleted, "final_answer")
	own := derivedID(fork.RunID, 2)
	wantCallIDs(t, fevs,
		"model_returned "+read, "policy_decided "+read, "tool_requested "+read, "tool_returned "+read,
		"model_returned "+own, "policy_decided "+own, "tool_requested "+own, "approval_requested "+own)
}
