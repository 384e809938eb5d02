package engine

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
)

// loadCounter counts the loads of a store, and refuses as a conflict the
// first conflicts appends of a person's decision (approval_decided), as a
// store does when the run moved since the decision loaded it.
type loadCounter struct {
	Store
	loads     atomic.Int32
	conflicts atomic.Int32
}

func (s *loadCounter) Load(ctx context.Context, runID string) (runstate.State, error) {
	s.loads.Add(1)
	return s.Store.Load(ctx, runID)
}

func (s *loadCounter) Append(ctx context.Context, runID string, expected uint64, evs []*reinv1.Event, opts ...store.AppendOption) (runstate.State, error) {
	if evs[0].GetApprovalDecided() != nil && s.conflicts.Add(-1) >= 0 {
		return runstate.State{}, fmt.Errorf("append to run %s at version %d: %w", runID, expected, store.ErrConflict)
	}
	return s.Store.Append(ctx, runID, expected, evs, opts...)
}

// TestApprovalLoadsTheRunOnce: a person's approval of a run that nothing
// else moves reads the run once, and commits the write on that state; one
// whose decision's commit conflicts (the run moved since) reads the run
// again, checks the verdict on it and approves, once for each conflict.
func TestApprovalLoadsTheRunOnce(t *testing.T) {
	for _, conflicts := range []int32{0, 1, 2} {
		t.Run(fmt.Sprint(conflicts, " conflicts"), func(t *testing.T) {
			bolt, _ := openStore(t)
			s := &loadCounter{Store: bolt}
			e := NewSync(Config{Store: s, Tools: searchTools(t), Clock: newClock(t0, time.Second).Now})
			t.Cleanup(e.Close)
			ctx := testCtx(t)
			st := startRun(t, e, testContract(callReply("send_email", "call-1", nil), finalReply("sent")))
			if err := e.StepWhileRunning(ctx, st.RunID); err != nil {
				t.Fatal(err)
			}
			paused, _ := stored(t, s, st.RunID)
			if paused.Status != statusNeedsApproval {
				t.Fatalf("run is %s, want needs_approval", runstate.StatusName(paused.Status))
			}
			p := paused.Pending.GetProposal()
			s.loads.Store(0)
			s.conflicts.Store(conflicts)
			next, err := e.DecideApproval(ctx, Verdict{RunID: st.RunID, ProposalID: p.GetProposalId(), ProposalHash: p.GetHash(), Approve: true, Principal: "bob"})
			if err != nil {
				t.Fatal(err)
			}
			if next.Status != reinv1.RunStatus_RUN_STATUS_RUNNING || next.WriteInFlight() {
				t.Errorf("after the approval the run is %s (write in flight: %v), want running with the write committed",
					runstate.StatusName(next.Status), next.WriteInFlight())
			}
			if got, want := s.loads.Load(), 1+conflicts; got != want {
				t.Errorf("the approval loaded the run %d times, want %d", got, want)
			}
		})
	}
}
