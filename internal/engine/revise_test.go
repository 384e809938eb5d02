package engine

// Tests of a person's revision of a pending write (approve with edits).

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/step"
	"github.com/reinhq/rein/internal/taskcontract"
)

// emailContract proposes one email to ana, then answers; its write's
// schema wants a string "to".
func emailContract(t *testing.T) *reinv1.TaskContract {
	c := testContract(callReply("send_email", "call-1", mustStruct(t, map[string]any{"to": "ana@example.com", "subject": "total"})), finalReply("sent"))
	c.Tools[1].InputSchema = mustStruct(t, map[string]any{
		"type": "object", "required": []any{"to"},
		"properties": map[string]any{"to": map[string]any{"type": "string"}, "subject": map[string]any{"type": "string"}},
	})
	return c
}

func revision(st runstate.State, who string, args *structpb.Struct) Verdict {
	p := st.Pending.GetProposal()
	return Verdict{RunID: st.RunID, ProposalID: p.GetProposalId(), ProposalHash: p.GetHash(), Principal: who, Arguments: args}
}

// A revision replaces the pending proposal with a new one (a new ID, hash
// and preview, who revised it, what changed); the superseded proposal can
// no longer be approved; the revision is approved like any proposal, the
// write is sent with the revised arguments, and the model reads that its
// write was revised.
func TestReviseThenApprove(t *testing.T) {
	ex := searchTools(t)
	spy := &modelSpy{}
	e, s := setup(t, Config{Tools: ex, Models: spy.models(nil)})
	st, _ := runToRest(t, e, s, emailContract(t))
	old := st.Pending.GetProposal()
	revised, err := e.DecideApproval(testCtx(t), revision(st, "bob", mustStruct(t, map[string]any{"to": "bob@example.com", "subject": "total"})))
	if err != nil {
		t.Fatalf("revise: %v", err)
	}
	p := revised.Pending.GetProposal()
	switch {
	case revised.Status != statusNeedsApproval:
		t.Fatalf("after the revision the run is %s, want needs_approval", runstate.StatusName(revised.Status))
	case p.GetProposalId() == old.GetProposalId() || p.GetHash() == old.GetHash() || p.GetRevisedBy() != "bob":
		t.Fatalf("revised proposal %v: want a new ID and hash, revised by bob", p)
	case p.GetArguments().GetFields()["to"].GetStringValue() != "bob@example.com" || p.GetHash() != step.ProposalHash(p):
		t.Fatalf("revised proposal %v: want the new arguments, bound by its hash", p)
	}
	ex.wantCalls(t, 0, 2, 0) // proposed again for a new preview
	_, err = e.DecideApproval(testCtx(t), Verdict{RunID: st.RunID, ProposalID: old.GetProposalId(), ProposalHash: old.GetHash(), Approve: true, Principal: "carol"})
	if !errors.Is(err, ErrNotWaiting) {
		t.Errorf("approving the superseded proposal: %v, want ErrNotWaiting", err)
	}
	if _, err := e.DecideApproval(testCtx(t), Verdict{RunID: st.RunID, ProposalID: p.GetProposalId(), ProposalHash: p.GetHash(), Approve: true, Principal: "carol"}); err != nil {
		t.Fatalf("approve the revision: %v", err)
	}
	waitRun(t, e, st.RunID)
	st, evs := stored(t, s, st.RunID)
	wantStatus(t, st, evs, reinv1.RunStatus_RUN_STATUS_COMPLETED, "final_answer")
	ex.wantCalls(t, 0, 2, 1)
	rev := ofType(evs, "proposal_revised")
	if len(rev) != 1 || rev[0].GetActor() != "principal:bob" {
		t.Fatalf("proposal_revised events %v, want bob's one", rev)
	}
	ch := rev[0].GetProposalRevised().GetChanges()
	if len(ch) != 1 || ch[0].GetPath() != "/to" || ch[0].GetBefore().GetStringValue() != "ana@example.com" || ch[0].GetAfter().GetStringValue() != "bob@example.com" {
		t.Errorf("changes %v, want /to from ana to bob", ch)
	}
	reqs := spy.requests()
	if last := reqs[len(reqs)-1]; !strings.Contains(strings.Join(observations(last), "\n"), "A person revised the arguments of your proposed send_email write") {
		t.Errorf("the model's next call does not read that its write was revised: %v", observations(last))
	}
	checkInputHashes(t, evs)
}

// observations are the texts of a request's observations.
func observations(req model.Request) []string {
	var out []string
	for _, turn := range req.Transcript {
		if o := turn.Observation; o != nil {
			out = append(out, o.Text)
		}
	}
	return out
}

// A revision is refused, and nothing is stored, when its arguments break
// the tool's schema, when its hash is not the pending proposal's, and when
// the run waits for no proposal; a server that has two approve a revision
// refuses its reviser's approval.
func TestReviseRefused(t *testing.T) {
	e, s := setup(t, Config{Tools: searchTools(t), ApprovalsNeedTwo: true})
	ctx := testCtx(t)
	st, _ := runToRest(t, e, s, emailContract(t))
	var fe *taskcontract.FieldError
	if _, err := e.DecideApproval(ctx, revision(st, "bob", mustStruct(t, map[string]any{"to": 5}))); !errors.As(err, &fe) || !strings.Contains(fe.Description, "to") {
		t.Errorf("a revision that breaks the schema: %v, want a FieldError naming the field", err)
	}
	bad := revision(st, "bob", mustStruct(t, map[string]any{"to": "bob@example.com"}))
	bad.ProposalHash = "deadbeef"
	if _, err := e.DecideApproval(ctx, bad); !errors.Is(err, ErrNotWaiting) {
		t.Errorf("a revision of another hash: %v, want ErrNotWaiting", err)
	}
	if after, _ := stored(t, s, st.RunID); after.Version != st.Version {
		t.Fatalf("refused revisions stored something: version %d → %d", st.Version, after.Version)
	}
	revised, err := e.DecideApproval(ctx, revision(st, "bob", mustStruct(t, map[string]any{"to": "bob@example.com"})))
	if err != nil {
		t.Fatal(err)
	}
	p := revised.Pending.GetProposal()
	own := Verdict{RunID: st.RunID, ProposalID: p.GetProposalId(), ProposalHash: p.GetHash(), Approve: true, Principal: "bob"}
	if _, err := e.DecideApproval(ctx, own); !errors.Is(err, ErrForbidden) {
		t.Errorf("the reviser approving the revision with --approvals-need-two: %v, want ErrForbidden", err)
	}
	t.Run("not waiting for a proposal", func(t *testing.T) {
		q, _ := runToRest(t, e, s, testContract(askReply("Which quarter?")))
		v := Verdict{RunID: q.RunID, ProposalID: "prop_x", ProposalHash: "h", Principal: "bob", Arguments: mustStruct(t, map[string]any{"to": "x"})}
		if _, err := e.DecideApproval(ctx, v); !errors.Is(err, ErrNotWaiting) {
			t.Errorf("a revision of a run that waits for input: %v, want ErrNotWaiting", err)
		}
	})
}
