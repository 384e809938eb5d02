package engine

import (
	"context"
	"sync"
	"testing"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
)

// restReads is the store with every Load of a run counted once an append
// left the run at rest (ended or paused).
type restReads struct {
	Store
	mu    sync.Mutex
	rest  map[string]bool
	reads int
}

func (s *restReads) Append(ctx context.Context, runID string, expected uint64, events []*reinv1.Event, opts ...store.AppendOption) (runstate.State, error) {
	st, err := s.Store.Append(ctx, runID, expected, events, opts...)
	if err == nil && st.Status != reinv1.RunStatus_RUN_STATUS_RUNNING {
		s.mu.Lock()
		s.rest[runID] = true
		s.mu.Unlock()
	}
	return st, err
}

func (s *restReads) Load(ctx context.Context, runID string) (runstate.State, error) {
	s.mu.Lock()
	if s.rest[runID] {
		s.reads++
	}
	s.mu.Unlock()
	return s.Store.Load(ctx, runID)
}

// TestDriverReadsAnEndedRunNoMore: a driver whose run ended reads it no
// more once it stops (an ended run arms no timer). The twin is a run that
// paused: its driver reads it once more, to arm its timers.
func TestDriverReadsAnEndedRunNoMore(t *testing.T) {
	for _, tc := range []struct {
		name     string
		contract *reinv1.TaskContract
		status   reinv1.RunStatus
		reads    int
	}{
		{"ended", testContract(callReply("search", "c1", nil), finalReply("42")), statusCompleted, 0},
		{"paused", testContract(askReply("Which quarter?")), statusNeedsInput, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := openStore(t)
			spy := &restReads{Store: s, rest: map[string]bool{}}
			e := newEngine(t, Config{Store: spy})
			st := startRun(t, e, tc.contract)
			waitRun(t, e, st.RunID)
			e.Close() // its drivers have stopped
			spy.mu.Lock()
			reads := spy.reads
			spy.mu.Unlock()
			got, err := s.Load(testCtx(t), st.RunID)
			if err != nil || got.Status != tc.status {
				t.Fatalf("the run is %s (%v), want %s", runstate.StatusName(got.Status), err, runstate.StatusName(tc.status))
			}
			if reads != tc.reads {
				t.Errorf("the engine read the %s run %d times after it came to rest, want %d", tc.name, reads, tc.reads)
			}
		})
	}
}
