package engine

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
)

// A driver that takes a run over loads it before it takes its lease; the
// owner it takes the run from is fenced only from the lease on. These
// tests hold the taker's Acquire (pausingStore) while the old owner ends
// or moves the run, and check the taker carries on the run as it is once
// it holds the lease, never its copy from before (docs/design.md §5).

// pausingStore is a Store whose Acquire, before it reaches the store,
// sends the run's ID on acquiring and waits for proceed to close: what a
// test does in between happens between a driver's load and its lease.
type pausingStore struct {
	Store
	acquiring chan string
	proceed   chan struct{}
}

func newPausingStore(s Store) *pausingStore {
	return &pausingStore{Store: s, acquiring: make(chan string, 1), proceed: make(chan struct{})}
}

func (p *pausingStore) Acquire(ctx context.Context, runID, owner string) (uint64, error) {
	if err := p.pause(ctx, runID); err != nil {
		return 0, err
	}
	return p.Store.Acquire(ctx, runID, owner)
}

// pause tells acquiring of runID and waits for proceed.
func (p *pausingStore) pause(ctx context.Context, runID string) error {
	select {
	case p.acquiring <- runID:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-p.proceed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// warnings is a slog.Handler that keeps what is logged at Warn and above.
type warnings struct {
	mu   sync.Mutex
	logs []string
}

func (w *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	line := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		line += fmt.Sprintf(" %s=%v", a.Key, a.Value)
		return true
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	w.logs = append(w.logs, line)
	return nil
}

func (w *warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnings) WithGroup(string) slog.Handler      { return w }

func (w *warnings) none(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.logs) > 0 {
		t.Errorf("the taker logged:\n%s", strings.Join(w.logs, "\n"))
	}
}

// stagedModel answers its first call, once released, with a search; every
// later call waits for its context to end. Each call is told on entered.
type stagedModel struct {
	calls   atomic.Int32
	entered chan int32
	release chan struct{}
}

func (m *stagedModel) Next(ctx context.Context, _ *model.Request) (*model.Reply, error) {
	n := m.calls.Add(1)
	select {
	case m.entered <- n:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if n == 1 {
		select {
		case <-m.release:
			return &model.Reply{Decision: callDecision("search", "c1", nil)}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

func (m *stagedModel) CountTokens(context.Context, *model.Request) (uint64, error) { return 0, nil }

// finalModel answers every call at once with a final answer, and counts
// the calls.
type finalModel struct{ calls atomic.Int32 }

func (m *finalModel) Next(context.Context, *model.Request) (*model.Reply, error) {
	m.calls.Add(1)
	return &model.Reply{Decision: &reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: "taken"}}}}, nil
}

func (m *finalModel) CountTokens(context.Context, *model.Request) (uint64, error) { return 0, nil }

// takeoverPair is a run driven by an engine "old" whose first model call
// is in flight, and an engine "new" over the same store, whose Acquire
// pauses, that takes runs over with a finalModel and logs to warnings.
type takeoverPair struct {
	old, taker *Engine
	s          Store
	paused     *pausingStore
	oldModel   *stagedModel
	newModel   *finalModel
	logged     *warnings
	tools      *countingTools
	runID      string
}

func newTakeoverPair(t *testing.T) *takeoverPair {
	t.Helper()
	s, _ := openStore(t)
	return newTakeoverPairOn(t, s, s, false)
}

// newTakeoverPairOn is a takeoverPair whose old owner is on oldStore and
// whose taker on takerStore (one store, or two replicas of one), both
// Config.Replica when replica.
func newTakeoverPairOn(t *testing.T, oldStore, takerStore Store, replica bool) *takeoverPair {
	t.Helper()
	p := &takeoverPair{
		s:        oldStore,
		paused:   newPausingStore(takerStore),
		oldModel: &stagedModel{entered: make(chan int32, 1), release: make(chan struct{})},
		newModel: &finalModel{},
		logged:   &warnings{},
		tools:    searchTools(t),
	}
	p.old = newEngine(t, Config{Store: oldStore, Owner: "old", Replica: replica, Tools: p.tools,
		Models: func(*reinv1.ModelSpec) (model.Model, error) { return p.oldModel, nil }})
	p.taker = newEngine(t, Config{Store: p.paused, Owner: "new", Replica: replica, Tools: p.tools, Logger: slog.New(p.logged),
		Models: func(*reinv1.ModelSpec) (model.Model, error) { return p.newModel, nil }})
	c := testContract()
	c.Model = &reinv1.ModelSpec{Provider: "staged"}
	p.runID = startRun(t, p.old, c).RunID
	p.entered(t, 1)
	return p
}

// entered waits for the old owner's model call n.
func (p *takeoverPair) entered(t *testing.T, n int32) {
	t.Helper()
	select {
	case got := <-p.oldModel.entered:
		if got != n {
			t.Fatalf("the old owner's model call %d began, want %d", got, n)
		}
	case <-testCtx(t).Done():
		t.Fatalf("the old owner's model call %d never began", n)
	}
}

// takeover has the taker take the run over, and returns once its driver
// loaded the run and waits to take its lease.
func (p *takeoverPair) takeover(t *testing.T) {
	t.Helper()
	ctx := testCtx(t)
	if err := p.taker.Takeover(ctx, p.runID); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.paused.acquiring:
	case <-ctx.Done():
		t.Fatal("the taker never took the run's lease")
	}
}

// TestTakeoverOfARunThatEndedMeanwhile: the old owner ends the run between
// the taker's load and its lease. The taker drops the run quietly: no
// model call, nothing appended, nothing logged, no lease kept.
func TestTakeoverOfARunThatEndedMeanwhile(t *testing.T) {
	p := newTakeoverPair(t)
	ctx := testCtx(t)
	p.takeover(t)
	// The old owner ends the run: its search, then a final answer (a
	// second staged call would wait; the script is short instead).
	close(p.oldModel.release)
	p.entered(t, 2)
	if _, err := p.old.Cancel(ctx, p.runID, "done here", "alice"); err != nil {
		t.Fatal(err)
	}
	ended, _ := stored(t, p.s, p.runID)
	close(p.paused.proceed)
	waitRun(t, p.taker, p.runID)

	p.logged.none(t)
	if n := p.newModel.calls.Load(); n != 0 {
		t.Errorf("the taker made %d model calls for a run that had ended", n)
	}
	after, evs := stored(t, p.s, p.runID)
	if after.Version != ended.Version {
		t.Errorf("the run moved from version %d to %d after it ended; log:\n%s", ended.Version, after.Version, dump(evs))
	}
	wantStatus(t, after, evs, statusCancelled, after.StatusReason)
	if n := p.taker.Driving(); n != 0 {
		t.Errorf("the taker holds %d leases, want none: the run it took had ended", n)
	}
}

// TestTakeoverOfARunThatMovedMeanwhile: the old owner takes a step (a
// model reply, a search) between the taker's load and its lease, then
// stops. The taker carries the run on from where it is now: it re-sends
// only the call in flight then, never the one answered before.
func TestTakeoverOfARunThatMovedMeanwhile(t *testing.T) {
	p := newTakeoverPair(t)
	ctx := testCtx(t)
	p.takeover(t)
	close(p.oldModel.release)
	p.entered(t, 2) // the reply and the search are stored; the next call is in flight
	p.old.Abandon(ctx)
	moved, _ := stored(t, p.s, p.runID)
	close(p.paused.proceed)
	waitRun(t, p.taker, p.runID)

	p.logged.none(t)
	st, evs := stored(t, p.s, p.runID)
	wantStatus(t, st, evs, statusCompleted, st.StatusReason)
	if n := p.newModel.calls.Load(); n != 1 {
		t.Errorf("the taker made %d model calls, want 1 (the call in flight when the old owner stopped)", n)
	}
	p.tools.wantCalls(t, 1, 0, 0)
	wantCount(t, evs, "tool_returned", 1)
	wantCount(t, evs, "run_taken", 1)
	if taken := ofType(evs, "run_taken"); len(taken) == 1 && taken[0].GetSequence() != moved.Version+1 {
		t.Errorf("run_taken at sequence %d, want %d (right after the old owner's last event); log:\n%s", taken[0].GetSequence(), moved.Version+1, dump(evs))
	}
}

// TestTakeoverOfAnAbandonedRun is the twin of the two above: nothing moves
// the run between the taker's load and its lease, and the taker carries
// it on from its load, re-sending the call in flight.
func TestTakeoverOfAnAbandonedRun(t *testing.T) {
	p := newTakeoverPair(t)
	ctx := testCtx(t)
	p.old.Abandon(ctx)
	before, _ := stored(t, p.s, p.runID)
	p.takeover(t)
	close(p.paused.proceed)
	waitRun(t, p.taker, p.runID)

	p.logged.none(t)
	st, evs := stored(t, p.s, p.runID)
	wantStatus(t, st, evs, statusCompleted, st.StatusReason)
	if n := p.newModel.calls.Load(); n != 1 {
		t.Errorf("the taker made %d model calls, want 1", n)
	}
	p.tools.wantCalls(t, 0, 0, 0)
	if taken := ofType(evs, "run_taken"); len(taken) != 1 || taken[0].GetSequence() != before.Version+1 || taken[0].GetRunTaken().GetOwner() != "new" {
		t.Errorf("want one run_taken by %q at sequence %d; log:\n%s", "new", before.Version+1, dump(evs))
	}
}

// acquiringAppends is a Store whose appends that take the run's lease
// (store.WithAcquire), rather than its Acquire, wait as pausingStore's
// Acquire does.
type acquiringAppends struct {
	*pausingStore
}

func (p acquiringAppends) Acquire(ctx context.Context, runID, owner string) (uint64, error) {
	return p.Store.Acquire(ctx, runID, owner)
}

func (p acquiringAppends) Append(ctx context.Context, runID string, expected uint64, evs []*reinv1.Event, opts ...store.AppendOption) (runstate.State, error) {
	var o store.AppendOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.Acquire != "" {
		if err := p.pause(ctx, runID); err != nil {
			return runstate.State{}, err
		}
	}
	return p.Store.Append(ctx, runID, expected, evs, opts...)
}

// parentTakeover is a tree paused on its budget for its child on engine
// "old", the child cancelled there and the root not carried on (old is
// kept from driving it), and a taker "new" over the same store whose
// driver of the root has loaded it and waits to commit the child's end
// with the root's lease.
func parentTakeover(t *testing.T) (old, taker *Engine, s Store, w *ended, logged *warnings, rootID string, proceed chan struct{}) {
	t.Helper()
	old, w, s = delegSetup(t, Config{Owner: "old", Tools: searchTools(t)})
	root := treePaused(t, old, w, s)
	rootID = root.RunID
	t.Cleanup(old.halt(rootID))
	if _, err := old.Cancel(testCtx(t), root.Pending.GetBudget().GetChildRunId(), "not needed", "principal:carol"); err != nil {
		t.Fatal(err)
	}
	if err := old.Wait(testCtx(t), rootID); err != nil {
		t.Fatal(err)
	}
	paused := newPausingStore(s)
	logged = &warnings{}
	taker = newEngine(t, Config{Store: acquiringAppends{paused}, Owner: "new", Tools: searchTools(t), Logger: slog.New(logged), Published: w.published})
	taker.schedule(rootID)
	select {
	case <-paused.acquiring:
	case <-testCtx(t).Done():
		t.Fatal("the taker never committed the child's end")
	}
	return old, taker, s, w, logged, rootID, paused.proceed
}

// TestTakeoverOfAParentThatEndedMeanwhile: a taker carries on a parent
// whose child ended while it paused for it, and the parent's owner ends
// the parent between the taker's load and its commit of the child's end
// (which takes the lease with it). The taker drops the parent quietly.
func TestTakeoverOfAParentThatEndedMeanwhile(t *testing.T) {
	old, taker, s, _, logged, rootID, proceed := parentTakeover(t)
	if _, err := old.Cancel(testCtx(t), rootID, "done here", "principal:carol"); err != nil {
		t.Fatal(err)
	}
	ended, _ := stored(t, s, rootID)
	close(proceed)
	waitRun(t, taker, rootID)

	logged.none(t)
	after, evs := stored(t, s, rootID)
	if after.Version != ended.Version {
		t.Errorf("the parent moved from version %d to %d after it ended; log:\n%s", ended.Version, after.Version, dump(evs))
	}
	wantStatus(t, after, evs, statusCancelled, after.StatusReason)
}

// TestTakeoverOfAParentWhoseChildEnded is the twin: nothing moves the
// parent in between, and the taker carries it on to its end.
func TestTakeoverOfAParentWhoseChildEnded(t *testing.T) {
	_, _, s, w, logged, rootID, proceed := parentTakeover(t)
	close(proceed)
	w.wait(t, rootID)

	logged.none(t)
	st, evs := stored(t, s, rootID)
	wantStatus(t, st, evs, statusCompleted, "final_answer")
	if got := ofType(evs, "delegation_returned"); len(got) != 1 || got[0].GetDelegationReturned().GetStatus() != statusCancelled {
		t.Errorf("delegation_returned %v, want the child's cancel", got)
	}
}
