package taskcontract

import (
	"errors"
	"fmt"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/policy"
)

// checkRules refuses a grant (at field f of the contract) whose policy
// rules do not compile, naming the grant and the rule, or that asks for
// more approvals than rein counts.
func checkRules(f string, g *reinv1.ToolGrant) error {
	if g.GetApprovals() > MaxApprovals {
		return &FieldError{f + ".approvals", fmt.Sprintf("tool %q needs %d approvals; at most %d", g.GetName(), g.GetApprovals(), MaxApprovals)}
	}
	if n := len(g.GetRules()); n > MaxRules {
		return &FieldError{f + ".rules", fmt.Sprintf("tool %q has %d rules; at most %d", g.GetName(), n, MaxRules)}
	}
	names := map[string]bool{}
	for j, r := range g.GetRules() {
		if names[r.GetName()] {
			return &FieldError{fmt.Sprintf("%s.rules[%d].name", f, j), fmt.Sprintf("tool %q has two rules named %q: give each its own name, so that a decision names one", g.GetName(), r.GetName())}
		}
		names[r.GetName()] = true
	}
	if _, err := policy.Compile(g.GetRules()); err != nil {
		var ce *policy.CompileError
		if errors.As(err, &ce) {
			return &FieldError{fmt.Sprintf("%s.rules[%d]", f, ce.Index), fmt.Sprintf("tool %q, rule %q: %v; nothing was stored", g.GetName(), ce.Rule, ce.Err)}
		}
		return &FieldError{f + ".rules", err.Error()}
	}
	return nil
}

// The bounds on a grant's policy (contract.proto says them too).
const (
	MaxApprovals = 16
	MaxRules     = 64
)
