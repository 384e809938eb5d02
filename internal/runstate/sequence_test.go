package runstate

// Tests of folding events in order: Apply takes only the next sequence, and
// ApplyAll folds a list of events all or nothing.

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"google.golang.org/protobuf/proto"
)

func TestApplySequence(t *testing.T) {
	mid := mustApply(t, stateAt(t, running), modelRequested(2), modelReturned(3, 1, 1))
	tests := []struct {
		name string
		s    State
		ev   *reinv1.Event
	}{
		{"first_zero", State{}, runStarted(0)},
		{"first_two", State{}, runStarted(2)},
		{"zero", mid, modelRequested(0)},
		{"repeat", mid, modelRequested(mid.Version)},
		{"earlier", mid, modelRequested(1)},
		{"gap", mid, modelRequested(mid.Version + 2)},
		{"far_ahead", mid, modelRequested(1 << 40)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Apply(tc.s, tc.ev)
			if !errors.Is(err, ErrSequence) {
				t.Fatalf("err = %v, want ErrSequence", err)
			}
			assertUnchanged(t, got, tc.s)
		})
	}
	// The twin: version + 1 is accepted.
	if got := mustApply(t, mid, modelRequested(mid.Version+1)); got.Version != mid.Version+1 {
		t.Errorf("version = %d, want %d", got.Version, mid.Version+1)
	}
}

func TestApplyAll(t *testing.T) {
	good := []*reinv1.Event{
		runStarted(1), modelRequested(2), modelReturned(3, 10, 2), toolRequested(4),
		approvalRequested(5, "p-1"), statusChanged(6, running, needsApproval),
	}
	t.Run("ok", func(t *testing.T) {
		got, err := ApplyAll(State{}, good)
		if err != nil {
			t.Fatalf("ApplyAll: %v", err)
		}
		want := mustApply(t, State{}, good...)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("ApplyAll = %+v, want %+v", got, want)
		}
		if got.Version != 6 || got.Status != needsApproval {
			t.Errorf("version %d status %s, want 6 needs_approval", got.Version, StatusName(got.Status))
		}
	})

	bad := map[string]*reinv1.Event{
		"sequence": modelRequested(9),
		"illegal":  statusChanged(0, running, expired),
		"invalid":  envelope(0),
	}
	for i := range good {
		for kind, ev := range bad {
			t.Run(fmt.Sprintf("fail_at_%d_%s", i, kind), func(t *testing.T) {
				events := append([]*reinv1.Event(nil), good...)
				broken := proto.Clone(ev).(*reinv1.Event)
				if kind != "sequence" {
					broken.Sequence = uint64(i + 1)
				}
				events[i] = broken
				got, err := ApplyAll(State{}, events)
				if err == nil {
					t.Fatal("ApplyAll: err = nil, want an error")
				}
				assertUnchanged(t, got, State{})

				// From a non-zero start too.
				from := mustApply(t, State{}, good[:i]...)
				got, err = ApplyAll(from, events[i:])
				if err == nil {
					t.Fatal("ApplyAll from a run: err = nil, want an error")
				}
				assertUnchanged(t, got, from)
			})
		}
	}
	t.Run("fail_at_last_of_many", func(t *testing.T) {
		s := stateAt(t, running)
		events := []*reinv1.Event{modelRequested(2), modelReturned(3, 5, 5), modelRequested(4), modelRequested(5)}
		got, err := ApplyAll(s, events)
		if !errors.Is(err, ErrIllegalTransition) {
			t.Fatalf("err = %v, want ErrIllegalTransition", err)
		}
		assertUnchanged(t, got, s)
	})
}

// Rejected recognises each error the fold rejects an event with, wrapped as
// a store wraps it, and nothing else.
func TestRejected(t *testing.T) {
	st := stateAt(t, running)
	_, gap := ApplyAll(st, []*reinv1.Event{modelRequested(st.Version + 2)})
	for _, err := range []error{ErrSequence, ErrIllegalTransition, ErrTerminal, ErrInvalidEvent,
		fmt.Errorf("append to run r: %w", gap)} {
		if !Rejected(err) {
			t.Errorf("Rejected(%v) = false, want true", err)
		}
	}
	// The twin: errors of another kind are not the fold's.
	for _, err := range []error{nil, errors.New("version conflict"), fmt.Errorf("run r: %w", errors.New("store closed"))} {
		if Rejected(err) {
			t.Errorf("Rejected(%v) = true, want false", err)
		}
	}
}
