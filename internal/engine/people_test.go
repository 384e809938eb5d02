package engine

// Tests of a paused run against the injected clock (docs/design.md §2, §7): the
// engine's clock, not the wall clock, decides when a proposal expires and
// when a run's deadline passes; a timer that fires before its time by that
// clock arms itself again. The server's tests (server/people_test.go) cover
// the same features end to end.

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
)

// setClock moves a test clock to at.
func setClock(c *testClock, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = at
}

// waitEnded polls the store until the run is terminal, or fails after 10s.
func waitEnded(t *testing.T, s Store, runID string) {
	t.Helper()
	ctx := testCtx(t)
	bound := time.After(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := s.Load(ctx, runID)
		if err != nil {
			t.Fatal(err)
		}
		if runstate.Terminal(st.Status) {
			return
		}
		select {
		case <-tick.C:
		case <-bound:
			t.Fatalf("run %s is still %s after 10s", runID, runstate.StatusName(st.Status))
		}
	}
}

// TestTimerFollowsInjectedClock: a paused run's timer fires by the wall
// clock, but ends the run only when the engine's clock says it is due:
// until then it finds nothing due and arms itself again, and the run stays
// as it is. Once the engine's clock reaches the due time, the next firing
// ends the run, with no model call and no commit.
func TestTimerFollowsInjectedClock(t *testing.T) {
	const wait = 80 * time.Millisecond
	approval := testContract(callReply("send_email", "call-1", nil), finalReply("sent"))
	approval.Approval = &reinv1.ApprovalPolicy{ProposalTtl: durationpb.New(wait)}
	input := testContract(askReply("Which quarter?"), finalReply("Q3"))
	input.Budget = &reinv1.Budget{Timeout: durationpb.New(wait)}
	for _, tc := range []struct {
		name     string
		contract *reinv1.TaskContract
		paused   reinv1.RunStatus
		want     reinv1.RunStatus
		reason   string
	}{
		{"proposal expires", approval, statusNeedsApproval, reinv1.RunStatus_RUN_STATUS_EXPIRED, "proposal_expired"},
		{"deadline passes", input, statusNeedsInput, statusExhausted, "deadline"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clock := newClock(t0, 0)
			ex := searchTools(t)
			spy := &modelSpy{}
			e, s := setup(t, Config{Tools: ex, Clock: clock.Now, Models: spy.models(nil)})
			paused, _ := runToRest(t, e, s, tc.contract)
			if paused.Status != tc.paused {
				t.Fatalf("run is %s, want %s", runstate.StatusName(paused.Status), runstate.StatusName(tc.paused))
			}
			due := paused.Deadline
			if p := paused.Pending.GetProposal(); p != nil {
				due = p.GetExpiresAt().AsTime()
			}
			if due.IsZero() {
				t.Fatal("the paused run has nothing due")
			}

			// The wall clock passes the due time several times over; the
			// engine's clock stands still. The timer fires (it reads the
			// clock) and arms itself again; the run does not move.
			reads := clock.Reads()
			wallDue := time.Now().Add(3 * wait)
			bound := time.After(10 * time.Second)
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for time.Now().Before(wallDue) || clock.Reads() < reads+4 {
				st, err := s.Load(testCtx(t), paused.RunID)
				if err != nil {
					t.Fatal(err)
				}
				if st.Version != paused.Version {
					_, evs := stored(t, s, paused.RunID)
					t.Fatalf("the run moved before the engine's clock reached its due time; log:\n%s", dump(evs))
				}
				select {
				case <-tick.C:
				case <-bound:
					t.Fatalf("the timer read the clock %d times in 10s, want it to fire and arm itself again", clock.Reads()-reads)
				}
			}

			// The twin: the engine's clock reaches the due time.
			setClock(clock, due)
			waitEnded(t, s, paused.RunID)
			st, evs := stored(t, s, paused.RunID)
			wantStatus(t, st, evs, tc.want, tc.reason)
			tail := evs[paused.Version:]
			wantLen := 1
			if tc.want == statusExhausted {
				wantLen = 2
				if br := tail[0].GetBudgetReached(); br.GetLimit() != "deadline" {
					t.Errorf("budget_reached %v, want limit deadline", br)
				}
			}
			if len(tail) != wantLen {
				t.Fatalf("%d events after the pause, want %d; log:\n%s", len(tail), wantLen, dump(evs))
			}
			for _, ev := range tail {
				if !ev.GetRecordedAt().AsTime().Equal(due) || ev.GetActor() != "harness" {
					t.Errorf("event %d recorded at %v by %q, want at the engine's clock %v by the harness",
						ev.GetSequence(), ev.GetRecordedAt().AsTime(), ev.GetActor(), due)
				}
			}
			if n := spy.calls.Load(); n != 1 {
				t.Errorf("%d model calls, want only the one before the pause", n)
			}
			ex.wantCalls(t, 0, int32(len(ofType(evs, "approval_requested"))), 0)
		})
	}
}

// TestDecisionAtExpiry: a proposal is decided by the engine's clock: a
// decision an instant before expires_at is taken, one at expires_at is
// refused with ErrNotWaiting and stores nothing.
func TestDecisionAtExpiry(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before time.Duration // how long before expires_at the decision is made
		ok     bool
	}{
		{"an instant before", time.Nanosecond, true},
		{"at expiry", 0, false},
		{"after", -time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newClock(t0, 0)
			ex := searchTools(t)
			e, s := setup(t, Config{Tools: ex, Clock: clock.Now})
			c := testContract(callReply("send_email", "call-1", nil), finalReply("sent"))
			c.Approval = &reinv1.ApprovalPolicy{ProposalTtl: durationpb.New(time.Hour)}
			paused, _ := runToRest(t, e, s, c)
			p := paused.Pending.GetProposal()
			if paused.Status != statusNeedsApproval || p == nil {
				t.Fatalf("run is %s with pending %v, want needs_approval", runstate.StatusName(paused.Status), paused.Pending)
			}
			setClock(clock, p.GetExpiresAt().AsTime().Add(-tc.before))
			got, err := e.DecideApproval(testCtx(t), Verdict{
				RunID: paused.RunID, ProposalID: p.GetProposalId(), ProposalHash: p.GetHash(), Approve: true, Principal: "bob",
			})
			if !tc.ok {
				if !errors.Is(err, ErrNotWaiting) {
					t.Fatalf("DecideApproval: %v, want ErrNotWaiting", err)
				}
				st, evs := stored(t, s, paused.RunID)
				if st.Version != paused.Version || st.Status != statusNeedsApproval {
					t.Errorf("a refused decision changed the run; log:\n%s", dump(evs))
				}
				ex.wantCalls(t, 0, 1, 0)
				return
			}
			if err != nil {
				t.Fatalf("DecideApproval: %v", err)
			}
			if got.Status != statusRunning {
				t.Errorf("DecideApproval returned a %s run, want running", runstate.StatusName(got.Status))
			}
			waitRun(t, e, paused.RunID)
			waitEnded(t, s, paused.RunID)
			st, evs := stored(t, s, paused.RunID)
			wantStatus(t, st, evs, statusCompleted, "final_answer")
			wantCount(t, evs, "write_committed", 1)
			ex.wantCalls(t, 0, 1, 1)
		})
	}
}
