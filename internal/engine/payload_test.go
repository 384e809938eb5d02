package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/step"
	"github.com/reinhq/rein/internal/tools"
)

// commitSpy is a fixture executor that keeps the call each Commit was given.
type commitSpy struct {
	tools.Executor
	mu        sync.Mutex
	committed []tools.Call
}

func (s *commitSpy) Commit(ctx context.Context, call tools.Call, op string) (*structpb.Value, error) {
	s.mu.Lock()
	s.committed = append(s.committed, call)
	s.mu.Unlock()
	return s.Executor.Commit(ctx, call, op)
}

// proposeRun runs a send_email call with args whose tool previews preview,
// to its pause for approval, and returns the engine, the spy, the run and
// its pending proposal.
func proposeRun(t *testing.T, args *structpb.Struct, preview *structpb.Value) (*Engine, *commitSpy, Store, string, *reinv1.Proposal, []*reinv1.Event) {
	t.Helper()
	spy := &commitSpy{Executor: tools.NewFixtures(map[string][]tools.FixtureResult{
		"search":     {{Output: mustValue(t, "found")}},
		"send_email": {{Preview: preview, Receipt: mustValue(t, "sent")}},
	})}
	e, s := setup(t, Config{Tools: spy})
	st, evs := runToRest(t, e, s, testContract(callReply("send_email", "call-1", args), finalReply("sent")))
	wantStatus(t, st, evs, reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL, "write_proposed")
	return e, spy, s, st.RunID, st.Pending.GetProposal(), evs
}

// TestLargeProposalIsStoredApart: a preview of 6 MiB (a diff over a large
// file) and arguments over the inline bound are stored as blobs in the
// approval_requested's append; the event and the run's pending proposal
// keep a bounded summary and the blobs' hashes, which the proposal's hash
// binds; the approved write is committed with the whole preview and
// arguments, read back from the store. Today the whole preview was inline:
// the run's every read was over the 4 MiB message limit.
func TestLargeProposalIsStoredApart(t *testing.T) {
	args := mustStruct(t, map[string]any{"to": "bob@example.com", "body": strings.Repeat("long body ", 8<<10)})
	preview := mustValue(t, map[string]any{"to": "bob@example.com", "diff": strings.Repeat("-old line\n+new line\n", 6<<20/19)})
	e, spy, s, runID, p, evs := proposeRun(t, args, preview)

	ar := ofType(evs, "approval_requested")[0]
	if n := proto.Size(ar); n > 4*step.MaxInlinePayload {
		t.Errorf("approval_requested is %d bytes, want it bounded (under %d)", n, 4*step.MaxInlinePayload)
	}
	if !proto.Equal(ar.GetApprovalRequested().GetProposal(), p) {
		t.Errorf("the pending proposal is not the approval_requested's")
	}
	if p.GetPreviewBlob() == "" || p.GetArgumentsBlob() == "" {
		t.Fatalf("proposal %v: want preview_blob and arguments_blob set", p)
	}
	if got := p.GetPreview().GetStructValue().GetFields()["to"].GetStringValue(); got != "bob@example.com" {
		t.Errorf("the preview's summary lost its small field: to = %q", got)
	}
	if d := p.GetPreview().GetStructValue().GetFields()["diff"].GetStringValue(); !strings.Contains(d, "cut:") || len(d) > 2*step.MaxInlineString {
		t.Errorf("the preview's summary keeps %d bytes of the diff, want a cut of about %d", len(d), step.MaxInlineString)
	}
	whole, err := step.WholeProposal(testCtx(t), s, runID, p)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(whole.GetPreview(), preview) || !proto.Equal(whole.GetArguments(), args) {
		t.Errorf("the blobs do not hold the whole preview and arguments")
	}
	if p.GetHash() != step.ProposalHash(p) {
		t.Errorf("hash %s, want ProposalHash %s", p.GetHash(), step.ProposalHash(p))
	}

	if _, err := e.DecideApproval(testCtx(t), Verdict{RunID: runID, ProposalID: p.GetProposalId(), ProposalHash: p.GetHash(), Approve: true, Principal: "bob"}); err != nil {
		t.Fatal(err)
	}
	waitRun(t, e, runID)
	if len(spy.committed) != 1 {
		t.Fatalf("%d commits, want 1", len(spy.committed))
	}
	if c := spy.committed[0]; !proto.Equal(c.Preview, preview) || !proto.Equal(c.Args, args) {
		t.Errorf("the tool was committed with the summary, not the whole preview and arguments")
	}
	st, evs := stored(t, s, runID)
	wantStatus(t, st, evs, reinv1.RunStatus_RUN_STATUS_COMPLETED, "final_answer")
}

// TestSmallProposalStaysInline is the twin: a preview and arguments under
// the bound are kept whole in the proposal, with no blob, and hashed as
// they always were (the canonical JSON of tool, arguments and preview).
func TestSmallProposalStaysInline(t *testing.T) {
	args := mustStruct(t, map[string]any{"to": "bob@example.com"})
	preview := mustValue(t, map[string]any{"to": "bob@example.com", "diff": "-a\n+b\n"})
	_, _, _, _, p, _ := proposeRun(t, args, preview)
	if p.GetPreviewBlob() != "" || p.GetArgumentsBlob() != "" || !proto.Equal(p.GetPreview(), preview) || !proto.Equal(p.GetArguments(), args) {
		t.Errorf("small proposal %v: want it whole, with no blob", p)
	}
	canon, _ := json.Marshal(map[string]any{"tool": "send_email", "arguments": args.AsMap(), "preview": preview.AsInterface()})
	sum := sha256.Sum256(canon)
	if want := hex.EncodeToString(sum[:]); p.GetHash() != want {
		t.Errorf("hash %s, want %s as before", p.GetHash(), want)
	}
}

// TestToolErrorIsBounded: a tool's error of any length is cut in its
// tool_returned (and so in the run's last_error); the twin, a short one, is
// kept as it is.
func TestToolErrorIsBounded(t *testing.T) {
	for _, tc := range []struct {
		msg string
		cut bool
	}{{strings.Repeat("no such row; ", 1<<19), true}, {"no such row", false}} {
		e, s := setup(t, Config{Tools: searchTools(t, tools.FixtureResult{Error: tc.msg})})
		c := testContract(callReply("search", "call-1", nil), finalReply("done"))
		c.Tools = c.Tools[:1]
		_, evs := runToRest(t, e, s, c)
		got := ofType(evs, "tool_returned")[0].GetToolReturned().GetError()
		if tc.cut && (len(got) > step.MaxInlineText+100 || !strings.Contains(got, "cut:")) || !tc.cut && got != tc.msg {
			t.Errorf("a %d-byte tool error is recorded as %d bytes", len(tc.msg), len(got))
		}
	}
}

// TestReceiptIsBounded: a write's receipt over the inline bound is kept as
// a bounded summary in its write_committed; the twin, a small one, whole.
func TestReceiptIsBounded(t *testing.T) {
	for _, tc := range []struct {
		receipt *structpb.Value
		whole   bool
	}{{structpb.NewStringValue(strings.Repeat("receipt ", 1<<20)), false}, {structpb.NewStringValue("re_1"), true}} {
		e, s := setup(t, Config{Tools: tools.NewFixtures(map[string][]tools.FixtureResult{
			"search":     {{Output: mustValue(t, "found")}},
			"send_email": {{Preview: mustValue(t, "send"), Receipt: tc.receipt}},
		})})
		st, _ := runToRest(t, e, s, testContract(callReply("send_email", "call-1", nil), finalReply("sent")))
		p := st.Pending.GetProposal()
		if _, err := e.DecideApproval(testCtx(t), Verdict{RunID: st.RunID, ProposalID: p.GetProposalId(), ProposalHash: p.GetHash(), Approve: true, Principal: "bob"}); err != nil {
			t.Fatal(err)
		}
		waitRun(t, e, st.RunID)
		_, evs := stored(t, s, st.RunID)
		got := ofType(evs, "write_committed")[0].GetWriteCommitted().GetReceipt()
		if proto.Equal(got, tc.receipt) != tc.whole || proto.Size(got) > step.MaxInlinePayload {
			t.Errorf("a %d-byte receipt is recorded as %d bytes (whole: %v)", proto.Size(tc.receipt), proto.Size(got), tc.whole)
		}
	}
}

// TestOversizeDecisionIsRefused: a decision over step.MaxDecisionBytes (a tool
// call carrying a huge argument) is refused as a decision_rejected that
// costs the step, is not recorded, and the tool never runs; the twin, a
// decision just under the bound, runs.
func TestOversizeDecisionIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		size   int
		refuse bool
	}{{"over", step.MaxDecisionBytes + 1, true}, {"under", step.MaxDecisionBytes / 2, false}} {
		t.Run(tc.name, func(t *testing.T) {
			ex := searchTools(t)
			e, s := setup(t, Config{Tools: ex})
			args := mustStruct(t, map[string]any{"q": strings.Repeat("x", tc.size)})
			st, evs := runToRest(t, e, s, testContract(callReply("search", "call-1", args), finalReply("done")))
			wantStatus(t, st, evs, statusCompleted, "final_answer")
			rejected := ofType(evs, "decision_rejected")
			if !tc.refuse {
				if len(rejected) != 0 {
					t.Fatalf("a decision under the bound was refused: %v", rejected[0])
				}
				ex.wantCalls(t, 1, 0, 0)
				return
			}
			if len(rejected) != 1 || !strings.Contains(rejected[0].GetDecisionRejected().GetError(), "over the") {
				t.Fatalf("decision_rejected %v, want one naming the bound", rejected)
			}
			// The scripted model's replies are in the contract, so
			// run_started is as large as the test made it; every other
			// event is small.
			for _, ev := range evs[1:] {
				if n := proto.Size(ev); n > step.MaxDecisionBytes/2 {
					t.Fatalf("event %d (%s) is %d bytes: the oversize decision was recorded", ev.GetSequence(), runstate.PayloadName(ev), n)
				}
			}
			ex.wantCalls(t, 0, 0, 0)
		})
	}
}
