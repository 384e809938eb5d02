package engine

// Tests of the input-schema check (issue 13 §1): a call whose arguments do
// not match its tool's schema is refused before the tool runs or a write
// is proposed, and a schema that does not compile is refused at start.

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/taskcontract"
	"github.com/reinhq/rein/internal/tools"
)

// listedTools is countingTools whose List gives specs in place of the
// inner tools' own of the same name; with err, every listing after the
// first (the start's) fails: a tool server that went down once the run
// started.
type listedTools struct {
	*countingTools
	specs []tools.Spec
	err   error
	lists atomic.Int32
}

func (l *listedTools) List(ctx context.Context) ([]tools.Spec, error) {
	if l.lists.Add(1) > 1 && l.err != nil {
		return nil, l.err
	}
	inner, err := l.countingTools.List(ctx)
	if err != nil {
		return nil, err
	}
	out := append([]tools.Spec(nil), l.specs...)
	for _, s := range inner {
		if !slices.ContainsFunc(l.specs, func(o tools.Spec) bool { return o.Name == s.Name }) {
			out = append(out, s)
		}
	}
	return out, nil
}

// invoiceSchema is the schema: a required string invoice_id, and
// nothing else.
var invoiceSchema = map[string]any{
	"type":                 "object",
	"properties":           map[string]any{"invoice_id": map[string]any{"type": "string"}},
	"required":             []any{"invoice_id"},
	"additionalProperties": false,
}

func TestToolCallCheckedAgainstSchema(t *testing.T) {
	emailSchema := map[string]any{
		"type":       "object",
		"properties": map[string]any{"to": map[string]any{"type": "string"}},
		"required":   []any{"to"},
	}
	draft7 := map[string]any{
		"$schema":    "http://json-schema.org/draft-07/schema#",
		"type":       "object",
		"properties": map[string]any{"page": map[string]any{"type": "integer", "minimum": 1}},
	}
	nested := map[string]any{
		"type": "object",
		"properties": map[string]any{"filter": map[string]any{
			"type": "object", "properties": map[string]any{"year": map[string]any{"type": "integer"}},
		}},
	}
	for _, tc := range []struct {
		name    string
		grant   map[string]any // the grant's input_schema for tool
		listed  map[string]any // the schema the executor lists for tool
		listErr error
		tool    string
		args    map[string]any
		// want is the refusal's words, or nil when the call goes through.
		want            []string
		reads, proposes int32
		status          reinv1.RunStatus
		reason          string
	}{
		{name: "the issue's case is refused", grant: invoiceSchema, tool: "search",
			args: map[string]any{"invoice": 42, "bogus": true},
			want: []string{`tool "search"`, "its input_schema in the contract", `field "invoice_id" is required (expected a string) and missing`,
				`field(s) "bogus", "invoice" are not allowed (the fields allowed are: "invoice_id")`, `given: {"bogus":true,"invoice":42}`},
			status: statusCompleted, reason: "final_answer"},
		{name: "its twin, valid arguments, runs", grant: invoiceSchema, tool: "search",
			args: map[string]any{"invoice_id": "INV-42"}, reads: 1, status: statusCompleted, reason: "final_answer"},
		{name: "a field of the wrong type", grant: invoiceSchema, tool: "search",
			args:   map[string]any{"invoice_id": 42},
			want:   []string{`field "invoice_id" (expected a string), given 42 (an integer)`},
			status: statusCompleted, reason: "final_answer"},
		{name: "draft-07 keywords are checked", grant: draft7, tool: "search",
			args: map[string]any{"page": 0}, want: []string{`at schema /properties/page: minimum:`, "is less than 1"},
			status: statusCompleted, reason: "final_answer"},
		{name: "draft-07 twin", grant: draft7, tool: "search",
			args: map[string]any{"page": 2}, reads: 1, status: statusCompleted, reason: "final_answer"},
		{name: "a nested field", grant: nested, tool: "search",
			args: map[string]any{"filter": map[string]any{"year": "last"}}, want: []string{`has type "string", want "integer"`},
			status: statusCompleted, reason: "final_answer"},
		{name: "a write with bad arguments is never proposed", grant: emailSchema, tool: "send_email",
			args: map[string]any{"recipient": "bob@example.com"}, want: []string{`field "to" is required (expected a string)`},
			status: statusCompleted, reason: "final_answer"},
		{name: "its twin, a write with good arguments, is proposed", grant: emailSchema, tool: "send_email",
			args: map[string]any{"to": "bob@example.com"}, proposes: 1, status: statusNeedsApproval, reason: "write_proposed"},
		{name: "a listed schema holds when the grant has none", listed: invoiceSchema, tool: "search",
			args: map[string]any{"invoice": 42}, want: []string{"the input schema its tool lists", `field "invoice_id" is required`},
			status: statusCompleted, reason: "final_answer"},
		{name: "its twin, listed schema and valid arguments", listed: invoiceSchema, tool: "search",
			args: map[string]any{"invoice_id": "INV-42"}, reads: 1, status: statusCompleted, reason: "final_answer"},
		{name: "the grant's schema wins over the listed one", grant: map[string]any{"type": "object"}, listed: invoiceSchema, tool: "search",
			args: map[string]any{"invoice": 42}, reads: 1, status: statusCompleted, reason: "final_answer"},
		{name: "a List error means no schema", listErr: errors.New("server down"), tool: "search",
			args: map[string]any{"invoice": 42}, reads: 1, status: statusCompleted, reason: "final_answer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ex := &listedTools{countingTools: searchTools(t), err: tc.listErr}
			if tc.listed != nil {
				ex.specs = []tools.Spec{{Name: tc.tool, InputSchema: mustStruct(t, tc.listed)}}
			}
			var spy modelSpy
			e, s := setup(t, Config{Tools: ex, Models: spy.models(nil)})
			c := testContract(callReply(tc.tool, "c1", mustStruct(t, tc.args)), finalReply("done"))
			for _, g := range c.Tools {
				if g.Name == tc.tool && tc.grant != nil {
					g.InputSchema = mustStruct(t, tc.grant)
				}
			}
			st, evs := runToRest(t, e, s, c)

			wantStatus(t, st, evs, tc.status, tc.reason)
			ex.wantCalls(t, tc.reads, tc.proposes, 0)
			// The model is shown the schema the calls are held to: the
			// grant's own, else the one its tool lists.
			if reqs := spy.requests(); len(reqs) > 0 {
				shown := map[string]any(nil)
				for _, g := range reqs[0].Tools {
					if g.GetName() == tc.tool {
						shown = g.GetInputSchema().AsMap()
					}
				}
				want := tc.grant
				if want == nil && tc.listErr == nil {
					want = tc.listed
				}
				if want != nil && !reflect.DeepEqual(shown, mustStruct(t, want).AsMap()) {
					t.Errorf("the model was shown schema %v for %s, want %v", shown, tc.tool, want)
				}
			}
			refused := ofType(evs, "tool_refused")
			if tc.want == nil {
				if len(refused) != 0 {
					t.Fatalf("the call was refused: %v", refused[0])
				}
				return
			}
			wantCount(t, evs, "tool_requested", 0)
			if len(refused) != 1 {
				t.Fatalf("%d tool_refused, want 1; log:\n%s", len(refused), dump(evs))
			}
			why := refused[0].GetToolRefused().GetReason()
			for _, w := range tc.want {
				if !strings.Contains(why, w) {
					t.Errorf("reason %q does not say %q", why, w)
				}
			}
			// The refusal costs the step, and the model reads it.
			if st.Steps != 2 || st.ToolCalls != 0 {
				t.Errorf("steps %d, tool calls %d; want 2 steps, 0 tool calls", st.Steps, st.ToolCalls)
			}
			reqs := spy.requests()
			if o := lastObservation(t, reqs[len(reqs)-1]); o.Text != why && !strings.Contains(o.Text, why) {
				t.Errorf("the model saw %q, want the refusal %q", o.Text, why)
			}
		})
	}
}

// The grants a driver shows the model, a listed schema filled in, are made
// once: every call of a driver is shown the same grants, not a copy made
// for each step. A driver that starts again (the run resumed after a
// pause) shows the listed schema too.
func TestShownToolsMadeOncePerDriver(t *testing.T) {
	ex := &listedTools{countingTools: searchTools(t), specs: []tools.Spec{{Name: "search", InputSchema: mustStruct(t, invoiceSchema)}}}
	var spy modelSpy
	e, s := setup(t, Config{Tools: ex, Models: spy.models(nil)})
	args := mustStruct(t, map[string]any{"invoice_id": "INV-42"})
	c := testContract(callReply("search", "c1", args), callReply("search", "c2", args), askReply("which one?"), finalReply("done"))
	st, evs := runToRest(t, e, s, c)
	wantStatus(t, st, evs, statusNeedsInput, "question")
	if _, err := e.ProvideInput(testCtx(t), st.RunID, "the first", "bob"); err != nil {
		t.Fatal(err)
	}
	waitRun(t, e, st.RunID)

	reqs := spy.requests()
	if len(reqs) != 4 {
		t.Fatalf("%d model calls, want 4", len(reqs))
	}
	shown := func(req model.Request) *reinv1.ToolGrant {
		for _, g := range req.Tools {
			if g.GetName() == "search" {
				return g
			}
		}
		t.Fatalf("call %d is not shown the search tool", req.Step)
		return nil
	}
	for _, req := range reqs {
		if got := shown(req).GetInputSchema().AsMap(); !reflect.DeepEqual(got, mustStruct(t, invoiceSchema).AsMap()) {
			t.Fatalf("call %d is shown schema %v, want the listed one", req.Step, got)
		}
	}
	if shown(reqs[0]) != shown(reqs[1]) || shown(reqs[1]) != shown(reqs[2]) {
		t.Error("the calls of one driver are shown grants copied for each step")
	}
}

// A contract whose input schema does not compile is refused at start,
// naming the field; nothing is stored.
func TestSchemaThatDoesNotCompileIsRefusedAtStart(t *testing.T) {
	for _, tc := range []struct {
		name   string
		schema map[string]any
		want   string
	}{
		{"a type that is no JSON type", map[string]any{"type": "strin"}, `type "strin" is not a JSON type`},
		{"a nested type that is no JSON type", map[string]any{"properties": map[string]any{"a": map[string]any{"type": "text"}}}, `"text"`},
		{"a bad pattern", map[string]any{"properties": map[string]any{"a": map[string]any{"pattern": "("}}}, "missing closing )"},
		{"a remote reference", map[string]any{"$ref": "https://example.com/invoice.json"}, "cannot resolve remote schemas"},
		{"a draft not supported", map[string]any{"$schema": "http://json-schema.org/draft-04/schema#"}, "not supported"},
		{"required that is not a list", map[string]any{"required": "invoice_id"}, "required"},
		{"a type that is not a string", map[string]any{"type": 5}, "type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ex := searchTools(t)
			e, s := setup(t, Config{Tools: ex})
			c := testContract(finalReply("done"))
			c.Tools[1].InputSchema = mustStruct(t, tc.schema)
			_, _, err := e.Start(testCtx(t), StartRequest{RequestID: "r", Contract: c, Principal: "alice", Tenant: "acme"})
			var fe *taskcontract.FieldError
			if !errors.As(err, &fe) || fe.Field != "contract.tools[1].input_schema" {
				t.Fatalf("Start: %v, want a FieldError naming contract.tools[1].input_schema", err)
			}
			if !strings.Contains(fe.Description, tc.want) || !strings.Contains(fe.Description, `"send_email"`) {
				t.Errorf("description %q does not say %q and name the tool", fe.Description, tc.want)
			}
			page, err := s.List(testCtx(t), store.Filter{Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			if len(page.Runs) != 0 {
				t.Errorf("a refused start stored %d runs", len(page.Runs))
			}
		})
	}
	// The twin: schemas of both drafts compile.
	for _, sc := range []map[string]any{invoiceSchema, {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"},
		{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object", "$defs": map[string]any{"id": map[string]any{"type": "string"}},
			"properties": map[string]any{"a": map[string]any{"$ref": "#/$defs/id"}}}} {
		c := testContract(finalReply("done"))
		c.Tools[0].InputSchema = mustStruct(t, sc)
		if err := taskcontract.Validate(c); err != nil {
			t.Errorf("taskcontract.Validate(%v): %v", sc, err)
		}
	}
}
