package policy

import (
	"context"
	"fmt"
	"strings"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// Checker decides a run's tool calls by every policy in force: the
// server's rules, then the call's grant's rules, then the policy service
// the grant names. Its zero value, or a nil *Checker, has no server rules
// and no services.
type Checker struct {
	// Server decides by the server's rules (a *Holder, or a replay's
	// recording); nil for none.
	Server Decider
	// Services answer grants that name one; nil for none.
	Services Asker
}

// Decide decides call, made by run, to the tool of grant, whose compiled
// rules are rules. It returns nil when no policy decides the call (its
// tier does). The order (docs/design.md §15):
//
//  1. The server's rules for the run's tenant and the tool, first match;
//     a deny ends it there.
//  2. The grant's rules, first match; a deny ends it there.
//  3. The grant's policy service, if it names one.
//
// Of the decisions made, the strictest stands (deny, then ask, then
// allow), so a contract can tighten the server's rules but never loosen
// them; of equals the first (the server's) is recorded. An ask needs the
// most approvals any ask, or the grant, asked for. The decision names the
// digest of the server's rules it was made under (policy_digest).
func (c *Checker) Decide(ctx context.Context, grant *reinv1.ToolGrant, rules Rules, call Call, run *reinv1.PolicyRun) *reinv1.PolicyDecided {
	server, digest := c.server(call)
	d := c.decide(ctx, server, grant, rules, call, run)
	if d != nil && d.PolicyDigest == "" && digest != "" {
		d.PolicyDigest = digest
	}
	return d
}

// decide is Decide by the server's rules server (nil for none).
func (c *Checker) decide(ctx context.Context, server Decider, grant *reinv1.ToolGrant, rules Rules, call Call, run *reinv1.PolicyRun) *reinv1.PolicyDecided {
	var made []*reinv1.PolicyDecided
	if server != nil {
		if d := server.Decide(ctx, call, run); d != nil {
			if d.GetEffect() == reinv1.PolicyEffect_POLICY_EFFECT_DENY {
				return d
			}
			made = append(made, d)
		}
	}
	if d := rules.Decide(ctx, call, run); d != nil {
		if d.GetEffect() == reinv1.PolicyEffect_POLICY_EFFECT_DENY {
			return d
		}
		made = append(made, d)
	}
	if name := grant.GetPolicyService(); name != "" {
		var asker Asker = (*Services)(nil)
		if c != nil && c.Services != nil {
			asker = c.Services
		}
		if d := asker.Ask(ctx, name, call, run); d != nil {
			made = append(made, d)
		}
	}
	return strictest(made, grant.GetApprovals())
}

// Decider decides a call by the server's rules.
type Decider interface {
	// Decide is the decision on call, made by run, with Source SERVER;
	// nil when no rule decides it.
	Decide(ctx context.Context, call Call, run *reinv1.PolicyRun) *reinv1.PolicyDecided
}

// Decides reports whether any policy may decide a call to grant, whose
// compiled rules are rules: when none may, Decide is nil and need not be
// asked (a step skips building what a policy sees).
func (c *Checker) Decides(grant *reinv1.ToolGrant, rules Rules) bool {
	if len(rules) > 0 || grant.GetPolicyService() != "" {
		return true
	}
	if c == nil || c.Server == nil {
		return false
	}
	if h, ok := c.Server.(*Holder); ok {
		return h.Current().Len() > 0
	}
	return true
}

// rank orders effects by strictness.
func rank(e reinv1.PolicyEffect) int {
	switch e {
	case reinv1.PolicyEffect_POLICY_EFFECT_DENY:
		return 3
	case reinv1.PolicyEffect_POLICY_EFFECT_ASK:
		return 2
	case reinv1.PolicyEffect_POLICY_EFFECT_ALLOW:
		return 1
	}
	return 0
}

func strictest(made []*reinv1.PolicyDecided, grantApprovals uint32) *reinv1.PolicyDecided {
	var best *reinv1.PolicyDecided
	for _, d := range made {
		if best == nil || rank(d.GetEffect()) > rank(best.GetEffect()) {
			best = d
		}
	}
	if best.GetEffect() == reinv1.PolicyEffect_POLICY_EFFECT_ASK {
		n := grantApprovals
		for _, d := range made {
			if d.GetEffect() == reinv1.PolicyEffect_POLICY_EFFECT_ASK {
				n = max(n, d.GetApprovals())
			}
		}
		best.Approvals = n
	}
	return best
}

// CheckGrants says why a contract's grants cannot run on this checker (a
// grant names a policy service no one registered), or nil.
func (c *Checker) CheckGrants(grants []*reinv1.ToolGrant) error {
	for i, g := range grants {
		name := g.GetPolicyService()
		if name == "" {
			continue
		}
		var asker Asker
		if c != nil {
			asker = c.Services
		}
		if asker == nil || !asker.Has(name) {
			known := "none is registered"
			if s, ok := asker.(*Services); ok && len(s.Names()) > 0 {
				known = "the registered ones are " + strings.Join(s.Names(), ", ")
			}
			return fmt.Errorf("contract.tools[%d].policy_service: tool %q names policy service %q, which this server does not have (%s); register it with rein serve --policy-service %s=ADDR, or remove it from the grant",
				i, g.GetName(), name, known, name)
		}
	}
	return nil
}
