package server

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// DecideApproval revises a proposal with REVISE and its arguments, or with
// APPROVE and arguments (approving with edits): the run waits for approval
// of the revision. REVISE without arguments, or a rejection with them, is
// InvalidArgument and changes nothing.
func TestDecideApprovalRevises(t *testing.T) {
	s := newPeopleServer(t, Config{})
	run := s.begin(t, writeContract(refundCall(), final("refunded")), reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL)
	p := run.GetPending().GetProposal()
	args, _ := structpb.NewStruct(map[string]any{"account": "acct 42", "amount": 8})
	req := func(v reinv1.ApprovalVerdict, a *structpb.Struct) *reinv1.DecideApprovalRequest {
		return &reinv1.DecideApprovalRequest{RunId: run.GetRunId(), ProposalId: p.GetProposalId(), ProposalHash: p.GetHash(), Verdict: v, Arguments: a}
	}
	m := s.mark(t, run.GetRunId())
	for name, r := range map[string]*reinv1.DecideApprovalRequest{
		"revise without arguments":   req(reinv1.ApprovalVerdict_APPROVAL_VERDICT_REVISE, nil),
		"a rejection with arguments": req(reinv1.ApprovalVerdict_APPROVAL_VERDICT_REJECT, args),
	} {
		if _, err := s.client.DecideApproval(context.Background(), r); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}
	s.unchanged(t, "refused revisions", m)
	got, err := s.client.DecideApproval(context.Background(), req(reinv1.ApprovalVerdict_APPROVAL_VERDICT_APPROVE, args))
	if err != nil {
		t.Fatalf("approve with edits: %v", err)
	}
	np := got.GetRun().GetPending().GetProposal()
	if got.GetRun().GetStatus() != reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL || np.GetProposalId() == p.GetProposalId() ||
		np.GetArguments().GetFields()["amount"].GetNumberValue() != 8 {
		t.Fatalf("after approving with edits: %v pending %v, want the revision waiting for approval", got.GetRun().GetStatus(), np)
	}
	if _, err := s.decide(got.GetRun(), reinv1.ApprovalVerdict_APPROVAL_VERDICT_APPROVE, "ok"); err != nil {
		t.Fatalf("approve the revision: %v", err)
	}
	evs := s.watchToEnd(t, run.GetRunId(), got.GetRun().GetVersion())
	if last := evs[len(evs)-1].GetStatusChanged(); last.GetTo() != reinv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Errorf("the run ended %v, want completed", last)
	}
}
