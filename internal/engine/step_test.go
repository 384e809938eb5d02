package engine

// Tests of a step's commits and clock (docs/design.md §3): a step's events reach the
// store in at most two appends, each durable before the model or the tool
// sees what it records, and every event of a step carries the step's one
// clock reading. opLog and countingStore record the order of appends and
// calls.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/tools"
)

// opLog records, in order, the appends that reached the store and the calls
// that reached the model and the tools.
type opLog struct {
	mu  sync.Mutex
	ops []string
}

func (l *opLog) add(op string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ops = append(l.ops, op)
}

func (l *opLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.ops...)
}

// countingStore logs each durable append: "append " and its payloads.
type countingStore struct {
	Store
	log *opLog
}

func (s *countingStore) Append(ctx context.Context, runID string, expected uint64, evs []*reinv1.Event, opts ...store.AppendOption) (runstate.State, error) {
	st, err := s.Store.Append(ctx, runID, expected, evs, opts...)
	if err != nil {
		return st, err
	}
	s.log.add("append " + strings.Join(payloads(evs), ","))
	return st, nil
}

// A step's events reach the store in at most two appends, the first holding
// model_requested before the model is called, the second model_returned
// before the tool runs; a read's result shares the next step's first append.
func TestStepCommits(t *testing.T) {
	s, _ := openStore(t)
	log := &opLog{}
	ctx := testCtx(t)
	// The wrappers also check the store itself: the call must already be
	// durable when the model or the tool sees it.
	var durable []string
	var dmu sync.Mutex
	fail := func(format string, args ...any) {
		dmu.Lock()
		defer dmu.Unlock()
		durable = append(durable, fmt.Sprintf(format, args...))
	}
	spy := &modelSpy{before: func(_ context.Context, req *model.Request) {
		log.add("model.next")
		if st, err := s.Load(ctx, req.RunID); err != nil || !st.ModelInFlight || st.Steps != req.Step {
			fail("call %d started before its model_requested was stored (in flight %v, steps %d, %v)", req.Step, st.ModelInFlight, st.Steps, err)
		}
	}}
	ex := searchTools(t)
	ex.beforeRead = func(_ context.Context, c tools.Call) {
		log.add("tool.read")
		evs, err := s.Events(ctx, c.RunID, 0, 1<<20)
		if err != nil || len(evs) < 2 || evs[len(evs)-1].GetToolRequested().GetCallId() != c.CallID ||
			evs[len(evs)-2].GetModelReturned() == nil {
			fail("read %s ran before its model_returned and tool_requested were stored (%v)", c.CallID, err)
		}
	}
	var nmu sync.Mutex
	var notified []uint64
	published := func(_ runstate.State, evs []*reinv1.Event) {
		nmu.Lock()
		defer nmu.Unlock()
		notified = append(notified, evs[len(evs)-1].GetSequence())
	}
	e := newEngine(t, Config{Store: &countingStore{Store: s, log: log}, Tools: ex, Models: spy.models(nil), Published: published})
	st, evs := runToRest(t, e, s, testContract(
		callReply("search", "call-1", nil),
		callReply("search", "call-2", nil),
		finalReply("done"),
	))
	wantStatus(t, st, evs, statusCompleted, "final_answer")

	want := []string{
		"append model_requested",
		"model.next",
		"append model_returned,tool_requested",
		"tool.read",
		"append tool_returned,model_requested",
		"model.next",
		"append model_returned,tool_requested",
		"tool.read",
		"append tool_returned,model_requested",
		"model.next",
		"append model_returned,status_changed",
	}
	got := log.all()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("appends and calls:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	// The rule itself, whatever the exact grouping: a step (from one
	// model_requested to the next) makes at most two appends.
	perStep := map[int]int{}
	step := 0
	for _, op := range got {
		if !strings.HasPrefix(op, "append ") {
			continue
		}
		if strings.Contains(op, "model_requested") {
			step++
		}
		perStep[step]++
	}
	for s, n := range perStep {
		if n > 2 {
			t.Errorf("step %d made %d appends, want at most 2", s, n)
		}
	}
	// Notify hears of the create and of every append, in version order,
	// ending at the run's version.
	nmu.Lock()
	defer nmu.Unlock()
	if len(notified) != 1+len(perStepAppends(got)) || notified[len(notified)-1] != st.Version {
		t.Errorf("Published heard versions %v; want one per durable write, ending at %d", notified, st.Version)
	}
	for i := 1; i < len(notified); i++ {
		if notified[i] <= notified[i-1] {
			t.Errorf("Published heard version %d after %d", notified[i], notified[i-1])
		}
	}
	for _, msg := range durable {
		t.Error(msg)
	}
}

// Every event of a step carries the step's one clock reading.
func TestStepEventsShareClockReading(t *testing.T) {
	clock := newClock(t0, time.Second)
	e, s := setup(t, Config{Tools: searchTools(t), Clock: clock.Now})
	st, evs := runToRest(t, e, s, testContract(
		callReply("search", "call-1", nil),
		callReply("search", "call-2", nil),
		finalReply("done"),
	))
	wantStatus(t, st, evs, statusCompleted, "final_answer")

	// Start reads the clock at t0; step n reads it at t0 + n seconds. An
	// event belongs to the step of the last model_requested at or before it
	// in sequence: a read's result shares the next step's first append but
	// comes ahead of its model_requested, and keeps its own step's reading.
	step := 0
	for _, ev := range evs {
		if ev.GetModelRequested() != nil {
			step++
		}
		want := t0.Add(time.Duration(step) * time.Second)
		if got := ev.GetRecordedAt().AsTime(); !got.Equal(want) {
			t.Errorf("event %d (%s, step %d) recorded at %v, want the step's reading %v",
				ev.GetSequence(), runstate.PayloadName(ev), step, got, want)
		}
	}
	if n := clock.Reads(); n != 4 {
		t.Errorf("the clock was read %d times, want 4: once at start and once per step", n)
	}
	if !st.UpdatedAt.Equal(t0.Add(3*time.Second)) || !st.CreatedAt.Equal(t0) {
		t.Errorf("created %v, updated %v; want %v, %v", st.CreatedAt, st.UpdatedAt, t0, t0.Add(3*time.Second))
	}
}

func perStepAppends(ops []string) []string {
	var out []string
	for _, op := range ops {
		if strings.HasPrefix(op, "append ") {
			out = append(out, op)
		}
	}
	return out
}
