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

// TestWriteRefusedSettlesTheWrite: write_refused ends a dispatched write
// (nothing in flight after it); without a write in flight it is refused.
func TestWriteRefusedSettlesTheWrite(t *testing.T) {
	refused := func(seq uint64, op string) *reinv1.Event {
		e := envelope(seq)
		e.Payload = &reinv1.Event_WriteRefused{WriteRefused: &reinv1.WriteRefused{ProposalId: "p-1", OperationId: op, Reason: "stale"}}
		return e
	}
	paused, err := ApplyAll(State{}, []*reinv1.Event{runStarted(1), modelRequested(2), modelReturned(3, 1, 1), toolRequested(4), approvalRequested(5, "p-1"),
		statusChanged(6, running, needsApproval)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(paused, refused(7, "op_p-1")); !errors.Is(err, ErrIllegalTransition) {
		t.Fatalf("write_refused with no write in flight: %v, want ErrIllegalTransition", err)
	}
	decided := envelope(7)
	decided.Payload = &reinv1.Event_ApprovalDecided{ApprovalDecided: &reinv1.ApprovalDecided{ProposalId: "p-1", Approved: true}}
	dispatched := envelope(8)
	dispatched.Payload = &reinv1.Event_WriteDispatched{WriteDispatched: &reinv1.WriteDispatched{ProposalId: "p-1", OperationId: "op_p-1"}}
	s, err := ApplyAll(paused, []*reinv1.Event{decided, dispatched, refused(9, "op_p-1"), statusChanged(10, needsApproval, running)})
	if err != nil {
		t.Fatal(err)
	}
	if s.ApprovedWrite != nil || s.WriteOperationID != "" || s.Status != running {
		t.Fatalf("after write_refused: %v, %q, %s; want nothing in flight and running", s.ApprovedWrite, s.WriteOperationID, StatusName(s.Status))
	}
}
