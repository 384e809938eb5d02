package tools

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"
)

func TestJoinDispatchesByName(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := NewFixtures(map[string][]FixtureResult{"a.get": {{Output: structpb.NewStringValue("from a")}}})
	b := NewFixtures(map[string][]FixtureResult{
		"a.get": {{Output: structpb.NewStringValue("shadowed")}},
		"b.put": {{Preview: structpb.NewStringValue("preview b"), Receipt: structpb.NewStringValue("receipt b")}},
	})
	m := Join(nil, a, b)
	specs, err := m.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 2 || specs[0].Name != "a.get" || specs[1].Name != "b.put" {
		t.Errorf("List = %+v, want a.get then b.put once each", specs)
	}
	out, err := m.Read(ctx, Call{Tool: "a.get"})
	if err != nil || out.GetStringValue() != "from a" {
		t.Errorf("Read a.get = %v, %v; want the first executor's output", out, err)
	}
	p, err := m.Propose(ctx, Call{Tool: "b.put"})
	if err != nil || p.GetStringValue() != "preview b" {
		t.Errorf("Propose b.put = %v, %v", p, err)
	}
	r, err := m.Commit(ctx, Call{Tool: "b.put"}, "op1")
	if err != nil || r.GetStringValue() != "receipt b" {
		t.Errorf("Commit b.put = %v, %v", r, err)
	}
	got, applied, err := m.(Looker).Lookup(ctx, Call{Tool: "b.put"}, "op1")
	if err != nil || !applied || got.GetStringValue() != "receipt b" {
		t.Errorf("Lookup = %v, %v, %v; want the receipt, applied", got, applied, err)
	}
}

func TestJoinUnknownTool(t *testing.T) {
	t.Parallel()
	a := NewFixtures(map[string][]FixtureResult{"a.get": {{Output: structpb.NewStringValue("x")}}})
	b := NewFixtures(map[string][]FixtureResult{"b.get": {{Output: structpb.NewStringValue("y")}}})
	m := Join(a, b)
	if _, err := m.Read(context.Background(), Call{Tool: "c.get"}); !errors.Is(err, ErrNoTool) {
		t.Errorf("Read of an unknown tool: err = %v, want ErrNoTool", err)
	}
	if Join(nil, nil) != nil {
		t.Error("Join of nothing is not nil")
	}
	if Join(a) != Executor(a) {
		t.Error("Join of one executor is not that executor")
	}
}

// downExecutor is a tool server that is down: List fails.
type downExecutor struct{ noLookup }

var errDown = errors.New("tool server billing is unreachable")

func (downExecutor) List(context.Context) ([]Spec, error) { return nil, errDown }

// noLookup is an executor with one read tool, "n.get", and no lookup.
type noLookup struct{}

func (noLookup) List(context.Context) ([]Spec, error) { return []Spec{{Name: "n.get"}}, nil }
func (noLookup) Read(context.Context, Call) (*structpb.Value, error) {
	return structpb.NewStringValue("n"), nil
}
func (noLookup) Propose(context.Context, Call) (*structpb.Value, error) {
	return structpb.NewStringValue("p"), nil
}
func (noLookup) Commit(context.Context, Call, string) (*structpb.Value, error) {
	return structpb.NewStringValue("r"), nil
}

// TestJoinSurvivesADownExecutor: one executor whose List fails does not
// take the others' tools down; a tool nobody has names the failure too.
func TestJoinSurvivesADownExecutor(t *testing.T) {
	t.Parallel()
	m := Join(downExecutor{}, noLookup{})
	if out, err := m.Read(context.Background(), Call{Tool: "n.get"}); err != nil || out.GetStringValue() != "n" {
		t.Fatalf("Read n.get past a down executor = %v, %v", out, err)
	}
	_, err := m.Read(context.Background(), Call{Tool: "billing.get"})
	if !errors.Is(err, ErrNoTool) || !errors.Is(err, errDown) {
		t.Fatalf("Read of a tool nobody lists: %v, want ErrNoTool naming the down executor", err)
	}
}

// TestJoinLookupWithoutLooker: a Multi is always a Looker, but says
// ErrNoLookup for a tool whose executor has none.
func TestJoinLookupWithoutLooker(t *testing.T) {
	t.Parallel()
	m := Join(noLookup{}, NewFixtures(map[string][]FixtureResult{"f.put": {{Receipt: structpb.NewStringValue("r")}}}))
	if _, _, err := m.(Looker).Lookup(context.Background(), Call{Tool: "n.get"}, "op"); !errors.Is(err, ErrNoLookup) {
		t.Fatalf("Lookup through an executor with no lookup: %v, want ErrNoLookup", err)
	}
	if _, _, err := m.(Looker).Lookup(context.Background(), Call{Tool: "f.put"}, "op"); err != nil {
		t.Fatalf("Lookup through fixtures: %v", err)
	}
}

// flaky is a write executor whose List fails while down.
type flaky struct {
	noLookup
	down bool
}

func (f *flaky) List(context.Context) ([]Spec, error) {
	if f.down {
		return nil, errDown
	}
	return []Spec{{Name: "other.put"}}, nil
}

// TestJoinWriteNeverFallsThrough: a write is not sent to a later executor
// that lists the same name while an earlier one that may have it is down;
// once the down one was seen without the tool, the write goes through.
func TestJoinWriteNeverFallsThrough(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	down := &flaky{down: true}
	m := Join(down, noLookup{})
	if _, err := m.Commit(ctx, Call{Tool: "n.get"}, "op"); !errors.Is(err, errDown) {
		t.Fatalf("a write past an executor never listed: %v, want its listing error", err)
	}
	down.down = false
	if _, err := m.List(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Read(ctx, Call{Tool: "n.get"}); err != nil {
		t.Fatal(err)
	}
	down.down = true
	if r, err := m.Commit(ctx, Call{Tool: "n.get"}, "op"); err != nil || r.GetStringValue() != "r" {
		t.Fatalf("a write past an executor last seen without the tool: %v, %v", r, err)
	}
}
