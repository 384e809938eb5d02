package engine

// Tests of what follows a driver that stopped on an error.

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
)

// failingAppend fails the appends whose numbers (from 1) are in fail with
// an error such as a store that cannot sync gives.
type failingAppend struct {
	Store
	mu   sync.Mutex
	n    int
	fail map[int]bool
}

func (f *failingAppend) Append(ctx context.Context, runID string, expected uint64, events []*reinv1.Event, opts ...store.AppendOption) (runstate.State, error) {
	f.mu.Lock()
	f.n++
	n := f.n
	f.mu.Unlock()
	if f.fail[n] {
		return runstate.State{}, errors.New("injected: write to the store: commit failed, nothing was stored")
	}
	return f.Store.Append(ctx, runID, expected, events, opts...)
}

// TestStoppedDriverIsResumed: a run whose driver stopped on a store error
// (twice in a row, mid-run) is resumed by the engine after a wait, with no
// restart, and completes with every step once. Without the retry it would
// stay running with nothing driving it.
func TestStoppedDriverIsResumed(t *testing.T) {
	s, _ := openStore(t)
	fa := &failingAppend{Store: s, fail: map[int]bool{2: true, 3: true}}
	e := newEngine(t, Config{Store: fa, RetryWait: 10 * time.Millisecond})
	st := startRun(t, e, testContract(callReply("search", "c1", nil), finalReply("done")))
	waitEnded(t, s, st.RunID)
	st, evs := stored(t, s, st.RunID)
	wantStatus(t, st, evs, statusCompleted, "final_answer")
	wantCount(t, evs, "tool_returned", 1)
}

// TestStoppedDriverOfDamagedRunIsNotRetried is the twin: a run whose
// stored record is damaged (the store says DataLoss) is not retried, as
// waiting mends nothing: its driver stops and the run stays as it is.
func TestStoppedDriverOfDamagedRunIsNotRetried(t *testing.T) {
	s, _ := openStore(t)
	var appends atomic.Int64
	ds := &damagedAppend{Store: s, appends: &appends}
	e := newEngine(t, Config{Store: ds, RetryWait: time.Millisecond})
	st := startRun(t, e, testContract(callReply("search", "c1", nil), finalReply("done")))
	waitRun(t, e, st.RunID)
	e.mu.Lock()
	_, retried := e.retries[st.RunID]
	e.mu.Unlock()
	if retried {
		t.Fatal("a run whose store answered DataLoss is due a retry")
	}
	if got, _ := s.Load(testCtx(t), st.RunID); got.Status != statusRunning {
		t.Fatalf("the run is %s, want it left running", runstate.StatusName(got.Status))
	}
}

// damagedAppend answers every append DataLoss.
type damagedAppend struct {
	Store
	appends *atomic.Int64
}

func (d *damagedAppend) Append(context.Context, string, uint64, []*reinv1.Event, ...store.AppendOption) (runstate.State, error) {
	d.appends.Add(1)
	return runstate.State{}, store.ErrDataLoss
}
