package engine

// Tests of an approval an engine cannot carry out (issue 13 §2): a write no
// executor of the engine can send is refused before anything is stored; a
// rejection, and a write whose tool server is merely down, are not.

import (
	"errors"
	"os"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/tools"
)

// pausedForApproval runs testContract's send_email call on an engine with
// searchTools to its pause for approval, and returns the store, its file,
// the run and its proposal.
func pausedForApproval(t *testing.T) (Store, string, string, *reinv1.Proposal) {
	t.Helper()
	s, path := openStore(t)
	e := newEngine(t, Config{Store: s, Owner: "started"})
	st, _ := runToRest(t, e, s, testContract(callReply("send_email", "w1", nil), finalReply("sent")))
	wantStatus(t, st, nil, statusNeedsApproval, "write_proposed")
	e.Close()
	return s, path, st.RunID, st.Pending.GetProposal()
}

func approval(runID string, p *reinv1.Proposal) Verdict {
	return Verdict{RunID: runID, ProposalID: p.GetProposalId(), ProposalHash: p.GetHash(), Approve: true, Principal: "bob"}
}

// TestApprovalNoExecutorProvidesIsRefused: on an engine without the tool of
// the pending write (a server started without the run's flags) an approval
// is refused with ErrNoExecutor naming the tool and the flags, and the
// store's file is byte-identical: no approval_decided, no write_dispatched,
// no write_outcome_unknown. The same approval then succeeds on an engine
// with the tool. Today it was recorded, dispatched and left unknown.
func TestApprovalNoExecutorProvidesIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tools tools.Executor
	}{
		{"no executor at all", noTools{}},
		{"other tools only", tools.NewFixtures(map[string][]tools.FixtureResult{"search": {{Output: structpb.NewStringValue("found")}}})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, path, runID, p := pausedForApproval(t)
			before, beforeEvs := stored(t, s, runID)
			file, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}

			bare := newEngine(t, Config{Store: s, Owner: "bare", Tools: tc.tools})
			_, err = bare.DecideApproval(testCtx(t), approval(runID, p))
			if !errors.Is(err, ErrNoExecutor) {
				t.Fatalf("DecideApproval: %v, want ErrNoExecutor", err)
			}
			for _, w := range []string{`"send_email"`, "--tools", "--workspace", "--tool-server", "--mcp", "nothing was recorded"} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("DecideApproval: %q does not say %q", err, w)
				}
			}
			after, afterEvs := stored(t, s, runID)
			if after.Version != before.Version || len(afterEvs) != len(beforeEvs) || !proto.Equal(after.Pending, before.Pending) {
				t.Fatalf("the refusal changed the run: version %d → %d, %d → %d events", before.Version, after.Version, len(beforeEvs), len(afterEvs))
			}
			for i := range afterEvs {
				if !proto.Equal(afterEvs[i], beforeEvs[i]) {
					t.Fatalf("event %d changed: %v → %v", i+1, beforeEvs[i], afterEvs[i])
				}
			}
			if now, err := os.ReadFile(path); err != nil || string(now) != string(file) {
				t.Fatalf("the refusal changed the store's file (%v)", err)
			}
			bare.Close()

			// The twin: the same approval on an engine with the tool.
			full := newEngine(t, Config{Store: s, Owner: "full"})
			if _, err := full.DecideApproval(testCtx(t), approval(runID, p)); err != nil {
				t.Fatalf("DecideApproval with the tool: %v", err)
			}
			waitRun(t, full, runID)
			done, evs := stored(t, s, runID)
			wantStatus(t, done, evs, statusCompleted, "final_answer")
			wantCount(t, evs, "approval_decided", 1)
			wantCount(t, evs, "write_committed", 1)
			wantCount(t, evs, "write_outcome_unknown", 0)
		})
	}
}

// TestRejectionNeedsNoExecutor: a rejection sends nothing, so an engine
// without the write's tool records it.
func TestRejectionNeedsNoExecutor(t *testing.T) {
	s, _, runID, p := pausedForApproval(t)
	bare := newEngine(t, Config{Store: s, Owner: "bare", Tools: noTools{}})
	v := approval(runID, p)
	v.Approve, v.EndRun, v.Reason = false, true, "not today"
	if _, err := bare.DecideApproval(testCtx(t), v); err != nil {
		t.Fatalf("a rejection on an engine without the tool: %v", err)
	}
	st, evs := stored(t, s, runID)
	wantStatus(t, st, evs, reinv1.RunStatus_RUN_STATUS_DENIED, "write_rejected_run_ended")
}

// TestApprovalToAToolServerDownIsDispatched: a write whose executor exists
// but does not answer (its tool server is down) is not refused: it is
// dispatched, and, with no lookup to settle it, its outcome is unknown.
func TestApprovalToAToolServerDownIsDispatched(t *testing.T) {
	s, _, runID, p := pausedForApproval(t)
	down := newEngine(t, Config{Store: s, Owner: "down", Tools: downTools{searchTools(t)}})
	st, err := down.DecideApproval(testCtx(t), approval(runID, p))
	if err != nil {
		t.Fatalf("DecideApproval to a tool server down: %v", err)
	}
	_, evs := stored(t, s, runID)
	wantStatus(t, st, evs, statusNeedsApproval, "write_proposed")
	wantCount(t, evs, "write_dispatched", 1)
	unknown := ofType(evs, "write_outcome_unknown")
	if len(unknown) != 1 || !strings.Contains(unknown[0].GetWriteOutcomeUnknown().GetError(), errToolServerDown.Error()) {
		t.Fatalf("write_outcome_unknown = %v, want one naming the tool server's error", unknown)
	}
}
