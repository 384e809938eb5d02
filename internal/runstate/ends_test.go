package runstate

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// A pause ends at the earlier of its proposal's expiry and the run's
// deadline; a question at the deadline; a budget pause at its own expiry.
// The API's pending action carries that end, and a snapshot read back
// derives it again.
func TestPauseEnds(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	proposal := func(exp time.Time) *reinv1.PendingAction {
		return &reinv1.PendingAction{Action: &reinv1.PendingAction_Proposal{Proposal: &reinv1.Proposal{ExpiresAt: timestamppb.New(exp)}}}
	}
	question := &reinv1.PendingAction{Action: &reinv1.PendingAction_Question{Question: &reinv1.Question{Text: "?"}}}
	budget := &reinv1.PendingAction{Action: &reinv1.PendingAction_Budget{Budget: &reinv1.BudgetPause{ExpiresAt: timestamppb.New(t0.Add(time.Hour))}}}
	for _, c := range []struct {
		name     string
		pending  *reinv1.PendingAction
		deadline time.Time
		at       time.Time
		by       string
	}{
		{"a TTL past the deadline", proposal(t0.Add(time.Hour)), t0.Add(2 * time.Minute), t0.Add(2 * time.Minute), EndsByRunDeadline},
		{"a TTL before the deadline", proposal(t0.Add(time.Minute)), t0.Add(time.Hour), t0.Add(time.Minute), EndsByProposalTTL},
		{"a TTL and no deadline", proposal(t0.Add(time.Minute)), time.Time{}, t0.Add(time.Minute), EndsByProposalTTL},
		{"a question", question, t0.Add(time.Hour), t0.Add(time.Hour), EndsByRunDeadline},
		{"a budget pause past the deadline", budget, t0, t0.Add(time.Hour), EndsByRaiseTTL},
		// The twins: nothing ends the pause, or there is none.
		{"a question and no deadline", question, time.Time{}, time.Time{}, ""},
		{"no pause", nil, t0, time.Time{}, ""},
	} {
		s := State{Pending: c.pending, Deadline: c.deadline}
		at, by := s.PauseEnds()
		if !at.Equal(c.at) || by != c.by {
			t.Errorf("%s: PauseEnds %v %q, want %v %q", c.name, at, by, c.at, c.by)
		}
		p := s.Proto(false).GetPending()
		if got := p.GetEndsAt(); (got == nil) != c.at.IsZero() || (got != nil && !got.AsTime().Equal(c.at)) || p.GetEndsBy() != c.by {
			t.Errorf("%s: the API's pending ends %v %q, want %v %q", c.name, got, p.GetEndsBy(), c.at, c.by)
		}
		if back := FromProto(s.Proto(false), nil); back.Pending.GetEndsAt() != nil {
			t.Errorf("%s: a snapshot read back keeps ends_at %v in the state; it is derived", c.name, back.Pending.GetEndsAt())
		}
	}
}
