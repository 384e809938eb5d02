package policy

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

const serverFile = `
# acme may not use shell at all.
[[rules]]
name = "no-shell"
tenants = ["acme"]
tools = ["shell"]
effect = "deny"
when = "true"
message = "shell is not available to this tenant"

# every refund above 1000 needs a person, for every tenant.
[[rules]]
name = "refund-review"
tools = ["refunds.*"]
effect = "ask"
when = "args.amount > 1000"
approvals = 2
`

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "policy.toml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestServerRulesApply: a server rule applies to its tenants and tools
// (patterns), and to no others.
func TestServerRulesApply(t *testing.T) {
	s, err := LoadFile(writeFile(t, serverFile))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	shell := Call{ID: "c", Tool: "shell", Tier: reinv1.ToolTier_TOOL_TIER_READ}
	if d := s.Decide(ctx, shell, &reinv1.PolicyRun{Tenant: "acme"}); d.GetEffect() != deny || d.GetSource() != reinv1.PolicySource_POLICY_SOURCE_SERVER {
		t.Errorf("acme's shell call: %v, want denied by the server", d)
	}
	if d := s.Decide(ctx, shell, &reinv1.PolicyRun{Tenant: "globex"}); d != nil {
		t.Errorf("globex's shell call: %v, want no decision", d)
	}
	big := refund(2000, "EUR")
	if d := s.Decide(ctx, big, &reinv1.PolicyRun{Tenant: "globex"}); d.GetRule() != "refund-review" || d.GetApprovals() != 2 {
		t.Errorf("a large refund: %v, want refund-review with 2 approvals", d)
	}
	if d := s.Decide(ctx, refund(20, "EUR"), &reinv1.PolicyRun{Tenant: "globex"}); d != nil {
		t.Errorf("a small refund: %v, want no decision", d)
	}
}

// TestServerFileRefused: a file with an unknown key, a bad effect, or a
// rule that does not compile is refused with its line.
func TestServerFileRefused(t *testing.T) {
	for _, tc := range []struct{ name, body, want string }{
		{"unknown key", "[[rules]]\nname = \"a\"\neffect = \"deny\"\nwhen = \"true\"\ncolour = \"red\"\n", ":5: unknown key"},
		{"bad effect", "[[rules]]\nname = \"a\"\neffect = \"maybe\"\nwhen = \"true\"\n", `:1: rule 1 ("a"): effect "maybe"`},
		{"does not compile", "[[rules]]\nname = \"a\"\neffect = \"deny\"\nwhen = \"true\"\n\n[[rules]]\nname = \"b\"\neffect = \"deny\"\nwhen = \"run.nope\"\n", `:6: rule 2 ("b")`},
		{"bad pattern", "[[rules]]\nname = \"a\"\ntools = [\"[\"]\neffect = \"deny\"\nwhen = \"true\"\n", "not a tool name or pattern"},
		{"twice", "[[rules]]\nname = \"a\"\neffect = \"deny\"\nwhen = \"true\"\n[[rules]]\nname = \"a\"\neffect = \"deny\"\nwhen = \"true\"\n", "a second rule by this name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadFile(writeFile(t, tc.body))
			var fe *FileError
			if !errors.As(err, &fe) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("LoadFile: %v, want a *FileError with %q", err, tc.want)
			}
		})
	}
	p := writeFile(t, serverFile)
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFile(p); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a file others can read: %v, want refused", err)
	}
}

// TestReloadKeepsRulesOnError: a reload of a file that no longer compiles
// keeps the rules in force; a good one replaces them.
func TestReloadKeepsRulesOnError(t *testing.T) {
	p := writeFile(t, serverFile)
	h, err := NewHolder(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("[[rules]]\nname = \"x\"\neffect = \"deny\"\nwhen = \"args.\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Reload(); err == nil {
		t.Fatal("a reload of a file that does not compile succeeded")
	}
	if n := h.Current().Len(); n != 2 {
		t.Fatalf("after a refused reload %d rules are in force, want the 2 before", n)
	}
	if err := os.WriteFile(p, []byte("[[rules]]\nname = \"x\"\neffect = \"deny\"\nwhen = \"true\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Reload(); err != nil || h.Current().Len() != 1 {
		t.Fatalf("a good reload: %v, %d rules; want 1", err, h.Current().Len())
	}
}

// TestContractCannotLoosen: a contract's allow never overrides a server's
// deny or ask; a contract's deny or ask tightens a server's allow.
func TestContractCannotLoosen(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		server, contract reinv1.PolicyEffect
		want             reinv1.PolicyEffect
		source           reinv1.PolicySource
	}{
		{deny, allow, deny, reinv1.PolicySource_POLICY_SOURCE_SERVER},
		{ask, allow, ask, reinv1.PolicySource_POLICY_SOURCE_SERVER},
		{allow, deny, deny, reinv1.PolicySource_POLICY_SOURCE_CONTRACT},
		{allow, ask, ask, reinv1.PolicySource_POLICY_SOURCE_CONTRACT},
		{ask, deny, deny, reinv1.PolicySource_POLICY_SOURCE_CONTRACT},
		{allow, allow, allow, reinv1.PolicySource_POLICY_SOURCE_SERVER},
	} {
		body := "[[rules]]\nname = \"server\"\neffect = \"" + EffectWord(tc.server) + "\"\nwhen = \"true\"\n"
		h, err := NewHolder(writeFile(t, body))
		if err != nil {
			t.Fatal(err)
		}
		rs, err := Compile([]*reinv1.PolicyRule{rule("contract", tc.contract, "true")})
		if err != nil {
			t.Fatal(err)
		}
		c := &Checker{Server: h}
		d := c.Decide(ctx, &reinv1.ToolGrant{Name: "refunds.create"}, rs, refund(10, "EUR"), nil)
		if d.GetEffect() != tc.want || d.GetSource() != tc.source {
			t.Errorf("server %v, contract %v: got %v from %v, want %v from %v", tc.server, tc.contract, d.GetEffect(), d.GetSource(), tc.want, tc.source)
		}
	}
}
