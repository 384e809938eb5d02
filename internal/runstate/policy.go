package runstate

import (
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// applyPolicyDecided folds a policy's decision on the step's tool call: it
// is what lets a policy_decided allow approve the call's write
// (checkApprover).
func applyPolicyDecided(s State, ev *reinv1.Event, pd *reinv1.PolicyDecided) (State, error) {
	if err := need(s, ev, reinv1.RunStatus_RUN_STATUS_RUNNING); err != nil {
		return s, err
	}
	switch {
	case pd.GetCallId() == "" || pd.GetTool() == "":
		return s, fmt.Errorf("%w: policy_decided without the call it decides", ErrInvalidEvent)
	case pd.GetEffect() == reinv1.PolicyEffect_POLICY_EFFECT_UNSPECIFIED:
		return s, fmt.Errorf("%w: policy_decided without an effect", ErrInvalidEvent)
	case pd.GetSource() == reinv1.PolicySource_POLICY_SOURCE_UNSPECIFIED || pd.GetRule() == "":
		return s, fmt.Errorf("%w: policy_decided that names no rule or service", ErrInvalidEvent)
	}
	s.Policy = pd
	return s, nil
}

// Needed is how many distinct approvals p needs: at least one.
func Needed(p *reinv1.Proposal) int { return max(int(p.GetApprovals()), 1) }

// applyApprovalGiven folds one person's approval of a proposal that needs
// more than one: the proposal stays pending, with the approver counted.
func applyApprovalGiven(s State, ev *reinv1.Event, ag *reinv1.ApprovalGiven) (State, error) {
	if err := need(s, ev, reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL); err != nil {
		return s, err
	}
	p := s.Pending.GetProposal()
	switch {
	case p == nil || ag.GetProposalId() != p.GetProposalId():
		return s, fmt.Errorf("%w: approval_given for proposal %q, but the pending proposal is %q", ErrIllegalTransition, ag.GetProposalId(), p.GetProposalId())
	case len(p.GetApprovedBy())+1 >= Needed(p):
		return s, fmt.Errorf("%w: approval_given would be approval %d of the %d proposal %q needs; the last is approval_decided",
			ErrIllegalTransition, len(p.GetApprovedBy())+1, Needed(p), p.GetProposalId())
	}
	if err := s.checkApprover(ev, p, false); err != nil {
		return s, err
	}
	next := proto.CloneOf(p)
	next.ApprovedBy = append(next.ApprovedBy, strings.TrimPrefix(ev.GetActor(), "principal:"))
	s.Pending = &reinv1.PendingAction{Action: &reinv1.PendingAction_Proposal{Proposal: next}}
	return s, nil
}

// checkApprover refuses an approval of p that its actor may not give: a
// policy's, unless the step's policy decision allowed p's call and p needs
// one approval; a person's, when p needs several, unless the person is
// neither the run's starter nor one who approved already. last is true for
// the approval that decides p (approval_decided), which must be the
// last one p needs.
func (s State) checkApprover(ev *reinv1.Event, p *reinv1.Proposal, last bool) error {
	actor := ev.GetActor()
	if rule, ok := strings.CutPrefix(actor, "policy:"); ok {
		pd := s.Policy
		if pd.GetEffect() != reinv1.PolicyEffect_POLICY_EFFECT_ALLOW || pd.GetCallId() != p.GetCallId() || pd.GetRule() != rule || Needed(p) > 1 {
			return fmt.Errorf("%w: proposal %q approved by %s, but no policy decision of this step allows its call", ErrIllegalTransition, p.GetProposalId(), actor)
		}
		return nil
	}
	if Needed(p) == 1 {
		return nil
	}
	who, ok := strings.CutPrefix(actor, "principal:")
	switch {
	case !ok || who == "":
		return fmt.Errorf("%w: proposal %q needs %d approvals from people, and %q is not a person", ErrIllegalTransition, p.GetProposalId(), Needed(p), actor)
	case who == s.Principal:
		return fmt.Errorf("%w: %s started run %q and may not be one of the %d approvers of proposal %q", ErrIllegalTransition, who, s.RunID, Needed(p), p.GetProposalId())
	case slices.Contains(p.GetApprovedBy(), who):
		return fmt.Errorf("%w: %s approved proposal %q already", ErrIllegalTransition, who, p.GetProposalId())
	case last && len(p.GetApprovedBy())+1 < Needed(p):
		return fmt.Errorf("%w: proposal %q has %d of the %d approvals it needs; approval_decided is the last", ErrIllegalTransition, p.GetProposalId(), len(p.GetApprovedBy())+1, Needed(p))
	}
	return nil
}

// withoutApprovers is p with no approvals counted.
func withoutApprovers(p *reinv1.Proposal) *reinv1.Proposal {
	if len(p.GetApprovedBy()) == 0 {
		return p
	}
	next := proto.CloneOf(p)
	next.ApprovedBy = nil
	return next
}
