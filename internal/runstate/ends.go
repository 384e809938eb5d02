package runstate

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// What ends a pause (PendingAction.ends_by).
const (
	// EndsByProposalTTL: the pending proposal expires first.
	EndsByProposalTTL = "proposal_ttl"
	// EndsByRunDeadline: the run's deadline passes first.
	EndsByRunDeadline = "run_deadline"
	// EndsByRaiseTTL: a pause on the budget expires, unraised.
	EndsByRaiseTTL = "raise_ttl"
)

// PauseEnds is when the run's pause ends if no one acts, and what ends it:
// the earlier of its proposal's expiry and the run's deadline, the run's
// deadline for a question, and a budget pause's own expiry (the deadline
// may be what it paused on). The zero time when nothing ends it. The engine
// arms its timer by it, and every face shows it (PendingAction.ends_at),
// so what a person reads is what the server does.
func (s State) PauseEnds() (time.Time, string) {
	if s.Pending == nil {
		return time.Time{}, ""
	}
	if b := s.Pending.GetBudget(); b != nil {
		if b.GetExpiresAt() == nil {
			return time.Time{}, ""
		}
		return b.GetExpiresAt().AsTime(), EndsByRaiseTTL
	}
	at, by := s.Deadline, EndsByRunDeadline
	if exp := s.Pending.GetProposal().GetExpiresAt(); exp != nil && (at.IsZero() || exp.AsTime().Before(at)) {
		at, by = exp.AsTime(), EndsByProposalTTL
	}
	if at.IsZero() {
		return time.Time{}, ""
	}
	return at, by
}

// pendingProto is the run's pending action as the API gives it, with when
// it ends; nil when the run waits for nothing. The stored action is not
// changed.
func (s State) pendingProto() *reinv1.PendingAction {
	if s.Pending == nil {
		return nil
	}
	at, by := s.PauseEnds()
	if at.IsZero() {
		return s.Pending
	}
	return &reinv1.PendingAction{Action: s.Pending.GetAction(), EndsAt: timestamppb.New(at), EndsBy: by}
}

// storedPending is a snapshot's pending action without when it ends, which
// the state derives again (pendingProto).
func storedPending(p *reinv1.PendingAction) *reinv1.PendingAction {
	if p.GetEndsAt() == nil && p.GetEndsBy() == "" {
		return p
	}
	return &reinv1.PendingAction{Action: p.GetAction()}
}
