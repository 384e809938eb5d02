package client

import (
	"testing"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

func TestWaitsForPerson(t *testing.T) {
	proposal := func(approvals uint32, by ...string) *reinv1.PendingAction {
		return &reinv1.PendingAction{Action: &reinv1.PendingAction_Proposal{Proposal: &reinv1.Proposal{ProposalId: "prop_1", Approvals: approvals, ApprovedBy: by}}}
	}
	question := &reinv1.PendingAction{Action: &reinv1.PendingAction_Question{Question: &reinv1.Question{Text: "which?"}}}
	for _, c := range []struct {
		name  string
		run   *reinv1.Run
		waits bool
		more  int
	}{
		{"a proposal no one approved", &reinv1.Run{Status: reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL, Pending: proposal(0)}, true, 1},
		{"the first of two approvals given", &reinv1.Run{Status: reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL, Pending: proposal(2, "alice")}, true, 1},
		{"one of three approvals given", &reinv1.Run{Status: reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL, Pending: proposal(3, "alice")}, true, 2},
		{"a question", &reinv1.Run{Status: reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT, Pending: question}, true, 0},
		// The twins: nothing waits for a person.
		{"an approved write in flight", &reinv1.Run{Status: reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL}, false, 0},
		{"running", &reinv1.Run{Status: reinv1.RunStatus_RUN_STATUS_RUNNING}, false, 0},
		{"ended with a stale pending action", &reinv1.Run{Status: reinv1.RunStatus_RUN_STATUS_EXPIRED, Pending: proposal(2, "alice")}, false, 0},
		{"no run", nil, false, 0},
	} {
		if got := WaitsForPerson(c.run); got != c.waits {
			t.Errorf("%s: WaitsForPerson %v, want %v", c.name, got, c.waits)
		}
		if got := ApprovalsWanted(c.run); got != c.more {
			t.Errorf("%s: ApprovalsWanted %d, want %d", c.name, got, c.more)
		}
	}
}
