package engine

// What one step of the loop allocates, on a store that allocates nothing of
// its own per append but the fold every store makes: the engine's share of
// the garbage a step leaves (the fold, now the store's, whose state Append
// returns; the transcript, the events, the tool call), which the collector
// pays for in CPU on every step of every run.

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/tools"
)

// logStore keeps one run's log in a slice, and its state: an append costs
// the store no allocation but the slice's growth and the fold, which every
// store makes and whose state it returns (the engine folds nothing of its
// own), so what a step allocates is the step's. It checks the expected
// version, as every store does.
type logStore struct {
	events []*reinv1.Event
	st     runstate.State
}

var errLogStore = errors.New("not kept by logStore")

func (s *logStore) Create(_ context.Context, started *reinv1.Event) (runstate.State, bool, error) {
	st, err := runstate.Apply(runstate.State{}, started)
	if err != nil {
		return st, false, err
	}
	s.events, s.st = append(s.events, started), st
	return st, true, nil
}

func (s *logStore) Append(_ context.Context, runID string, expected uint64, evs []*reinv1.Event, _ ...store.AppendOption) (runstate.State, error) {
	if expected != uint64(len(s.events)) {
		return runstate.State{}, fmt.Errorf("run %s at version %d, append expects %d: %w", runID, len(s.events), expected, store.ErrConflict)
	}
	next, err := runstate.ApplyAll(s.st, evs)
	if err != nil {
		return runstate.State{}, fmt.Errorf("append to run %s: %w", runID, err)
	}
	s.events, s.st = append(s.events, evs...), next
	return next, nil
}

func (s *logStore) Acquire(context.Context, string, string) (uint64, error) { return 1, nil }

func (s *logStore) Load(context.Context, string) (runstate.State, error) {
	return runstate.ApplyAll(runstate.State{}, s.events)
}

func (s *logStore) Events(_ context.Context, _ string, after uint64, limit int) ([]*reinv1.Event, error) {
	evs := s.events[min(int(after), len(s.events)):]
	return evs[:min(limit, len(evs))], nil
}

func (s *logStore) List(context.Context, store.Filter) (store.Page, error) {
	return store.Page{}, errLogStore
}

func (s *logStore) Import(context.Context, []*reinv1.Event, map[string][]byte) (runstate.State, error) {
	return runstate.State{}, errLogStore
}

func (s *logStore) Blobs(context.Context, string, []string) (map[string][]byte, error) {
	return nil, errLogStore
}

// readSteps is a contract whose model reads a file calls times, then
// answers, under a context limit that compacts every few dozen steps.
func readSteps(calls int) *reinv1.TaskContract {
	script := make([]*reinv1.ScriptedReply, 0, calls+1)
	for i := range calls {
		args := &structpb.Struct{Fields: map[string]*structpb.Value{"q": structpb.NewStringValue(fmt.Sprintf("src/file_%d.go", i))}}
		script = append(script, callReply("search", fmt.Sprint("call_", i), args))
	}
	c := testContract(append(script, finalReply("done"))...)
	c.Tools = []*reinv1.ToolGrant{{Name: "search", Tier: tierRead}}
	c.Budget = &reinv1.Budget{MaxSteps: uint32(calls) + 2, MaxContextChars: 12_000}
	return c
}

// stepMallocs drives a run of calls read steps to its end on a logStore
// and returns the heap allocations the whole run made, and its log.
func stepMallocs(t *testing.T, calls int) (uint64, []*reinv1.Event) {
	t.Helper()
	s := &logStore{}
	fx := tools.NewFixtures(map[string][]tools.FixtureResult{
		"search": {{Output: structpb.NewStringValue("package pkg\n\nfunc F(x int) int {\n\treturn x * 2\n}\n" + strings.Repeat("// a padding line\n", 6))}},
	})
	e := NewSync(Config{Store: s, Tools: fx, Clock: newClock(t0, time.Millisecond).Now})
	t.Cleanup(e.Close)
	ctx := testCtx(t)
	st := startRun(t, e, readSteps(calls))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := e.StepWhileRunning(ctx, st.RunID); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	return after.Mallocs - before.Mallocs, s.events
}

// TestStepAllocations bounds what one read step allocates (the difference
// between a long run and a short one, so what a run costs once is left
// out), compactions included. The bound is a budget the step loop must
// stay within, not a measurement of time.
func TestStepAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes what allocates")
	}
	const short, long = 50, 450
	m1, evs1 := stepMallocs(t, short)
	m2, evs2 := stepMallocs(t, long)
	for _, evs := range [][]*reinv1.Event{evs1, evs2} {
		if last := evs[len(evs)-1].GetStatusChanged(); last.GetTo() != statusCompleted {
			t.Fatalf("the run ended with %v, want completed:\n%s", evs[len(evs)-1], dump(evs[len(evs)-3:]))
		}
	}
	if n := len(ofType(evs2, "context_compacted")); n < 10 {
		t.Fatalf("%d compactions in %d steps, want the steps to compact often", n, long)
	}
	perStep := float64(m2-m1) / float64(long-short)
	t.Logf("%.1f allocations a step", perStep)
	if perStep > maxStepAllocs {
		t.Errorf("a read step allocates %.1f objects, over its budget of %d: find what the step does that it need not (a profile: go test -run TestStepAllocations -memprofile)", perStep, maxStepAllocs)
	}
}

// maxStepAllocs is the budget of TestStepAllocations.
const maxStepAllocs = 80

// BenchmarkEngineSteps is the engine's own cost of a read step: runs of
// 500 read steps driven to their end on a logStore, so no store's work is
// in the figure (compare with cmd/rein-bench/bench's BenchmarkStepsFigure, which
// is the engine on a bbolt store).
func BenchmarkEngineSteps(b *testing.B) {
	const calls = 500
	c := readSteps(calls)
	fx := tools.NewFixtures(map[string][]tools.FixtureResult{
		"search": {{Output: structpb.NewStringValue("package pkg\n\nfunc F(x int) int {\n\treturn x * 2\n}\n" + strings.Repeat("// a padding line\n", 6))}},
	})
	steps := 0
	for i := 0; b.Loop(); i++ {
		s := &logStore{}
		e := NewSync(Config{Store: s, Tools: fx, Clock: newClock(t0, time.Millisecond).Now})
		st, _, err := e.Start(context.Background(), StartRequest{RequestID: fmt.Sprint("req-", i), Contract: c})
		if err != nil {
			b.Fatal(err)
		}
		if err := e.StepWhileRunning(context.Background(), st.RunID); err != nil {
			b.Fatal(err)
		}
		e.Close()
		steps += calls + 1
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(steps), "ns/step")
}
