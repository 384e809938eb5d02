package main

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// testCtx is the test's context, ended after 30s at most.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// refund is a CheckRequest for a call to tool with args, by a run of
// tenant started by principal.
func refund(t *testing.T, tool, tenant, principal string, args map[string]any) *reinv1.CheckRequest {
	t.Helper()
	s, err := structpb.NewStruct(args)
	if err != nil {
		t.Fatal(err)
	}
	return &reinv1.CheckRequest{CallId: "c1", Tool: &reinv1.PolicyTool{Name: tool, Tier: "write"}, Args: s,
		Run: &reinv1.PolicyRun{Id: "run_1", Tenant: tenant, Principal: principal}}
}

func eur(amount any) map[string]any {
	return map[string]any{"invoice_id": "INV-1001", "amount": amount, "currency": "EUR", "reason": "returned"}
}

const (
	unspecified = reinv1.PolicyEffect_POLICY_EFFECT_UNSPECIFIED
	allow       = reinv1.PolicyEffect_POLICY_EFFECT_ALLOW
	askEffect   = reinv1.PolicyEffect_POLICY_EFFECT_ASK
	denyEffect  = reinv1.PolicyEffect_POLICY_EFFECT_DENY
)

// TestCheck: each decision, next to its twin that decides otherwise.
func TestCheck(t *testing.T) {
	acme := map[string]Limits{"acme": {AutoApproveUpTo: 100_00, TwoPeopleAbove: 10_000_00}}
	long := strings.Repeat("9,", 5000)
	for _, tc := range []struct {
		name      string
		req       *reinv1.CheckRequest
		effect    reinv1.PolicyEffect
		approvals uint32
		reason    string // a part of the reason
	}{
		{"20 EUR is allowed", refund(t, toolRefund, "globex", "alice", eur("20.00")), allow, 0, `refund of 20.00 EUR for tenant "globex" is at most 50.00 EUR`},
		{"no amount is denied", refund(t, toolRefund, "globex", "alice", map[string]any{"currency": "EUR"}), denyEffect, 0, `the arguments have no "amount": give the refund's amount`},
		{"50.00 is allowed, the limit", refund(t, toolRefund, "globex", "alice", eur("50.00")), allow, 0, "allowed with no person"},
		{"50.01 asks one person", refund(t, toolRefund, "globex", "alice", eur("50.01")), askEffect, 1, "is above 50.00 EUR: a person must approve it"},
		{"5000.00 asks one person", refund(t, toolRefund, "globex", "alice", eur("5000.00")), askEffect, 1, "a person must approve it"},
		{"5000.01 asks two people", refund(t, toolRefund, "globex", "alice", eur("5000.01")), askEffect, 2, "is above 5000.00 EUR: two people must approve it"},
		{"a number amount", refund(t, toolRefund, "globex", "alice", eur(40)), allow, 0, "40.00 EUR"},
		{"a boolean amount", refund(t, toolRefund, "globex", "alice", eur(true)), denyEffect, 0, `"amount" is a boolean: give the refund's amount in EUR as a string such as "40.00"`},
		{"a number with 2 decimals", refund(t, toolRefund, "globex", "alice", eur(12.5)), allow, 0, "12.50 EUR"},
		{"a number with 3 decimals", refund(t, toolRefund, "globex", "alice", eur(12.505)), denyEffect, 0, `"amount" is 12.505, not an amount`},
		{"a string with 1 decimal", refund(t, toolRefund, "globex", "alice", eur(" 7.5 ")), allow, 0, "7.50 EUR"},
		{"a string with a comma", refund(t, toolRefund, "globex", "alice", eur("40,00")), denyEffect, 0, `"amount" is "40,00", not an amount`},
		{"a string with a sign", refund(t, toolRefund, "globex", "alice", eur("-5")), denyEffect, 0, `"amount" is "-5", not an amount`},
		{"a zero amount", refund(t, toolRefund, "globex", "alice", eur("0.00")), denyEffect, 0, "a refund must be more than 0.00"},
		{"a negative number", refund(t, toolRefund, "globex", "alice", eur(-5)), denyEffect, 0, "a refund must be more than 0.00"},
		{"a huge amount, quoted short", refund(t, toolRefund, "globex", "alice", eur(long)), denyEffect, 0, `"9,9,9,9,9,9,9,9,9,9,9,9,9,9,9,9,9,9,9,9,"…, not an amount`},
		{"EUR is allowed", refund(t, toolRefund, "globex", "alice", eur("30")), allow, 0, "30.00 EUR"},
		{"USD is denied", refund(t, toolRefund, "globex", "alice", map[string]any{"amount": "30", "currency": "USD"}), denyEffect, 0,
			"refunds in USD are not made by an agent: this policy allows refunds in EUR only; do not convert the amount to EUR, tell the user"},
		{"no currency", refund(t, toolRefund, "globex", "alice", map[string]any{"amount": "30"}), denyEffect, 0, `the arguments have no "currency"`},
		{"a null currency", refund(t, toolRefund, "globex", "alice", map[string]any{"amount": "30", "currency": nil}), denyEffect, 0, `the arguments have no "currency"`},
		{"a lower-case currency", refund(t, toolRefund, "globex", "alice", map[string]any{"amount": "30", "currency": "eur"}), denyEffect, 0, `"currency" is "eur", not a currency code`},
		{"a numeric currency", refund(t, toolRefund, "globex", "alice", map[string]any{"amount": "30", "currency": 978}), denyEffect, 0, `"currency" is a number`},
		{"a bot's small refund asks", refund(t, toolRefund, "globex", "bot-nightly", eur("10")), askEffect, 1, "started by bot-nightly, a program"},
		{"a robot is not a bot-", refund(t, toolRefund, "globex", "robot", eur("10")), allow, 0, "allowed with no person"},
		{"a bot's large refund asks two", refund(t, toolRefund, "globex", "bot-nightly", eur("6000")), askEffect, 2, "two people must approve it"},
		{"a bot's USD refund is denied", refund(t, toolRefund, "globex", "bot-nightly", map[string]any{"amount": "10", "currency": "USD"}), denyEffect, 0, "refunds in USD"},
		{"acme's 80 is allowed", refund(t, toolRefund, "acme", "alice", eur("80")), allow, 0, `for tenant "acme" is at most 100.00 EUR`},
		{"globex's 80 asks, the defaults", refund(t, toolRefund, "globex", "alice", eur("80")), askEffect, 1, "above 50.00 EUR"},
		{"acme's 10000 asks one", refund(t, toolRefund, "acme", "alice", eur("10000")), askEffect, 1, "a person must approve it"},
		{"acme's 10000.01 asks two", refund(t, toolRefund, "acme", "alice", eur("10000.01")), askEffect, 2, "above 10000.00 EUR: two people"},
		{"an unknown tool is not decided", refund(t, "invoices.get", "globex", "alice", eur("20")), unspecified, 0, ""},
		{"tool names are exact", refund(t, "Refunds.Create", "globex", "alice", eur("20")), unspecified, 0, ""},
		{"no arguments are denied", &reinv1.CheckRequest{Tool: &reinv1.PolicyTool{Name: toolRefund}}, denyEffect, 0, `no "amount"`},
		{"no run gets the defaults", &reinv1.CheckRequest{Tool: &reinv1.PolicyTool{Name: toolRefund}, Args: refund(t, toolRefund, "", "", eur("50")).Args}, allow, 0, "at most 50.00 EUR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := NewFinance(acme, nil).Check(testCtx(t), tc.req)
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			if resp.GetEffect() != tc.effect || resp.GetApprovals() != tc.approvals {
				t.Errorf("%s with %d approvals (%q), want %s with %d", resp.GetEffect(), resp.GetApprovals(), resp.GetReason(), tc.effect, tc.approvals)
			}
			if !strings.Contains(resp.GetReason(), tc.reason) {
				t.Errorf("the reason is %q, want it to say %q", resp.GetReason(), tc.reason)
			}
			if tc.effect != unspecified && resp.GetReason() == "" {
				t.Error("a decision with no reason")
			}
			if n := len(resp.GetReason()); n > 300 {
				t.Errorf("a reason of %d bytes; rein takes at most 4096, and a model reads it", n)
			}
		})
	}
}

// TestCheckNoTool: a request that names no tool is refused as invalid
// (rein, which always names one, would fail closed); its twin is decided.
func TestCheckNoTool(t *testing.T) {
	f := NewFinance(nil, nil)
	_, err := f.Check(testCtx(t), &reinv1.CheckRequest{Args: refund(t, toolRefund, "", "", eur("20")).Args})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "names no tool") {
		t.Errorf("no tool: %v, want InvalidArgument saying it names no tool", err)
	}
	if _, err := f.Check(testCtx(t), &reinv1.CheckRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("an empty request: %v, want InvalidArgument", err)
	}
	resp, err := f.Check(testCtx(t), refund(t, toolRefund, "", "", eur("20")))
	if err != nil || resp.GetEffect() != allow {
		t.Errorf("the twin with its tool: %v, %v; want allow", resp, err)
	}
}

// TestParseLimits: a limits file's tenants and their limits; each mistake
// refused, saying what it is.
func TestParseLimits(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		want       map[string]Limits
		err        string
	}{
		{"both limits", `{"tenants": {"acme": {"auto_approve_up_to": 100, "two_people_above": 10000}}}`,
			map[string]Limits{"acme": {AutoApproveUpTo: 100_00, TwoPeopleAbove: 10_000_00}}, ""},
		{"one limit, the other the default", `{"tenants": {"acme": {"auto_approve_up_to": 99.99}, "globex": {"two_people_above": 20000}}}`,
			map[string]Limits{"acme": {AutoApproveUpTo: 99_99, TwoPeopleAbove: 5_000_00}, "globex": {AutoApproveUpTo: 50_00, TwoPeopleAbove: 20_000_00}}, ""},
		{"nothing automatic", `{"tenants": {"acme": {"auto_approve_up_to": 0}}}`, map[string]Limits{"acme": {AutoApproveUpTo: 0, TwoPeopleAbove: 5_000_00}}, ""},
		{"an unknown field", `{"tenant": {"acme": {"auto_approve_up_to": 100}}}`, nil, `unknown field "tenant"; write it as {"tenants"`},
		{"an unknown limit", `{"tenants": {"acme": {"auto_approve": 100}}}`, nil, `unknown field "auto_approve"`},
		{"a string limit", `{"tenants": {"acme": {"auto_approve_up_to": "100"}}}`, nil, "cannot unmarshal string"},
		{"a negative limit", `{"tenants": {"acme": {"auto_approve_up_to": -1}}}`, nil, `tenants["acme"].auto_approve_up_to is -1: give an amount in EUR, 0 or more`},
		{"3 decimals", `{"tenants": {"acme": {"two_people_above": 10.005}}}`, nil, "with at most 2 decimals"},
		{"automatic above two people", `{"tenants": {"acme": {"auto_approve_up_to": 200, "two_people_above": 100}}}`, nil,
			`tenants["acme"]: auto_approve_up_to (200.00) is above two_people_above (100.00)`},
		{"automatic above the default two people", `{"tenants": {"acme": {"auto_approve_up_to": 6000}}}`, nil, "is above two_people_above (5000.00)"},
		{"no tenant", `{}`, nil, "no tenant is named"},
		{"a tenant with no limit", `{"tenants": {"acme": {}}}`, nil, "at least one of auto_approve_up_to and two_people_above"},
		{"a null tenant", `{"tenants": {"acme": null}}`, nil, `tenants["acme"]: give`},
		{"a tenant with no name", `{"tenants": {"": {"auto_approve_up_to": 1}}}`, nil, `tenants[""]: give a tenant's name`},
		{"not JSON", `tenants: acme`, nil, "invalid character"},
		{"two values", `{"tenants": {"acme": {"auto_approve_up_to": 1}}} {}`, nil, "more than one JSON value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseLimits([]byte(tc.file))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("%v, want %v", got, tc.want)
			}
			for name, lim := range tc.want {
				if got[name] != lim {
					t.Errorf("%s: %+v, want %+v", name, got[name], lim)
				}
			}
		})
	}
}

// TestLoadLimits: a file is read and named in its errors; a missing one is
// refused.
func TestLoadLimits(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.json"), filepath.Join(dir, "bad.json")
	if err := os.WriteFile(good, []byte(`{"tenants": {"acme": {"auto_approve_up_to": 100}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte(`{"tenants": {"acme": {"auto_aprove_up_to": 100}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := LoadLimits(good); err != nil || got["acme"].AutoApproveUpTo != 100_00 {
		t.Errorf("%s: %v, %v; want acme's automatic limit 100.00", good, got, err)
	}
	if _, err := LoadLimits(bad); err == nil || !strings.Contains(err.Error(), "limits file "+bad+`: json: unknown field "auto_aprove_up_to"`) {
		t.Errorf("%s: %v, want an error naming the file and the field", bad, err)
	}
	if _, err := LoadLimits(filepath.Join(dir, "missing.json")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing file: %v, want not-exist", err)
	}
}
