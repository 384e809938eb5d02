package tools

import (
	"context"
	"errors"
	"slices"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"
)

// TestUnlisted: the names no executor lists, and the listing errors only
// when some name is missing (an executor that is down may provide it).
func TestUnlisted(t *testing.T) {
	t.Parallel()
	fx := NewFixtures(map[string][]FixtureResult{"f.get": {{Output: structpb.NewStringValue("x")}}})
	cases := []struct {
		name     string
		exec     Executor
		ask      []string
		missing  []string
		wantDown bool
	}{
		{"one executor lists it", fx, []string{"f.get"}, nil, false},
		{"one executor lacks it", fx, []string{"f.get", "g.put"}, []string{"g.put"}, false},
		{"no executor at all", nil, []string{"f.get"}, []string{"f.get"}, false},
		{"a Multi lists it past a down executor", Join(downExecutor{}, fx), []string{"f.get"}, nil, false},
		{"a Multi lacks it with one down", Join(downExecutor{}, fx), []string{"g.put"}, []string{"g.put"}, true},
		{"a Multi lacks it, all up", Join(noLookup{}, fx), []string{"n.get", "g.put"}, []string{"g.put"}, false},
		{"a down executor alone", downExecutor{}, []string{"f.get"}, []string{"f.get"}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			missing, err := Unlisted(context.Background(), tc.exec, tc.ask)
			if !slices.Equal(missing, tc.missing) {
				t.Errorf("missing = %v, want %v", missing, tc.missing)
			}
			if got := errors.Is(err, errDown); got != tc.wantDown || (err != nil) != tc.wantDown {
				t.Errorf("err = %v, want the down executor's error: %v", err, tc.wantDown)
			}
		})
	}
}

// countedDown is an executor that is down and counts its listings.
type countedDown struct {
	downExecutor
	lists *int
}

func (c countedDown) List(ctx context.Context) ([]Spec, error) {
	*c.lists++
	return c.downExecutor.List(ctx)
}

// TestUnlistedStopsOnceAllAreFound: an executor after those that list every
// name is not asked (a tool server down costs a start nothing then); the
// twin, a name only it could have, asks it.
func TestUnlistedStopsOnceAllAreFound(t *testing.T) {
	t.Parallel()
	lists := 0
	m := Join(NewFixtures(map[string][]FixtureResult{"f.get": {{Output: structpb.NewStringValue("x")}}}), countedDown{lists: &lists})
	if missing, err := Unlisted(context.Background(), m, []string{"f.get"}); missing != nil || err != nil || lists != 0 {
		t.Fatalf("Unlisted = %v, %v with %d listings of the later executor; want nothing missing, none asked", missing, err, lists)
	}
	if missing, err := Unlisted(context.Background(), m, []string{"g.get"}); len(missing) != 1 || !errors.Is(err, errDown) || lists != 1 {
		t.Fatalf("Unlisted = %v, %v with %d listings; want g.get missing, the later executor asked once", missing, err, lists)
	}
}
