package runstate

import (
	"errors"
	"testing"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"google.golang.org/protobuf/types/known/durationpb"
)

func modelRetried(seq uint64) *reinv1.Event {
	e := envelope(seq)
	e.Payload = &reinv1.Event_ModelRetried{ModelRetried: &reinv1.ModelRetried{Step: 1, Error: "429", Wait: durationpb.New(0)}}
	return e
}

func contextCompacted(seq uint64) *reinv1.Event {
	e := envelope(seq)
	e.Payload = &reinv1.Event_ContextCompacted{ContextCompacted: &reinv1.ContextCompacted{Step: 2, Compacted: 1}}
	return e
}

func costed(ev *reinv1.Event, usd float64) *reinv1.Event {
	ev.GetModelReturned().CostUsd = usd
	return ev
}

// TestCostSumsInLogOrder shows a run's cost is the fold of its calls' costs,
// and survives the snapshot round trip.
func TestCostSumsInLogOrder(t *testing.T) {
	s, err := ApplyAll(State{}, []*reinv1.Event{
		runStarted(1), modelRequested(2), modelRetried(3), costed(modelReturned(4, 10, 5), 0.25),
		contextCompacted(5), modelRequested(6), costed(modelReturned(7, 10, 5), 0.5),
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.CostUSD != 0.75 || s.Steps != 2 {
		t.Fatalf("cost %v over %d steps, want 0.75 over 2", s.CostUSD, s.Steps)
	}
	if back := FromProto(s.Proto(true), nil); back.CostUSD != 0.75 {
		t.Fatalf("cost after the snapshot round trip = %v, want 0.75", back.CostUSD)
	}
}

// TestRetryAndCompactionOrder refuses a retry with no call in flight and a
// compaction while one is.
func TestRetryAndCompactionOrder(t *testing.T) {
	for name, events := range map[string][]*reinv1.Event{
		"retry without a call":     {runStarted(1), modelRetried(2)},
		"compaction during a call": {runStarted(1), modelRequested(2), contextCompacted(3)},
	} {
		t.Run(name, func(t *testing.T) {
			before, err := ApplyAll(State{}, events[:len(events)-1])
			if err != nil {
				t.Fatal(err)
			}
			after, err := Apply(before, events[len(events)-1])
			if !errors.Is(err, ErrIllegalTransition) {
				t.Fatalf("err = %v, want ErrIllegalTransition", err)
			}
			if after.Version != before.Version {
				t.Fatalf("a refused event moved the state to version %d", after.Version)
			}
		})
	}
}
