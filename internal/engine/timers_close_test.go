package engine

// Tests of the engine's timers against its close.

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
)

// gatedLoad holds the Loads made once gated is set: each says so on
// entered, waits for its ctx to end (the engine's Close), says so on cut,
// then waits for release.
type gatedLoad struct {
	Store
	gated             atomic.Bool
	entered, cut      chan struct{}
	release           chan struct{}
	enteredOnce, cut1 sync.Once
}

func (g *gatedLoad) Load(ctx context.Context, runID string) (runstate.State, error) {
	if !g.gated.Load() {
		return g.Store.Load(ctx, runID)
	}
	g.enteredOnce.Do(func() { close(g.entered) })
	<-ctx.Done()
	g.cut1.Do(func() { close(g.cut) })
	<-g.release
	return runstate.State{}, ctx.Err()
}

// TestCloseWaitsForATimer: a paused run's timer that fired and is reading
// the store when the engine closes is waited for by Close, as a driver
// is, so that the store the engine used can be closed once Close returns.
// (Close cancels the timer's ctx; the store read here waits for that, then
// for the test. Without the wait, Close returns at once; the test gives it
// 300ms to, and so never fails a correct engine.)
func TestCloseWaitsForATimer(t *testing.T) {
	s, _ := openStore(t)
	g := &gatedLoad{Store: s, entered: make(chan struct{}), cut: make(chan struct{}), release: make(chan struct{})}
	e := New(Config{Store: g, Tools: searchTools(t), Clock: time.Now})
	c := testContract(askReply("Which quarter?"), finalReply("Q3"))
	c.Budget = &reinv1.Budget{Timeout: durationpb.New(time.Second)}
	paused, _ := runToRest(t, e, s, c)
	if paused.Status != statusNeedsInput {
		t.Fatalf("run is %s, want needs_input", runstate.StatusName(paused.Status))
	}
	g.gated.Store(true)
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the run's deadline timer did not read the store within 10s")
	}
	closed := make(chan struct{})
	go func() { e.Close(); close(closed) }()
	<-g.cut
	select {
	case <-closed:
		t.Fatal("Close returned while the timer's read of the store was in flight")
	case <-time.After(300 * time.Millisecond):
	}
	close(g.release)
	<-closed
}
