package engine

// Tests of a start an engine cannot carry out (issue 13 §2): a grant of a
// tool no executor of the engine provides is refused before anything is
// stored, a start or a fork alike.

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/taskcontract"
	"github.com/reinhq/rein/internal/tools"
)

var errToolServerDown = errors.New("tool server billing at 127.0.0.1:1: connection refused")

// downTools is a tool server that went down: it lists nothing and sends
// nothing.
type downTools struct{ tools.Executor }

func (downTools) List(context.Context) ([]tools.Spec, error) { return nil, errToolServerDown }
func (downTools) Commit(context.Context, tools.Call, string) (*structpb.Value, error) {
	return nil, errToolServerDown
}

// wantNoRuns fails if s holds a run.
func wantNoRuns(t *testing.T, s Store) {
	t.Helper()
	page, err := s.List(testCtx(t), store.Filter{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Runs) != 0 {
		t.Fatalf("a refused start stored %d runs", len(page.Runs))
	}
}

// TestStartRefusesToolsNoExecutorProvides: a grant of a read or write tool
// that no executor lists is refused with the field and the flags that give
// a server tools; a listing that fails is Unavailable, naming what failed.
// Nothing is stored. Today the run started and failed at its first call.
func TestStartRefusesToolsNoExecutorProvides(t *testing.T) {
	searchOnly := tools.NewFixtures(map[string][]tools.FixtureResult{"search": {{Output: structpb.NewStringValue("found")}}})
	for _, tc := range []struct {
		name  string
		tools tools.Executor
		field string
		// unavailable: refused with ErrToolsUnavailable; else a FieldError
		// on field, or started when field is "".
		unavailable bool
		want        []string
	}{
		{name: "no executor at all", tools: noTools{}, field: "contract.tools[0].name",
			want: []string{`"search", "send_email" are granted`, "--tools", "--workspace", "--tool-server", "--mcp"}},
		{name: "the write tool is missing", tools: searchOnly, field: "contract.tools[1].name",
			want: []string{`"send_email" is granted`, "--tools", "--mcp"}},
		{name: "a tool server down, a tool not listed", tools: tools.Join(downTools{}, searchOnly), unavailable: true,
			want: []string{`"send_email"`, errToolServerDown.Error(), "retry"}},
		// The twins: every read and write grant is listed (ask_manager is
		// ask_human-tier, run by no executor), even past a server down.
		{name: "every tool listed", tools: searchTools(t)},
		{name: "every tool listed past a tool server down", tools: tools.Join(downTools{}, searchTools(t))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, s := setup(t, Config{Tools: tc.tools})
			_, _, err := e.Start(testCtx(t), StartRequest{RequestID: "r", Contract: testContract(finalReply("done")), Principal: "alice", Tenant: "acme"})
			var fe *taskcontract.FieldError
			switch {
			case tc.unavailable:
				if !errors.Is(err, ErrToolsUnavailable) || errors.As(err, &fe) {
					t.Fatalf("Start: %v, want ErrToolsUnavailable", err)
				}
			case tc.field != "":
				if !errors.As(err, &fe) || fe.Field != tc.field {
					t.Fatalf("Start: %v, want a FieldError on %s", err, tc.field)
				}
			default:
				if err != nil {
					t.Fatalf("Start: %v", err)
				}
				return
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Start: %q does not say %q", err, w)
				}
			}
			wantNoRuns(t, s)
		})
	}
}

// TestForkRefusesToolsNoExecutorProvides: a fork is a start: on an engine
// without the parent's tools it is refused, and its twin on an engine with
// them is created.
func TestForkRefusesToolsNoExecutorProvides(t *testing.T) {
	e, s := setup(t, Config{Owner: "a"})
	parent, _ := runToRest(t, e, s, testContract(finalReply("done")))
	fork := ForkRequest{RunID: parent.RunID, AtSequence: 1, RequestID: "f", Principal: "alice", Tenant: "acme"}

	bare := newEngine(t, Config{Store: s, Owner: "b", Tools: noTools{}})
	var fe *taskcontract.FieldError
	if _, _, err := bare.Fork(testCtx(t), fork); !errors.As(err, &fe) || fe.Field != "contract.tools[0].name" || !strings.Contains(err.Error(), "--tool-server") {
		t.Fatalf("Fork on an engine without tools: %v, want a FieldError on contract.tools[0].name naming the flags", err)
	}
	page, err := s.List(testCtx(t), store.Filter{Limit: 10})
	if err != nil || len(page.Runs) != 1 {
		t.Fatalf("after a refused fork the store lists %d runs (%v), want the parent alone", len(page.Runs), err)
	}
	if _, created, err := e.Fork(testCtx(t), fork); err != nil || !created {
		t.Fatalf("Fork on the parent's engine: created %v, %v", created, err)
	}
}
