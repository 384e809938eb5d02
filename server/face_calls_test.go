package server

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/auth"
)

// TestDecideApprovalAs: a face's principal is judged as a caller of the
// gRPC port is. A viewer, another tenant's approver and a request that
// breaks the API's validation are refused and change nothing; the run's
// approver decides, and the run goes on as after DecideApproval.
func TestDecideApprovalAs(t *testing.T) {
	s := newPeopleServer(t, Config{Directory: testDirectory(t)}, as("a-operator"))
	run := s.begin(t, writeContract(refundCall(), final("done")), stNeedsApproval)
	p := run.GetPending().GetProposal()
	req := func() *reinv1.DecideApprovalRequest {
		return &reinv1.DecideApprovalRequest{RunId: run.GetRunId(), ProposalId: p.GetProposalId(), ProposalHash: p.GetHash(), Verdict: approveVerdict}
	}
	principal := func(id string) auth.Principal {
		for _, p := range testPrincipals {
			if p.ID == id {
				return p
			}
		}
		t.Fatalf("no test principal %q", id)
		return auth.Principal{}
	}
	m := s.mark(t, run.GetRunId())
	for _, tc := range []struct {
		name string
		who  string
		req  *reinv1.DecideApprovalRequest
		want codes.Code
	}{
		{"a viewer", "a-viewer", req(), codes.PermissionDenied},
		{"an operator", "a-operator", req(), codes.PermissionDenied},
		{"another tenant's admin", "b-admin", req(), codes.NotFound},
		{"no run ID", "a-approver", &reinv1.DecideApprovalRequest{ProposalId: p.GetProposalId(), ProposalHash: p.GetHash(), Verdict: approveVerdict}, codes.InvalidArgument},
		{"a stale hash", "a-approver", &reinv1.DecideApprovalRequest{RunId: run.GetRunId(), ProposalId: p.GetProposalId(), ProposalHash: "00" + p.GetHash()[2:], Verdict: approveVerdict}, codes.FailedPrecondition},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.node.DecideApprovalAs(context.Background(), principal(tc.who), tc.req)
			if codeOf(err) != tc.want {
				t.Fatalf("DecideApprovalAs as %s: %v, want %v", tc.who, err, tc.want)
			}
			s.unchanged(t, tc.name, m)
		})
	}
	if _, err := s.node.GetRunAs(context.Background(), principal("b-viewer"), &reinv1.GetRunRequest{RunId: run.GetRunId()}); codeOf(err) != codes.NotFound {
		t.Fatalf("GetRunAs as another tenant's viewer: %v, want NotFound", err)
	}
	got, err := s.node.GetRunAs(context.Background(), principal("a-viewer"), &reinv1.GetRunRequest{RunId: run.GetRunId()})
	if err != nil || got.GetRun().GetPending().GetProposal().GetHash() != p.GetHash() {
		t.Fatalf("GetRunAs as the tenant's viewer: %v, %v", got, err)
	}
	if _, err := s.node.DecideApprovalAs(context.Background(), principal("a-approver"), req()); err != nil {
		t.Fatalf("DecideApprovalAs as the tenant's approver: %v", err)
	}
	evs := s.watchToEnd(t, run.GetRunId(), m.run.GetVersion())
	if last := evs[len(evs)-1].GetStatusChanged().GetTo(); last != stCompleted {
		t.Fatalf("the run ended %v after the approval, want completed; log:\n%s", last, logText(evs))
	}
	var op string
	for _, ev := range evs {
		if d := ev.GetWriteDispatched(); d != nil {
			op = d.GetOperationId()
		}
	}
	s.tools.wantCommits(t, op)
}
