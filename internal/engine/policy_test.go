package engine

// Tests of the policies over tool calls (docs/design.md §15) through the
// engine: what each effect does to a call, and that the log records which
// rule decided. The server's tests cover the flags and the RPCs.

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/runstate"
)

var (
	effectAllow = reinv1.PolicyEffect_POLICY_EFFECT_ALLOW
	effectAsk   = reinv1.PolicyEffect_POLICY_EFFECT_ASK
	effectDeny  = reinv1.PolicyEffect_POLICY_EFFECT_DENY
)

// ruledContract is testContract with rules on a grant.
func ruledContract(tool string, rules []*reinv1.PolicyRule, approvals uint32, script ...*reinv1.ScriptedReply) *reinv1.TaskContract {
	c := testContract(script...)
	for _, g := range c.Tools {
		if g.Name == tool {
			g.Rules, g.Approvals = rules, approvals
		}
	}
	return c
}

func emailTo(t *testing.T, to string) *reinv1.ScriptedReply {
	return callReply("send_email", "call-1", mustStruct(t, map[string]any{"to": to}))
}

var internalOnly = []*reinv1.PolicyRule{
	{Name: "external", Effect: effectDeny, When: `!args.to.endsWith("@example.com")`, Message: "mail only goes to example.com"},
	{Name: "internal", Effect: effectAllow, When: `args.to.endsWith("@example.com")`},
}

// TestPolicyAllowsWrite: a write an allow rule matches is approved by the
// rule, with no person, and committed once; the log names the rule.
func TestPolicyAllowsWrite(t *testing.T) {
	ex := searchTools(t)
	e, s := setup(t, Config{Tools: ex})
	st, evs := runToRest(t, e, s, ruledContract("send_email", internalOnly, 0, emailTo(t, "bob@example.com"), finalReply("sent")))
	wantStatus(t, st, evs, statusCompleted, "final_answer")
	ex.wantCalls(t, 0, 1, 1)
	pd := ofType(evs, "policy_decided")
	if len(pd) != 1 || pd[0].GetPolicyDecided().GetRule() != "internal" || pd[0].GetPolicyDecided().GetEffect() != effectAllow {
		t.Fatalf("policy_decided %v, want one allow by internal\n%s", pd, dump(evs))
	}
	dec := ofType(evs, "approval_decided")
	if len(dec) != 1 || dec[0].GetActor() != "policy:internal" || !dec[0].GetApprovalDecided().GetApproved() {
		t.Fatalf("approval_decided %v, want approved by policy:internal", dec)
	}
	wantCount(t, evs, "write_committed", 1)
}

// TestPolicyDeniesWrite: the twin: a write a deny rule matches never
// reaches its tool; the model reads the rule's message and goes on.
func TestPolicyDeniesWrite(t *testing.T) {
	ex := searchTools(t)
	spy := &modelSpy{}
	e, s := setup(t, Config{Tools: ex, Models: spy.models(nil)})
	st, evs := runToRest(t, e, s, ruledContract("send_email", internalOnly, 0, emailTo(t, "eve@evil.test"), finalReply("could not send")))
	wantStatus(t, st, evs, statusCompleted, "final_answer")
	ex.wantCalls(t, 0, 0, 0)
	wantCount(t, evs, "tool_requested", 0)
	ref := ofType(evs, "tool_refused")
	if len(ref) != 1 || !strings.Contains(ref[0].GetToolRefused().GetReason(), "mail only goes to example.com") {
		t.Fatalf("tool_refused %v, want the rule's message", ref)
	}
	reqs := spy.requests()
	if last := reqs[len(reqs)-1]; !strings.Contains(transcriptText(last.Transcript), "mail only goes to example.com") {
		t.Errorf("the model was not shown the rule's message")
	}
}

// TestPolicyAsksRead: an ask rule pauses even a read; approved, the read
// runs and its output reaches the model; rejected, it never runs.
func TestPolicyAsksRead(t *testing.T) {
	rules := []*reinv1.PolicyRule{{Name: "look-first", Effect: effectAsk, When: "true", Message: "a person looks at every search"}}
	for _, approve := range []bool{true, false} {
		ex := searchTools(t)
		e, s := setup(t, Config{Tools: ex})
		paused, _ := runToRest(t, e, s, ruledContract("search", rules, 0, callReply("search", "call-1", nil), finalReply("done")))
		p := paused.Pending.GetProposal()
		if paused.Status != statusNeedsApproval || p.GetTier() != tierRead || p.GetPolicyRule() != "look-first" {
			t.Fatalf("run is %s with %v, want a read paused by look-first", runstate.StatusName(paused.Status), p)
		}
		ex.wantCalls(t, 0, 0, 0)
		if _, err := e.DecideApproval(testCtx(t), Verdict{RunID: paused.RunID, ProposalID: p.GetProposalId(), ProposalHash: p.GetHash(), Approve: approve, Principal: "bob"}); err != nil {
			t.Fatal(err)
		}
		waitEnded(t, s, paused.RunID)
		st, evs := stored(t, s, paused.RunID)
		wantStatus(t, st, evs, statusCompleted, "final_answer")
		if approve {
			ex.wantCalls(t, 1, 0, 0)
			wc := ofType(evs, "write_committed")
			if len(wc) != 1 || !strings.Contains(wc[0].GetWriteCommitted().GetReceipt().GetStringValue(), "invoice 42") {
				t.Errorf("write_committed %v, want the read's output as its receipt", wc)
			}
		} else {
			ex.wantCalls(t, 0, 0, 0)
		}
	}
}

// TestTwoApprovers: a write that needs two approvals waits for two
// distinct people; the starter is refused, the same person counts once,
// and the write is committed once, after the second.
func TestTwoApprovers(t *testing.T) {
	ex := searchTools(t)
	e, s := setup(t, Config{Tools: ex})
	paused, _ := runToRest(t, e, s, ruledContract("send_email", nil, 2, emailTo(t, "bob@example.com"), finalReply("sent")))
	p := paused.Pending.GetProposal()
	if p.GetApprovals() != 2 {
		t.Fatalf("proposal needs %d approvals, want 2", p.GetApprovals())
	}
	v := Verdict{RunID: paused.RunID, ProposalID: p.GetProposalId(), ProposalHash: p.GetHash(), Approve: true}
	ctx := testCtx(t)
	v.Principal = "alice" // the starter
	if _, err := e.DecideApproval(ctx, v); err == nil || !strings.Contains(err.Error(), "starter") {
		t.Fatalf("the starter's approval: %v, want refused", err)
	}
	v.Principal = "bob"
	for range 2 {
		st, err := e.DecideApproval(ctx, v)
		if err != nil || st.Status != statusNeedsApproval || len(st.Pending.GetProposal().GetApprovedBy()) != 1 {
			t.Fatalf("bob's approval: %v, %s, approved by %v; want one approval, still waiting", err, runstate.StatusName(st.Status), st.Pending.GetProposal().GetApprovedBy())
		}
	}
	ex.wantCalls(t, 0, 1, 0)
	v.Principal = "carol"
	if _, err := e.DecideApproval(ctx, v); err != nil {
		t.Fatal(err)
	}
	waitEnded(t, s, paused.RunID)
	st, evs := stored(t, s, paused.RunID)
	wantStatus(t, st, evs, statusCompleted, "final_answer")
	wantCount(t, evs, "approval_given", 1)
	wantCount(t, evs, "write_committed", 1)
	ex.wantCalls(t, 0, 1, 1)
}

// TestTwoApproversRace: twenty approvers at once on a proposal that needs
// two: exactly two approvals are recorded and the write is committed once.
func TestTwoApproversRace(t *testing.T) {
	ex := searchTools(t)
	e, s := setup(t, Config{Tools: ex})
	paused, _ := runToRest(t, e, s, ruledContract("send_email", nil, 2, emailTo(t, "bob@example.com"), finalReply("sent")))
	p := paused.Pending.GetProposal()
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			who := "approver-" + string(rune('a'+i%10)) // ten people, each twice
			_, _ = e.DecideApproval(testCtx(t), Verdict{RunID: paused.RunID, ProposalID: p.GetProposalId(), ProposalHash: p.GetHash(), Approve: true, Principal: who})
		})
	}
	wg.Wait()
	waitEnded(t, s, paused.RunID)
	st, evs := stored(t, s, paused.RunID)
	wantStatus(t, st, evs, statusCompleted, "final_answer")
	given, decided := ofType(evs, "approval_given"), ofType(evs, "approval_decided")
	if len(given) != 1 || len(decided) != 1 || given[0].GetActor() == decided[0].GetActor() {
		t.Fatalf("approvals %v then %v; want one approval_given and one approval_decided by two people\n%s", given, decided, dump(evs))
	}
	wantCount(t, evs, "write_committed", 1)
	ex.wantCalls(t, 0, 1, 1)
}

// transcriptText is every turn's text, for a search.
func transcriptText(turns []model.Turn) string {
	var b strings.Builder
	for _, tu := range turns {
		if tu.Observation != nil {
			b.WriteString(tu.Observation.Text)
		} else {
			b.WriteString(fmt.Sprint(tu.Decision))
		}
		b.WriteByte('\n')
	}
	return b.String()
}
