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
