package client

import (
	"time"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// WaitsForPerson reports whether run waits for a person: paused
// (needs_approval, needs_input, needs_budget) with an action pending (a
// proposal short of its approvals, a question, a budget reached) that only
// a person's decision moves on. A run paused while its approved write is in
// flight waits for the tool, not a person. A caller that follows a run stops
// where it waits for a person: an approval that is not the last a write
// needs (a grant's approvals of 2 or more) answers with a run that still
// waits, for another approver, and nothing moves it until one approves.
func WaitsForPerson(run *reinv1.Run) bool {
	switch run.GetStatus() {
	case reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL, reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT, reinv1.RunStatus_RUN_STATUS_NEEDS_BUDGET:
		return run.GetPending().GetAction() != nil
	}
	return false
}

// ApprovalsWanted is how many more approvals the proposal run waits on
// needs, 0 when it waits on none. Neither the run's starter (its principal)
// nor one who approved it (the proposal's approved_by) may give them.
func ApprovalsWanted(run *reinv1.Run) int {
	p := run.GetPending().GetProposal()
	if p == nil || !WaitsForPerson(run) {
		return 0
	}
	return max(int(p.GetApprovals()), 1) - len(p.GetApprovedBy())
}

// PauseEnds is when the pause run waits in ends if no one acts, and what
// ends it: "proposal_ttl" (the proposal expires), "run_deadline" (the
// run's deadline passes first) or "raise_ttl" (a budget pause expires).
// The server derives both (run.pending.ends_at, ends_by); the zero time
// when the run waits for no person or nothing ends its pause.
func PauseEnds(run *reinv1.Run) (time.Time, string) {
	p := run.GetPending()
	if !WaitsForPerson(run) || p.GetEndsAt() == nil {
		return time.Time{}, ""
	}
	return p.GetEndsAt().AsTime(), p.GetEndsBy()
}
