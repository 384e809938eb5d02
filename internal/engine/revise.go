package engine

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/step"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/taskcontract"
	"github.com/reinhq/rein/internal/tools"
)

// revise replaces the run's pending proposal, which v names by ID and hash
// (checkVerdict), with a revision of its arguments: v.Arguments, checked
// against the tool's input schema and proposed again to the tool for a new
// preview, under a new proposal ID and hash, recorded as proposal_revised
// with what changed and who changed it. The run stays needs_approval, and
// the revision is approved like any proposal: the approval binds to its
// hash. A tool with no input schema marks the revision unchecked_arguments;
// the person's reason goes with it. Arguments the schema refuses are a FieldError; a tool that cannot
// preview them, or a write whose earlier dispatch has an unknown outcome,
// is refused (ErrNotWaiting). A refusal records nothing.
func (e *Engine) revise(ctx context.Context, st runstate.State, v Verdict) (runstate.State, error) {
	old := st.Pending.GetProposal()
	if st.WriteOperationID != "" {
		return st, fmt.Errorf("%w: proposal %s was dispatched and its outcome is unknown; approve it again (rein looks the write up first) or reject it, and propose a revision after",
			ErrNotWaiting, old.GetProposalId())
	}
	why, checked, err := step.CheckArguments(ctx, e.executor(), st.Contract.GetTools(), old.GetTool(), v.Arguments, e.cfg.ToolTimeout)
	if err != nil {
		return st, err
	}
	if why != "" {
		return st, &taskcontract.FieldError{Field: "arguments", Description: "the revised arguments do not match the tool's input schema, and nothing was recorded: " + why}
	}
	whole, err := step.WholeProposal(ctx, e.cfg.Store, st.RunID, old)
	if err != nil {
		return st, err
	}
	call := tools.Call{RunID: st.RunID, CallID: old.GetCallId(), Tool: old.GetTool(), Args: v.Arguments,
		Index: int(st.CallsByTool[old.GetTool()]) - 1}
	// The policies decide the revised call as they would the model's: one
	// they deny is refused, and it needs as many approvals as either asks.
	approvals := old.GetApprovals()
	if pd := step.Revised(ctx, &e.steps, st, old, v.Arguments); pd != nil {
		if pd.GetEffect() == reinv1.PolicyEffect_POLICY_EFFECT_DENY {
			return st, fmt.Errorf("%w: the revised arguments are denied by %s %q (%s), and nothing was recorded; revise them otherwise, or reject the proposal",
				ErrForbidden, step.PolicySourceName(pd.GetSource()), pd.GetRule(), pd.GetMessage())
		}
		approvals = max(approvals, pd.GetApprovals())
	}
	preview := old.GetPreview()
	if old.GetTier() != reinv1.ToolTier_TOOL_TIER_READ {
		pctx, cancel := context.WithTimeoutCause(ctx, e.cfg.ToolTimeout, e.toolTimedOut("preview"))
		defer cancel()
		preview, err = step.Await(pctx, e.stepped, func(ctx context.Context) (*structpb.Value, error) { return e.executor().Propose(ctx, call) })
		if err != nil {
			return st, fmt.Errorf("%w: tool %s could not preview the revised write, and nothing was recorded: %v", ErrNotWaiting, old.GetTool(), err)
		}
	}
	now := e.cfg.Clock()
	p := &reinv1.Proposal{
		ProposalId: e.newID("prop_", now),
		Tool:       old.GetTool(),
		Arguments:  v.Arguments,
		Preview:    preview,
		ExpiresAt:  timestamppb.New(now.Add(st.Contract.GetApproval().GetProposalTtl().AsDuration())),
		RunVersion: st.Version,
		CallId:     old.GetCallId(),
		RevisedBy:  v.Principal,
		Approvals:  approvals,
		Tier:       old.GetTier(),
		PolicyRule: old.GetPolicyRule(), PolicyMessage: old.GetPolicyMessage(),
		UncheckedArguments: !checked, RevisionReason: v.Reason,
	}
	changes := step.ArgumentChanges(whole.GetArguments(), v.Arguments)
	blobs := step.InlineProposal(p)
	p.Hash = step.ProposalHash(p)
	var opts []store.AppendOption
	if blobs != nil {
		opts = append(opts, store.WithBlobs(blobs))
	}
	// Stamped with the instant its expiry counts from, as a step's events
	// are, so a replay reaches the same expiry.
	next, err := e.commit(ctx, st, "principal:"+v.Principal, []*reinv1.Event{{RecordedAt: timestamppb.New(now), Payload: &reinv1.Event_ProposalRevised{ProposalRevised: &reinv1.ProposalRevised{
		SupersededProposalId: old.GetProposalId(), Proposal: p, Changes: changes, Reason: v.Reason,
	}}}}, opts...)
	if err != nil {
		return st, err
	}
	e.Arm(next) // the revision expires on its own
	return next, nil
}
