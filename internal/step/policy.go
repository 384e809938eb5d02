package step

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/policy"
	"github.com/reinhq/rein/internal/runstate"
)

// compileRules compiles the grants' policy rules, once for the driver's
// life. A grant whose rules no longer compile (they did when the run
// started: a later rein may check them more strictly) keeps the error, and
// its calls fail closed to a person (decidePolicy).
func compileRules(grants []*reinv1.ToolGrant) (map[string]policy.Rules, map[string]error) {
	var rules map[string]policy.Rules
	var bad map[string]error
	for _, g := range grants {
		if len(g.GetRules()) == 0 {
			continue
		}
		rs, err := policy.Compile(g.GetRules())
		if err != nil {
			if bad == nil {
				bad = map[string]error{}
			}
			bad[g.GetName()] = err
			continue
		}
		if rules == nil {
			rules = map[string]policy.Rules{}
		}
		rules[g.GetName()] = rs
	}
	return rules, bad
}

// decidePolicy is the policies' decision on call to grant's tool, or nil
// when no policy decides it (its tier does).
func (r *Stepper) decidePolicy(ctx context.Context, grant *reinv1.ToolGrant, call *reinv1.ToolCall) *reinv1.PolicyDecided {
	if err := r.badRules[grant.GetName()]; err != nil {
		return &reinv1.PolicyDecided{CallId: call.GetCallId(), Tool: call.GetTool(), Effect: reinv1.PolicyEffect_POLICY_EFFECT_ASK,
			Source: reinv1.PolicySource_POLICY_SOURCE_CONTRACT, Rule: "contract", Approvals: grant.GetApprovals(),
			Error: fmt.Sprintf("the grant's rules do not compile: %v", err), Message: "the grant's rules could not be evaluated, so a person decides",
			PolicyDigest: r.cfg.Policy.DigestFor(policy.Call{ID: call.GetCallId(), Tool: call.GetTool(), Tier: grant.GetTier(), Args: call.GetArguments()})}
	}
	rules := r.rules[grant.GetName()]
	if !r.cfg.Policy.Decides(grant, rules) {
		return nil
	}
	c := policy.Call{ID: call.GetCallId(), Tool: call.GetTool(), Tier: grant.GetTier(), Args: call.GetArguments()}
	return r.cfg.Policy.Decide(ctx, grant, rules, c, PolicyRun(r.st))
}

// PolicyRun is what a policy sees of the run st.
func PolicyRun(st runstate.State) *reinv1.PolicyRun {
	spent := st.Spent()
	return &reinv1.PolicyRun{
		Id: st.RunID, SpentUsd: spent.CostUSD, Step: int64(st.Steps), Tokens: int64(spent.Tokens),
		Principal: st.Principal, Tenant: st.Tenant, Labels: st.Contract.GetLabels(), Parent: st.DelegatedBy.GetParentRunId(),
	}
}

// policyOf is the step's policy decision on call, if one was made.
func (r *Stepper) policyOf(call *reinv1.ToolCall) *reinv1.PolicyDecided {
	if pd := r.st.Policy; pd != nil && pd.GetCallId() == call.GetCallId() {
		return pd
	}
	return nil
}

// denied is the observation the model is shown for a call a policy denied.
func denied(pd *reinv1.PolicyDecided) string {
	why := pd.GetMessage()
	if why == "" {
		why = "the policy does not allow this call"
	}
	return fmt.Sprintf("tool %q was not run: %s (denied by %s %q); do not make this call again as it is",
		pd.GetTool(), why, PolicySourceName(pd.GetSource()), pd.GetRule())
}

// Revised is the policies' decision on a pending proposal old of run st
// with its arguments revised to args, or nil when none decides it. Only a
// deny or an ask counts: a person revised the call, and people approve it.
func Revised(ctx context.Context, cfg *Config, st runstate.State, old *reinv1.Proposal, args *structpb.Struct) *reinv1.PolicyDecided {
	var grant *reinv1.ToolGrant
	for _, g := range st.Contract.GetTools() {
		if g.GetName() == old.GetTool() {
			grant = g
		}
	}
	if grant == nil {
		return nil
	}
	rules, bad := compileRules([]*reinv1.ToolGrant{grant})
	if bad != nil {
		return nil
	}
	c := policy.Call{ID: old.GetCallId(), Tool: old.GetTool(), Tier: grant.GetTier(), Args: args}
	pd := cfg.Policy.Decide(ctx, grant, rules[grant.GetName()], c, PolicyRun(st))
	if pd.GetEffect() == reinv1.PolicyEffect_POLICY_EFFECT_ALLOW {
		return nil
	}
	return pd
}

// PolicySourceName names where a policy decision came from, in words.
func PolicySourceName(s reinv1.PolicySource) string {
	switch s {
	case reinv1.PolicySource_POLICY_SOURCE_SERVER:
		return "the server's rule"
	case reinv1.PolicySource_POLICY_SOURCE_SERVICE:
		return "policy service"
	}
	return "the contract's rule"
}

// approvalsFor is how many people must approve a proposal of call to
// grant's tool: what the policy's ask said (policy.Checker counts the
// grant's in), else the grant's.
func approvalsFor(grant *reinv1.ToolGrant, pd *reinv1.PolicyDecided) uint32 {
	if pd.GetEffect() == reinv1.PolicyEffect_POLICY_EFFECT_ASK {
		return pd.GetApprovals()
	}
	return grant.GetApprovals()
}

// policyApproval is the events that approve a proposal p with no person,
// as the policy decision pd allows, and dispatch its write: the engine's
// driver then commits it (as it settles any dispatched write).
func policyApproval(p *reinv1.Proposal, pd *reinv1.PolicyDecided) []*reinv1.Event {
	reason := fmt.Sprintf("allowed by %s %q", PolicySourceName(pd.GetSource()), pd.GetRule())
	if pd.GetMessage() != "" {
		reason += ": " + pd.GetMessage()
	}
	return []*reinv1.Event{
		{Actor: "policy:" + pd.GetRule(), Payload: &reinv1.Event_ApprovalDecided{ApprovalDecided: &reinv1.ApprovalDecided{
			ProposalId: p.GetProposalId(), Approved: true, Reason: reason,
		}}},
		{Actor: "harness", Payload: &reinv1.Event_WriteDispatched{WriteDispatched: &reinv1.WriteDispatched{
			ProposalId: p.GetProposalId(), OperationId: "op_" + p.GetProposalId(),
		}}},
	}
}

// askPreview is the preview of a read a policy paused: what it would read.
func askPreview(call *reinv1.ToolCall) *structpb.Value {
	return structpb.NewStringValue(fmt.Sprintf("a read of tool %q, paused by a policy for a person's approval; approved, it runs and its output goes to the model", call.GetTool()))
}
