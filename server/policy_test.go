package server

// Policies over tool calls through the API (docs/design.md §15): a rule
// that does not compile is refused at StartRun with nothing stored, and a
// write that needs two approvers waits for two.

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/policy"
)

// TestStartRunRefusesBadRule: a rule that does not compile, names a field
// a run does not have, or is not a boolean is InvalidArgument naming the
// grant and the rule, and no run is stored; its twin, a good rule, starts.
func TestStartRunRefusesBadRule(t *testing.T) {
	s := newPeopleServer(t, Config{})
	ctx := context.Background()
	for _, tc := range []struct{ name, when, want string }{
		{"syntax", `args.amount >`, "does not compile"},
		{"unknown field", `run.budget > 1.0`, "undefined field 'budget'"},
		{"not a boolean", `run.step + 1`, "not a boolean"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := writeContract(refundCall(), final("refunded"))
			c.Tools[len(c.Tools)-1].Rules = []*reinv1.PolicyRule{
				{Name: "fine", Effect: reinv1.PolicyEffect_POLICY_EFFECT_ASK, When: "true"},
				{Name: "broken", Effect: reinv1.PolicyEffect_POLICY_EFFECT_DENY, When: tc.when},
			}
			_, err := s.client.StartRun(ctx, &reinv1.StartRunRequest{RequestId: "bad-rule-" + tc.name, Contract: c})
			wantCode(t, err, codes.InvalidArgument)
			msg := err.Error()
			if !strings.Contains(msg, `tool "refund", rule "broken"`) || !strings.Contains(msg, tc.want) {
				t.Errorf("error %q, want the grant, the rule and %q named", msg, tc.want)
			}
			field := "contract.tools[" + strconv.Itoa(len(c.Tools)-1) + "].rules[1]"
			if f := badRequestFields(err); len(f) != 1 || f[0] != field {
				t.Errorf("BadRequest fields %v, want [%s]", f, field)
			}
		})
	}
	list, err := s.client.ListRuns(ctx, &reinv1.ListRunsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(list.GetRuns()); n != 0 {
		t.Fatalf("%d runs stored after refused starts, want none", n)
	}
	// The twin: the same contract with a rule that compiles starts.
	c := writeContract(refundCall(), final("refunded"))
	c.Tools[len(c.Tools)-1].Rules = []*reinv1.PolicyRule{{Name: "fine", Effect: reinv1.PolicyEffect_POLICY_EFFECT_ASK, When: "double(args.amount) > 5.0"}}
	if _, err := s.client.StartRun(ctx, &reinv1.StartRunRequest{RequestId: "good-rule", Contract: c}); err != nil {
		t.Fatalf("a good rule: %v", err)
	}
}

// TestStartRunRefusesUnknownPolicyService: a grant naming a policy
// service the server does not have is refused; named one it has, it
// starts.
func TestStartRunRefusesUnknownPolicyService(t *testing.T) {
	// A registered service that is down: the runs started ask a person
	// (it fails closed), which is not what this test looks at.
	services := policy.NewServices(0, false)
	if err := services.Dial("finance", "127.0.0.1:1"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { services.Close() })
	s := newPeopleServer(t, Config{ToolPolicy: &policy.Checker{Services: services}})
	ctx := context.Background()
	c := writeContract(refundCall(), final("refunded"))
	c.Tools[len(c.Tools)-1].PolicyService = "legal"
	_, err := s.client.StartRun(ctx, &reinv1.StartRunRequest{RequestId: "unknown-service", Contract: c})
	wantCode(t, err, codes.InvalidArgument)
	if !strings.Contains(err.Error(), `policy service "legal"`) || !strings.Contains(err.Error(), "finance") {
		t.Errorf("error %q, want the unknown service and the registered ones named", err)
	}
	c.Tools[len(c.Tools)-1].PolicyService = "finance"
	if _, err := s.client.StartRun(ctx, &reinv1.StartRunRequest{RequestId: "known-service", Contract: c}); err != nil {
		t.Fatalf("a registered service: %v", err)
	}
}

// TestTwoApproversOverRPC: a write whose grant needs two approvers stays
// pending after the first (GetRun shows who approved), counts one person
// once, and is committed once after the second.
func TestTwoApproversOverRPC(t *testing.T) {
	s := newPeopleServer(t, Config{Directory: testDirectory(t)}, as("a-admin"))
	c := writeContract(refundCall(), final("refunded"))
	c.Tools[len(c.Tools)-1].Approvals = 2
	run := s.begin(t, c, stNeedsApproval, as("a-operator"))
	if n := run.GetPending().GetProposal().GetApprovals(); n != 2 {
		t.Fatalf("the proposal needs %d approvals, want 2", n)
	}
	for range 2 {
		resp, err := s.decide(run, approveVerdict, "", as("a-approver"))
		if err != nil {
			t.Fatalf("a-approver: %v", err)
		}
		got := resp.GetRun()
		if got.GetStatus() != stNeedsApproval || strings.Join(got.GetPending().GetProposal().GetApprovedBy(), ",") != "a-approver" {
			t.Fatalf("after a-approver the run is %s, approved by %v; want still waiting, approved by a-approver",
				got.GetStatus(), got.GetPending().GetProposal().GetApprovedBy())
		}
	}
	if n := len(s.tools.commitCounts()); n != 0 {
		t.Fatalf("%d writes committed after one approver, want none", n)
	}
	if _, err := s.decide(run, approveVerdict, "", as("a-admin")); err != nil {
		t.Fatalf("a-admin: %v", err)
	}
	evs := s.watchToEnd(t, run.GetRunId(), run.GetVersion())
	wantChange(t, evs[len(evs)-1], stRunning, stCompleted, "final_answer")
	if got := countPayload(evs, "approval_given"); got != 1 {
		t.Errorf("%d approval_given, want 1\n%s", got, logText(evs))
	}
	if got := len(s.tools.commitCounts()); got != 1 {
		t.Errorf("%d writes committed, want 1", got)
	}
}
