package runstate

import (
	"errors"
	"testing"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

func runTaken(seq uint64, owner, traceID string) *reinv1.Event {
	e := envelope(seq)
	e.Payload = &reinv1.Event_RunTaken{RunTaken: &reinv1.RunTaken{Owner: owner, Epoch: 2, TraceId: traceID}}
	return e
}

// TestRunTaken: a running run may record that a server took it, naming the
// run's own trace; the fold keeps the state as it was but the version. Its
// twins: a paused run, an owner left empty and another trace are refused.
func TestRunTaken(t *testing.T) {
	started := runStarted(1)
	started.GetRunStarted().TraceId = "4bf92f3577b34da6a3ce929d0e0e4736"
	st, err := ApplyAll(State{}, []*reinv1.Event{started})
	if err != nil {
		t.Fatal(err)
	}
	next, err := Apply(st, runTaken(2, "replica-b", st.TraceID))
	if err != nil {
		t.Fatalf("a running run taken: %v", err)
	}
	if next.Version != 2 || next.Status != running || next.TraceID != st.TraceID {
		t.Fatalf("after run_taken: version %d, status %v, trace %q", next.Version, next.Status, next.TraceID)
	}
	paused, err := ApplyAll(st, []*reinv1.Event{inputRequested(2), statusChanged(3, running, needsInput)})
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		st State
		ev *reinv1.Event
	}{
		"paused":      {paused, runTaken(4, "replica-b", st.TraceID)},
		"no owner":    {st, runTaken(2, "", st.TraceID)},
		"other trace": {st, runTaken(2, "replica-b", "0af7651916cd43dd8448eb211c80319c")},
	} {
		if _, err := Apply(c.st, c.ev); !errors.Is(err, ErrInvalidEvent) && !errors.Is(err, ErrIllegalTransition) {
			t.Errorf("%s: %v, want it refused", name, err)
		}
	}
}
