package main

// README.md's snippets, checked against the service: what a reader copies
// from it works.

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// TestReadme: what README.md shows holds: its grant names the service and
// requires a currency; its limits file gives acme and globex what it says;
// its grpcurl calls get the answers quoted under them.
func TestReadme(t *testing.T) {
	ctx := testCtx(t)
	data, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var grants, files int
	for _, m := range regexp.MustCompile("(?s)```json\n(.*?)```").FindAllStringSubmatch(string(data), -1) {
		switch block := m[1]; {
		case strings.Contains(block, "policyService"):
			grants++
			g := &reinv1.ToolGrant{}
			if err := protojson.Unmarshal([]byte(block), g); err != nil {
				t.Fatalf("the grant: %v", err)
			}
			required := g.GetInputSchema().GetFields()["required"].GetListValue().AsSlice()
			if g.GetName() != toolRefund || g.GetPolicyService() != "finance" || len(required) != 4 || required[2] != "currency" {
				t.Errorf("the grant names %q with policy service %q and requires %v; want refunds.create, finance, currency among 4", g.GetName(), g.GetPolicyService(), required)
			}
		case strings.Contains(block, "tenants"):
			files++
			tenants, err := ParseLimits([]byte(block))
			if err != nil {
				t.Fatalf("the limits file: %v", err)
			}
			f := NewFinance(tenants, nil)
			for _, tc := range []struct {
				tenant, amount string
				want           reinv1.PolicyEffect
			}{{"acme", "80", allow}, {"globex", "80", askEffect}, {"globex", "0.01", askEffect}} {
				if resp, err := f.Check(ctx, refund(t, toolRefund, tc.tenant, "alice", eur(tc.amount))); err != nil || resp.GetEffect() != tc.want {
					t.Errorf("%s EUR for %s: %v, %v; want %s", tc.amount, tc.tenant, resp, err, tc.want)
				}
			}
		}
	}
	if grants != 1 || files != 1 {
		t.Fatalf("%d grants and %d limits files in README.md, want 1 of each", grants, files)
	}

	addr, _ := serve(t, NewFinance(nil, nil))
	c := reinv1.NewPolicyServiceClient(dial(t, addr))
	calls := regexp.MustCompile(`(?m)-d '(\{.*\})' 127\.0\.0\.1:7400 rein\.v1\.PolicyService/Check\n# (.*)$`).FindAllStringSubmatch(string(data), -1)
	if len(calls) != 3 {
		t.Fatalf("%d grpcurl calls with their answers in README.md, want 3", len(calls))
	}
	for _, m := range calls {
		req, want := &reinv1.CheckRequest{}, &reinv1.CheckResponse{}
		if err := protojson.Unmarshal([]byte(m[1]), req); err != nil {
			t.Fatalf("%s: %v", m[1], err)
		}
		if err := protojson.Unmarshal([]byte("{"+m[2]+"}"), want); err != nil {
			t.Fatalf("the answer %s: %v", m[2], err)
		}
		got, err := c.Check(ctx, req)
		if err != nil || got.GetEffect() != want.GetEffect() || got.GetApprovals() != want.GetApprovals() {
			t.Errorf("%s: %v (%v), want %s", m[1], got, err, m[2])
		}
	}
}
