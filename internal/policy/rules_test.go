package policy

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

const (
	allow = reinv1.PolicyEffect_POLICY_EFFECT_ALLOW
	ask   = reinv1.PolicyEffect_POLICY_EFFECT_ASK
	deny  = reinv1.PolicyEffect_POLICY_EFFECT_DENY
)

func rule(name string, effect reinv1.PolicyEffect, when string) *reinv1.PolicyRule {
	return &reinv1.PolicyRule{Name: name, Effect: effect, When: when, Message: name + " says so"}
}

// refundRules are the example: small refunds in EUR go through,
// any other currency is denied, large ones need two people.
func refundRules(t *testing.T) Rules {
	t.Helper()
	rs, err := Compile([]*reinv1.PolicyRule{
		rule("eur-only", deny, `args.currency != "EUR"`),
		rule("small", allow, `double(args.amount) <= 50.0 && args.currency == "EUR"`),
		{Name: "large", Effect: ask, When: `args.amount > 5000`, Message: "large says so", Approvals: 2},
	})
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func refund(amount float64, currency string) Call {
	args, _ := structpb.NewStruct(map[string]any{"amount": amount, "currency": currency})
	return Call{ID: "c1", Tool: "refunds.create", Tier: reinv1.ToolTier_TOOL_TIER_WRITE, Args: args}
}

// TestRuleMatrix: the first rule that matches decides, and a call no rule
// matches is left to its tier (nil).
func TestRuleMatrix(t *testing.T) {
	rs := refundRules(t)
	run := &reinv1.PolicyRun{Id: "run_1", Tenant: "acme"}
	for _, tc := range []struct {
		name      string
		call      Call
		effect    reinv1.PolicyEffect
		rule      string
		approvals uint32
	}{
		{"small EUR refund is allowed", refund(40, "EUR"), allow, "small", 0},
		{"a refund in USD is denied, whatever its amount", refund(10, "USD"), deny, "eur-only", 0},
		{"a large refund needs two people", refund(6000, "EUR"), ask, "large", 2},
		{"a middling refund is left to its tier", refund(300, "EUR"), 0, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := rs.Decide(context.Background(), tc.call, run)
			if tc.effect == 0 {
				if d != nil {
					t.Fatalf("decided %v by %q, want no decision", d.GetEffect(), d.GetRule())
				}
				return
			}
			if d.GetEffect() != tc.effect || d.GetRule() != tc.rule || d.GetApprovals() != tc.approvals {
				t.Fatalf("got %v by %q with %d approvals, want %v by %q with %d", d.GetEffect(), d.GetRule(), d.GetApprovals(), tc.effect, tc.rule, tc.approvals)
			}
			if d.GetSource() != reinv1.PolicySource_POLICY_SOURCE_CONTRACT || d.GetCallId() != "c1" || d.GetMessage() != tc.rule+" says so" || d.GetError() != "" {
				t.Errorf("decision %v: want the contract's, for c1, with the rule's message and no error", d)
			}
		})
	}
}

// TestRunFields: a rule sees the run's fields and labels, and numbers of
// different types compare.
func TestRunFields(t *testing.T) {
	rs, err := Compile([]*reinv1.PolicyRule{
		rule("bots-no-deploy", deny, `run.principal.startsWith("bot-") && args.path.startsWith("deploy/")`),
		rule("late", ask, `run.step > 10 || run.spent_usd >= 1.5 || run.tokens > 100000`),
		rule("team", allow, `run.labels["team"] == "payments" && run.tenant == "acme" && run.parent == "" && tool.tier == "write" && tool.name == "fs.write"`),
	})
	if err != nil {
		t.Fatal(err)
	}
	args, _ := structpb.NewStruct(map[string]any{"path": "deploy/app.yaml"})
	call := Call{ID: "c", Tool: "fs.write", Tier: reinv1.ToolTier_TOOL_TIER_WRITE, Args: args}
	ctx := context.Background()
	if d := rs.Decide(ctx, call, &reinv1.PolicyRun{Principal: "bot-ci"}); d.GetRule() != "bots-no-deploy" {
		t.Errorf("a bot's write to deploy/: %v, want bots-no-deploy", d)
	}
	if d := rs.Decide(ctx, call, &reinv1.PolicyRun{Principal: "ana", Step: 11}); d.GetRule() != "late" {
		t.Errorf("step 11: %v, want late", d)
	}
	if d := rs.Decide(ctx, call, &reinv1.PolicyRun{Principal: "ana", SpentUsd: 2}); d.GetRule() != "late" {
		t.Errorf("$2 spent: %v, want late", d)
	}
	team := &reinv1.PolicyRun{Principal: "ana", Tenant: "acme", Labels: map[string]string{"team": "payments"}}
	if d := rs.Decide(ctx, call, team); d.GetRule() != "team" {
		t.Errorf("payments team: %v, want team", d)
	}
	team.Parent = "run_parent"
	if d := rs.Decide(ctx, call, team); d != nil {
		t.Errorf("a child run: %v, want no decision", d)
	}
}

// TestCompileErrors: a rule that does not parse, names an unknown
// variable or field, is not a boolean, or lacks a name, an effect or a
// condition is refused, naming the rule.
func TestCompileErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		rule *reinv1.PolicyRule
		want string
	}{
		{"syntax", rule("broken", deny, `args.amount >`), "does not compile"},
		{"unknown field of run", rule("field", deny, `run.budget > 1`), "undefined field 'budget'"},
		{"unknown variable", rule("var", deny, `amount > 1`), "undeclared reference to 'amount'"},
		{"not a boolean", rule("number", deny, `run.step + 1`), "not a boolean"},
		{"string", rule("text", deny, `"yes"`), "not a boolean"},
		{"no name", rule("", deny, `true`), "no name"},
		{"no effect", rule("none", 0, `true`), "no effect"},
		{"no condition", rule("empty", deny, ` `), "no condition"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Compile([]*reinv1.PolicyRule{rule("fine", allow, "true"), tc.rule})
			var ce *CompileError
			if !errors.As(err, &ce) {
				t.Fatalf("Compile: %v, want a *CompileError", err)
			}
			if ce.Index != 1 || ce.Rule != tc.rule.GetName() || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v (index %d), want rule 1 %q refused with %q", err, ce.Index, tc.rule.GetName(), tc.want)
			}
		})
	}
}

// TestMissingArgumentFailsClosed: a condition over an argument the call
// does not have cannot be evaluated: a deny or ask rule then matches (with
// the error recorded), an allow rule does not. has() is how a rule asks.
func TestMissingArgumentFailsClosed(t *testing.T) {
	call := Call{ID: "c", Tool: "refunds.create", Tier: reinv1.ToolTier_TOOL_TIER_WRITE, Args: &structpb.Struct{}}
	ctx := context.Background()
	for _, tc := range []struct {
		effect reinv1.PolicyEffect
		match  bool
	}{{deny, true}, {ask, true}, {allow, false}} {
		rs, err := Compile([]*reinv1.PolicyRule{rule("amount", tc.effect, `args.amount > 10`)})
		if err != nil {
			t.Fatal(err)
		}
		d := rs.Decide(ctx, call, nil)
		if (d != nil) != tc.match {
			t.Fatalf("%v rule over a missing argument: %v, want matched=%v", tc.effect, d, tc.match)
		}
		if d != nil && !strings.Contains(d.GetError(), "no such key") {
			t.Errorf("decision error %q, want the missing key named", d.GetError())
		}
	}
	rs, err := Compile([]*reinv1.PolicyRule{rule("guarded", deny, `has(args.amount) && args.amount > 10`)})
	if err != nil {
		t.Fatal(err)
	}
	if d := rs.Decide(ctx, call, nil); d != nil {
		t.Errorf("a guarded rule over a missing argument: %v, want no match", d)
	}
}

// TestCostLimit: a rule whose evaluation would cost more than CostLimit
// stops with an error instead of running on, and fails closed.
func TestCostLimit(t *testing.T) {
	items := make([]any, 1000)
	for i := range items {
		items[i] = float64(i)
	}
	args, _ := structpb.NewStruct(map[string]any{"items": items})
	call := Call{ID: "c", Tool: "t", Tier: reinv1.ToolTier_TOOL_TIER_READ, Args: args}
	rs, err := Compile([]*reinv1.PolicyRule{rule("quadratic", deny, `args.items.all(x, args.items.all(y, x != y || x == y))`)})
	if err != nil {
		t.Fatal(err)
	}
	d := rs.Decide(context.Background(), call, nil)
	if d.GetEffect() != deny || !strings.Contains(d.GetError(), "cost") {
		t.Fatalf("an over-cost rule: %v, want it to fail closed with a cost error", d)
	}
	// The twin: the same rule over a short list is evaluated.
	short, _ := structpb.NewStruct(map[string]any{"items": []any{1.0, 2.0}})
	call.Args = short
	if d := rs.Decide(context.Background(), call, nil); d.GetError() != "" || d.GetEffect() != deny {
		t.Errorf("the rule over two items: %v, want a clean match", d)
	}
}
