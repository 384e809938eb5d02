package tools

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestFixturesInOrderLastRepeats(t *testing.T) {
	f, err := ParseFixtures([]byte(`{
		"get": [{"output": {"n": 1}}, {"error": "timed out"}, {"output": "last"}],
		"refund": [{"preview": {"amount": 5}, "receipt": {"id": "re_1"}}]
	}`))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if out, err := f.Read(ctx, Call{Tool: "get", Index: 0}); err != nil || out.GetStructValue().GetFields()["n"].GetNumberValue() != 1 {
		t.Fatalf("call 0 = %v, %v", out, err)
	}
	if _, err := f.Read(ctx, Call{Tool: "get", Index: 1}); err == nil || err.Error() != "timed out" {
		t.Fatalf("call 1 error = %v, want the scripted error", err)
	}
	for _, i := range []int{2, 3, 50} {
		if out, err := f.Read(ctx, Call{Tool: "get", Index: i}); err != nil || out.GetStringValue() != "last" {
			t.Fatalf("call %d = %v, %v; want the last result repeated", i, out, err)
		}
	}
	if p, err := f.Propose(ctx, Call{Tool: "refund"}); err != nil || p.GetStructValue().GetFields()["amount"].GetNumberValue() != 5 {
		t.Fatalf("propose = %v, %v", p, err)
	}
	if r, err := f.Commit(ctx, Call{Tool: "refund"}, "op_1"); err != nil || r.GetStructValue().GetFields()["id"].GetStringValue() != "re_1" {
		t.Fatalf("commit = %v, %v", r, err)
	}
	if _, err := f.Read(ctx, Call{Tool: "missing"}); !errors.Is(err, ErrNoTool) || !strings.Contains(err.Error(), "get, refund") {
		t.Fatalf("unknown tool: %v, want ErrNoTool naming the fixtures there are", err)
	}
}

func TestParseFixturesRefuses(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`[]`, "JSON object"},
		{`{"get": []}`, "fixtures.get: the list of results is empty"},
		{`{"get": [{}]}`, "fixtures.get[0]: empty result"},
		{`{"get": [{"outptu": 1}]}`, `fixtures.get[0]: unknown field "outptu"`},
		{`{"get": [{"error": 5}]}`, "fixtures.get[0].error: must be a string"},
	} {
		if _, err := ParseFixtures([]byte(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseFixtures(%s) = %v, want an error containing %q", tc.in, err, tc.want)
		}
	}
}

func TestParseFixturesRefusedAlone(t *testing.T) {
	if _, err := ParseFixtures([]byte(`{"x.put": [{"preview": "p", "refused": "stale", "receipt": "r"}]}`)); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("refused with a receipt: %v, want a refusal naming refused", err)
	}
	f, err := ParseFixtures([]byte(`{"x.put": [{"preview": "p", "refused": "stale"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Commit(context.Background(), Call{Tool: "x.put"}, "op"); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "stale") {
		t.Fatalf("Commit = %v, want ErrRefused with the reason", err)
	}
}
