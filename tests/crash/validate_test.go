package crash_test

// The validators' failure twins: each is fed a history that breaks the
// invariant it guards, and must say so.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// history builds a run's log from payloads, numbered from 1.
func history(runID string, payloads ...any) runLog {
	l := runLog{run: &reinv1.Run{RunId: runID, Status: stCompleted}}
	for i, p := range payloads {
		ev := &reinv1.Event{RunId: runID, Sequence: uint64(i + 1), Actor: "harness"}
		switch p := p.(type) {
		case *reinv1.ModelRequested:
			ev.Payload = &reinv1.Event_ModelRequested{ModelRequested: p}
		case *reinv1.ToolRequested:
			ev.Payload = &reinv1.Event_ToolRequested{ToolRequested: p}
		case *reinv1.ToolReturned:
			ev.Payload = &reinv1.Event_ToolReturned{ToolReturned: p}
		case *reinv1.ApprovalRequested:
			ev.Payload = &reinv1.Event_ApprovalRequested{ApprovalRequested: p}
		case *reinv1.WriteCommitted:
			ev.Payload = &reinv1.Event_WriteCommitted{WriteCommitted: p}
		default:
			panic("history: unexpected payload")
		}
		l.events = append(l.events, ev)
	}
	l.run.Version = uint64(len(l.events))
	return l
}

func ledgerOf(t *testing.T, lines ...string) ledger {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ledger.tsv")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return readLedger(t, path)
}

func TestValidatorsCatch(t *testing.T) {
	receipt := &structpb.Value{}
	if err := protojson.Unmarshal([]byte(receiptJSON), receipt); err != nil {
		t.Fatal(err)
	}
	committed := func(op string) *reinv1.WriteCommitted {
		return &reinv1.WriteCommitted{ProposalId: "p", OperationId: op, Receipt: receipt}
	}

	t.Run("gap-free", func(t *testing.T) {
		l := history("r", &reinv1.ModelRequested{}, &reinv1.ModelRequested{}, &reinv1.ModelRequested{})
		if msg := l.gapFree(); msg != "" {
			t.Fatalf("a gap-free log: %s", msg)
		}
		l.events[2].Sequence = 4
		if l.gapFree() == "" {
			t.Error("a log that skips sequence 3 passes")
		}
		l.events[2].Sequence = 3
		l.run.Version = 4
		if l.gapFree() == "" {
			t.Error("a log shorter than the run's version passes")
		}
	})

	t.Run("writes", func(t *testing.T) {
		wc := writeTool
		for _, tc := range []struct {
			name   string
			logs   []runLog
			ledger []string
			want   string // a word of the problem; "" for none
		}{
			{"once", []runLog{history("r", committed("op_1"))}, []string{"op_1\t" + wc + "\tapplied"}, ""},
			{"applied twice", []runLog{history("r", committed("op_1"))}, []string{"op_1\t" + wc + "\tapplied", "op_1\t" + wc + "\tapplied"}, "applied 2 times"},
			{"never applied", []runLog{history("r", committed("op_1"))}, nil, "applied it 0 times"},
			{"commit lost", []runLog{history("r")}, []string{"op_1\t" + wc + "\tapplied"}, "a commit was lost"},
			{"second dispatch", []runLog{history("r", committed("op_1"))}, []string{"op_1\t" + wc + "\tapplied", "op_1\t" + wc + "\trepeat"}, "blind second dispatch"},
			{"two runs commit one operation", []runLog{history("r", committed("op_1")), history("s", committed("op_1"))}, []string{"op_1\t" + wc + "\tapplied"}, "again in run s"},
		} {
			problems := writeProblems(tc.logs, ledgerOf(t, tc.ledger...))
			switch {
			case tc.want == "" && len(problems) > 0:
				t.Errorf("%s: problems %q, want none", tc.name, problems)
			case tc.want != "" && !strings.Contains(strings.Join(problems, "\n"), tc.want):
				t.Errorf("%s: problems %q, want one saying %q", tc.name, problems, tc.want)
			}
		}
	})

	t.Run("dropped calls", func(t *testing.T) {
		read := &reinv1.ToolRequested{Tool: readTool, CallId: "c1"}
		write := &reinv1.ToolRequested{Tool: writeTool, CallId: "c2"}
		if d := droppedCalls(history("r", &reinv1.ModelRequested{}, read, &reinv1.ToolReturned{CallId: "c1"}, &reinv1.ModelRequested{},
			write, &reinv1.ApprovalRequested{Proposal: &reinv1.Proposal{ProposalId: "p", CallId: "c2"}})); len(d) > 0 {
			t.Errorf("calls with outcomes: dropped %q", d)
		}
		if d := droppedCalls(history("r", &reinv1.ModelRequested{}, read, &reinv1.ModelRequested{})); len(d) != 1 {
			t.Errorf("a read with no result before the next model call: dropped %q, want it", d)
		}
		if d := droppedCalls(history("r", &reinv1.ModelRequested{}, write, &reinv1.ModelRequested{})); len(d) != 1 {
			t.Errorf("a write never proposed before the next model call: dropped %q, want it", d)
		}
	})
}
