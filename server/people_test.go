package server

// Tests of people in the loop (docs/design.md §2, §7, §10): approvals, rejections,
// input, cancels of paused runs, and the timers of paused runs (proposal
// expiry, the run's deadline), through the generated client against a real
// node on a real bbolt file, with the scripted model and fixture tools.
//
// Every refusal is checked to change no stored byte: the run as GetRun
// shows it and its number of events are the same before and after. Nothing
// sleeps: the tests wait on watch streams, or poll with a deadline.
//
// A test that shows a bug not fixed yet calls knownPeopleBug when the bug
// shows, which skips it unless REIN_KNOWN_BUGS=1.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/step"
)

// TestApproveCommitsThenRunGoesOn: an approval stores approval_decided and
// write_dispatched before the commit is sent, commits once with that
// operation ID, and the run goes on only after the receipt is stored; the
// model's next call sees the receipt. TestApprovalRefusals and
// TestCommitFailureLeavesOutcomeUnknown are its failure twins.
func TestApproveCommitsThenRunGoesOn(t *testing.T) {
	s := newPeopleServer(t, Config{})
	run := s.begin(t, writeContract(refundCall(), final("refunded")), stNeedsApproval)
	p := run.GetPending().GetProposal()
	if p.GetTool() != "refund" || p.GetCallId() != "w1" || p.GetHash() != step.ProposalHash(p) || p.GetRunVersion() == 0 || p.GetExpiresAt() == nil {
		t.Fatalf("pending proposal %v: want the refund call, its hash, version and expiry", p)
	}
	if n := len(s.tools.commitCounts()); n != 0 {
		t.Fatalf("%d commits before any approval", n)
	}

	resp, err := s.decide(run, approveVerdict, "looks right")
	if err != nil {
		t.Fatalf("DecideApproval: %v", err)
	}
	if got := resp.GetRun().GetStatus(); got != stRunning && got != stCompleted {
		t.Fatalf("DecideApproval answered a %v run, want running (or later)", got)
	}
	if resp.GetRun().GetPending() != nil {
		t.Errorf("the approved run still shows a pending action: %v", resp.GetRun().GetPending())
	}

	evs := s.watchToEnd(t, run.GetRunId(), run.GetVersion())
	if len(evs) < 4 {
		t.Fatalf("after the approval: %s, want approval_decided, write_dispatched, write_committed, status_changed first", payloadNames(evs))
	}
	const head = "approval_decided,write_dispatched,write_committed,status_changed"
	if got := payloadNames(evs[:4]); got != head {
		t.Fatalf("after the approval: %s, want %s first; log:\n%s", payloadNames(evs), head, logText(evs))
	}
	decided, dispatched, committed := evs[0].GetApprovalDecided(), evs[1].GetWriteDispatched(), evs[2].GetWriteCommitted()
	if !decided.GetApproved() || decided.GetProposalId() != p.GetProposalId() || decided.GetReason() != "looks right" || decided.GetEndRun() {
		t.Errorf("approval_decided %v, want approved for %s with the reason", decided, p.GetProposalId())
	}
	if evs[0].GetActor() != "principal:"+LocalPrincipal().ID {
		t.Errorf("approval_decided by %q, want the approver principal:%s", evs[0].GetActor(), LocalPrincipal().ID)
	}
	op := dispatched.GetOperationId()
	if op == "" || dispatched.GetProposalId() != p.GetProposalId() {
		t.Fatalf("write_dispatched %v, want an operation ID for %s", dispatched, p.GetProposalId())
	}
	if committed.GetOperationId() != op || committed.GetProposalId() != p.GetProposalId() || !proto.Equal(committed.GetReceipt(), refundReceipt) {
		t.Errorf("write_committed %v, want operation %s with receipt %v", committed, op, refundReceipt)
	}
	if evs[2].GetActor() != "tool:refund" {
		t.Errorf("write_committed by %q, want tool:refund", evs[2].GetActor())
	}
	wantChange(t, evs[3], stNeedsApproval, stRunning, "write_committed")
	last := evs[len(evs)-1]
	wantChange(t, last, stRunning, stCompleted, "final_answer")
	if n := countPayload(evs, "model_requested"); n != 1 {
		t.Errorf("%d model calls after the approval, want 1; log:\n%s", n, logText(evs))
	}
	s.tools.wantCommits(t, op)
	if !s.models.sawObservation(run.GetRunId(), "harness", refundReceipt.GetStringValue()) {
		t.Errorf("the model's call after the write was not shown its receipt: %+v", s.models.requests(run.GetRunId()))
	}
	if got := s.get(t, run.GetRunId()); got.GetStatus() != stCompleted || got.GetResult().GetText() != "refunded" {
		t.Errorf("run is %v with result %v, want completed with the final answer", got.GetStatus(), got.GetResult())
	}
}

// TestApprovalRefusals: requests that must be refused, each changing no
// stored byte, then their twin, the right request, which succeeds; then the
// same decision again, on the finished run, refused.
func TestApprovalRefusals(t *testing.T) {
	s := newPeopleServer(t, Config{})
	run := s.begin(t, writeContract(refundCall(), final("refunded")), stNeedsApproval)
	p := run.GetPending().GetProposal()
	ctx := context.Background()
	decide := func(mut func(*reinv1.DecideApprovalRequest)) func() error {
		return func() error {
			req := &reinv1.DecideApprovalRequest{RunId: run.GetRunId(), ProposalId: p.GetProposalId(), ProposalHash: p.GetHash(), Verdict: approveVerdict}
			mut(req)
			_, err := s.client.DecideApproval(ctx, req)
			return err
		}
	}
	input := func(runID, text string) func() error {
		return func() error {
			_, err := s.client.ProvideInput(ctx, &reinv1.ProvideInputRequest{RunId: runID, Text: text})
			return err
		}
	}
	for _, tc := range []struct {
		name string
		call func() error
		want codes.Code
	}{
		{"wrong hash", decide(func(r *reinv1.DecideApprovalRequest) { r.ProposalHash = strings.Repeat("0", 64) }), codes.FailedPrecondition},
		{"hash of another proposal", decide(func(r *reinv1.DecideApprovalRequest) {
			r.ProposalHash = step.ProposalHash(&reinv1.Proposal{Tool: "refund"})
		}), codes.FailedPrecondition},
		{"reject with a wrong hash", decide(func(r *reinv1.DecideApprovalRequest) {
			r.ProposalHash, r.Verdict, r.EndRun = "abc", rejectVerdict, true
		}), codes.FailedPrecondition},
		{"unknown proposal", decide(func(r *reinv1.DecideApprovalRequest) { r.ProposalId = "prop_01J0000000000000000UNKNOWN" }), codes.FailedPrecondition},
		{"unspecified verdict", decide(func(r *reinv1.DecideApprovalRequest) { r.Verdict = reinv1.ApprovalVerdict_APPROVAL_VERDICT_UNSPECIFIED }), codes.InvalidArgument},
		{"undefined verdict", decide(func(r *reinv1.DecideApprovalRequest) { r.Verdict = 7 }), codes.InvalidArgument},
		{"no proposal id", decide(func(r *reinv1.DecideApprovalRequest) { r.ProposalId = "" }), codes.InvalidArgument},
		{"no hash", decide(func(r *reinv1.DecideApprovalRequest) { r.ProposalHash = "" }), codes.InvalidArgument},
		{"missing run", decide(func(r *reinv1.DecideApprovalRequest) { r.RunId = "run_01J0000000000000000MISSING" }), codes.NotFound},
		{"input to a run waiting for approval", input(run.GetRunId(), "the blue one"), codes.FailedPrecondition},
		{"input without text", input(run.GetRunId(), ""), codes.InvalidArgument},
		{"input to a missing run", input("run_01J0000000000000000MISSING", "x"), codes.NotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := s.mark(t, run.GetRunId())
			wantCode(t, tc.call(), tc.want)
			s.unchanged(t, tc.name, before)
		})
	}
	if n := len(s.tools.commitCounts()); n != 0 {
		t.Fatalf("refused decisions committed %d writes", n)
	}

	// The twin: the right decision succeeds, and the run ends.
	if _, err := s.decide(run, approveVerdict, ""); err != nil {
		t.Fatalf("the right approval: %v", err)
	}
	evs := s.watchToEnd(t, run.GetRunId(), run.GetVersion())
	wantChange(t, evs[len(evs)-1], stRunning, stCompleted, "final_answer")
	s.tools.wantCommits(t, evs[1].GetWriteDispatched().GetOperationId())

	// The same decision again, on the finished run: refused, no second commit.
	before := s.mark(t, run.GetRunId())
	for _, verdict := range []reinv1.ApprovalVerdict{approveVerdict, rejectVerdict} {
		_, err := s.decide(run, verdict, "again")
		wantCode(t, err, codes.FailedPrecondition)
		s.unchanged(t, "a second decision", before)
	}
	wantCode(t, input(run.GetRunId(), "late")(), codes.FailedPrecondition)
	s.unchanged(t, "input to a completed run", before)
	if got := s.tools.commitCounts(); len(got) != 1 {
		t.Errorf("commits %v after a second approval, want the first only", got)
	}
}

// TestApprovalExpiredByClock: a decision after the proposal's expires_at on
// the engine's clock is refused, though the real-time timer has not fired;
// the twin, the same decision with the clock back before expiry, succeeds.
func TestApprovalExpiredByClock(t *testing.T) {
	clock := &offsetClock{}
	s := newPeopleServer(t, Config{Clock: clock.Now})
	run := s.begin(t, withTTL(writeContract(refundCall(), final("refunded")), time.Hour), stNeedsApproval)
	before := s.mark(t, run.GetRunId())
	clock.set(2 * time.Hour)
	for _, verdict := range []reinv1.ApprovalVerdict{approveVerdict, rejectVerdict} {
		_, err := s.decide(run, verdict, "")
		st := wantCode(t, err, codes.FailedPrecondition)
		if !strings.Contains(st.Message(), "expired") {
			t.Errorf("message %q should say the proposal expired", st.Message())
		}
		s.unchanged(t, "a decision on an expired proposal", before)
	}
	if n := len(s.tools.commitCounts()); n != 0 {
		t.Fatalf("a decision on an expired proposal committed %d writes", n)
	}

	clock.set(0)
	if _, err := s.decide(run, approveVerdict, ""); err != nil {
		t.Fatalf("approval before expiry: %v", err)
	}
	evs := s.watchToEnd(t, run.GetRunId(), run.GetVersion())
	wantChange(t, evs[len(evs)-1], stRunning, stCompleted, "final_answer")
}

// TestApprovalRoles: only an approver (or admin) of the run's tenant may
// decide; a viewer and an operator are refused, another tenant is told the
// run does not exist; none changes the run. The twin: the approver.
func TestApprovalRoles(t *testing.T) {
	s := newPeopleServer(t, Config{Directory: testDirectory(t)}, as("a-admin"))
	run := s.begin(t, writeContract(refundCall(), final("refunded")), stNeedsApproval, as("a-operator"))
	before := s.mark(t, run.GetRunId())
	for _, tc := range []struct {
		who  string
		want codes.Code
	}{
		{"a-viewer", codes.PermissionDenied},
		{"a-operator", codes.PermissionDenied},
		{"b-viewer", codes.PermissionDenied},
		{"b-admin", codes.NotFound},
	} {
		for _, verdict := range []reinv1.ApprovalVerdict{approveVerdict, rejectVerdict} {
			_, err := s.decide(run, verdict, "", as(tc.who))
			if codeOf(err) != tc.want {
				t.Errorf("%s, verdict %v: got %v, want %v", tc.who, verdict, err, tc.want)
			}
			s.unchanged(t, tc.who+"'s decision", before)
		}
	}
	// Input needs an operator: a viewer is refused on a waiting run.
	asked := s.begin(t, contract(nil, ask("which account?"), final("done")), stNeedsInput, as("a-operator"))
	askedBefore := s.mark(t, asked.GetRunId())
	_, err := s.client.ProvideInput(context.Background(), &reinv1.ProvideInputRequest{RunId: asked.GetRunId(), Text: "acct 42"}, as("a-viewer"))
	wantCode(t, err, codes.PermissionDenied)
	s.unchanged(t, "a viewer's input", askedBefore)
	if n := len(s.tools.commitCounts()); n != 0 {
		t.Fatalf("refused decisions committed %d writes", n)
	}

	// The twins: the approver approves; the operator answers.
	resp, err := s.decide(run, approveVerdict, "", as("a-approver"))
	if err != nil {
		t.Fatalf("a-approver: %v", err)
	}
	if resp.GetRun().GetStatus() == stNeedsApproval {
		t.Fatalf("after the approval the run still needs approval")
	}
	evs := s.watchToEnd(t, run.GetRunId(), run.GetVersion())
	if evs[0].GetActor() != "principal:a-approver" {
		t.Errorf("approval_decided by %q, want principal:a-approver", evs[0].GetActor())
	}
	wantChange(t, evs[len(evs)-1], stRunning, stCompleted, "final_answer")
	if _, err := s.client.ProvideInput(context.Background(), &reinv1.ProvideInputRequest{RunId: asked.GetRunId(), Text: "acct 42"}, as("a-operator")); err != nil {
		t.Fatalf("a-operator's input: %v", err)
	}
	s.watchToEnd(t, asked.GetRunId(), asked.GetVersion())
}

// TestSelfApprovalForbidden: with forbid_self_approval, the principal who
// started the run may not approveVerdict its write, even as an admin; another
// approver may. Without the policy, the starter may.
func TestSelfApprovalForbidden(t *testing.T) {
	s := newPeopleServer(t, Config{Directory: testDirectory(t)}, as("a-admin"))
	c := writeContract(refundCall(), final("refunded"))
	c.Approval = &reinv1.ApprovalPolicy{ForbidSelfApproval: true}
	run := s.begin(t, c, stNeedsApproval, as("a-admin"))
	if run.GetPrincipal() != "a-admin" {
		t.Fatalf("run started by %q, want a-admin", run.GetPrincipal())
	}
	before := s.mark(t, run.GetRunId())
	_, err := s.decide(run, approveVerdict, "", as("a-admin"))
	wantCode(t, err, codes.PermissionDenied)
	s.unchanged(t, "a self-approval", before)
	if n := len(s.tools.commitCounts()); n != 0 {
		t.Fatalf("a refused self-approval committed %d writes", n)
	}
	if _, err := s.decide(run, approveVerdict, "", as("a-approver")); err != nil {
		t.Fatalf("another approver: %v", err)
	}
	s.watchToEnd(t, run.GetRunId(), run.GetVersion())

	// Without the policy the starter may approveVerdict its own write.
	own := s.begin(t, writeContract(refundCall(), final("refunded")), stNeedsApproval, as("a-admin"))
	if _, err := s.decide(own, approveVerdict, "", as("a-admin")); err != nil {
		t.Fatalf("self-approval without the policy: %v", err)
	}
	evs := s.watchToEnd(t, own.GetRunId(), own.GetVersion())
	wantChange(t, evs[len(evs)-1], stRunning, stCompleted, "final_answer")
	if got := len(s.tools.commitCounts()); got != 2 {
		t.Errorf("%d writes committed, want 2", got)
	}
}

// TestRejectIsObservation: a rejection's reason is an observation, nothing
// is dispatched or committed, and the run goes on to complete. Its twin:
// a rejection that ends the run, denied, which ends the watch stream OK.
func TestRejectIsObservation(t *testing.T) {
	s := newPeopleServer(t, Config{})
	t.Run("run goes on", func(t *testing.T) {
		run := s.begin(t, writeContract(refundCall(), final("not refunded")), stNeedsApproval)
		resp, err := s.decide(run, rejectVerdict, "the amount is over the limit")
		if err != nil {
			t.Fatalf("reject: %v", err)
		}
		if got := resp.GetRun().GetStatus(); got != stRunning && got != stCompleted {
			t.Fatalf("reject answered a %v run, want running (or later)", got)
		}
		evs := s.watchToEnd(t, run.GetRunId(), run.GetVersion())
		if got := payloadNames(evs); !strings.HasPrefix(got, "approval_decided,status_changed,model_requested") {
			t.Fatalf("after the rejection: %s; log:\n%s", got, logText(evs))
		}
		d := evs[0].GetApprovalDecided()
		if d.GetApproved() || d.GetEndRun() || d.GetReason() != "the amount is over the limit" || d.GetProposalId() != run.GetPending().GetProposal().GetProposalId() {
			t.Errorf("approval_decided %v, want a rejection with the reason", d)
		}
		wantChange(t, evs[1], stNeedsApproval, stRunning, "write_rejected")
		wantChange(t, evs[len(evs)-1], stRunning, stCompleted, "final_answer")
		for _, name := range []string{"write_dispatched", "write_committed", "write_outcome_unknown"} {
			if n := countPayload(evs, name); n != 0 {
				t.Errorf("a rejected write has %d %s events", n, name)
			}
		}
		if !s.models.sawObservation(run.GetRunId(), "person", "the amount is over the limit") {
			t.Errorf("the model's next call was not shown the rejection's reason: %+v", s.models.requests(run.GetRunId()))
		}
	})
	t.Run("end run", func(t *testing.T) {
		run := s.begin(t, writeContract(refundCall(), final("not refunded")), stNeedsApproval)
		resp, err := s.client.DecideApproval(context.Background(), &reinv1.DecideApprovalRequest{
			RunId: run.GetRunId(), ProposalId: run.GetPending().GetProposal().GetProposalId(),
			ProposalHash: run.GetPending().GetProposal().GetHash(), Verdict: rejectVerdict, Reason: "fraud", EndRun: true,
		})
		if err != nil {
			t.Fatalf("reject and end: %v", err)
		}
		if resp.GetRun().GetStatus() != stDenied {
			t.Fatalf("reject with end_run answered a %v run, want denied", resp.GetRun().GetStatus())
		}
		evs := s.watchToEnd(t, run.GetRunId(), run.GetVersion())
		if got := payloadNames(evs); got != "approval_decided,status_changed" {
			t.Fatalf("after the rejection: %s, want approval_decided,status_changed; log:\n%s", got, logText(evs))
		}
		if d := evs[0].GetApprovalDecided(); d.GetApproved() || !d.GetEndRun() || d.GetReason() != "fraud" {
			t.Errorf("approval_decided %v, want a rejection that ends the run", d)
		}
		wantChange(t, evs[1], stNeedsApproval, stDenied, "write_rejected_run_ended")
		if n := len(s.models.requests(run.GetRunId())); n != 1 {
			t.Errorf("%d model calls, want only the one that proposed the write", n)
		}
		// A denied run takes no more decisions.
		before := s.mark(t, run.GetRunId())
		_, err = s.decide(run, approveVerdict, "")
		wantCode(t, err, codes.FailedPrecondition)
		s.unchanged(t, "an approval of a denied run", before)
	})
	if n := len(s.tools.commitCounts()); n != 0 {
		t.Errorf("rejected writes were committed %d times", n)
	}
}

// TestConcurrentApprovals: of eight approvals of one proposal at once,
// exactly one wins; the others are refused (FailedPrecondition or Aborted),
// and the write is dispatched and committed once.
func TestConcurrentApprovals(t *testing.T) {
	s := newPeopleServer(t, Config{})
	run := s.begin(t, writeContract(refundCall(), final("refunded")), stNeedsApproval)
	const n = 8
	start := make(chan struct{})
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := s.decide(run, approveVerdict, fmt.Sprintf("approver %d", i))
			errs <- err
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	won := 0
	for err := range errs {
		switch codeOf(err) {
		case codes.OK:
			won++
		case codes.FailedPrecondition, codes.Aborted:
		default:
			t.Errorf("a losing approval got %v, want FailedPrecondition or Aborted", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d of %d concurrent approvals succeeded, want exactly 1", won, n)
	}
	evs := s.watchToEnd(t, run.GetRunId(), run.GetVersion())
	for name, want := range map[string]int{"approval_decided": 1, "write_dispatched": 1, "write_committed": 1} {
		if got := countPayload(evs, name); got != want {
			t.Errorf("%d %s events, want %d; log:\n%s", got, name, want, logText(evs))
		}
	}
	wantChange(t, evs[len(evs)-1], stRunning, stCompleted, "final_answer")
	s.tools.wantCommits(t, evs[1].GetWriteDispatched().GetOperationId())
}

// outcome is the part of a run's log after `after`, once DecideApproval
// answered: the payloads and the operation ID of its first write_dispatched.
func (s *peopleServer) outcome(t *testing.T, runID string, after uint64) ([]*reinv1.Event, string) {
	t.Helper()
	evs := s.events(t, runID)[after:]
	for _, ev := range evs {
		if op := ev.GetWriteDispatched().GetOperationId(); op != "" {
			return evs, op
		}
	}
	t.Fatalf("no write_dispatched after %d; log:\n%s", after, logText(evs))
	return nil, ""
}

// TestCommitFailureLeavesOutcomeUnknown: a commit that fails, with a tool
// that cannot look writes up, is recorded as write_outcome_unknown: the run
// stays needs_approval with the proposal pending again and its key kept, and
// nothing sends the write again until a person decides. The twins: the
// person approves again, and the same key is sent once more and the run
// goes on; or rejects, and nothing more is sent.
func TestCommitFailureLeavesOutcomeUnknown(t *testing.T) {
	s := newPeopleServer(t, Config{})
	unknown := func(t *testing.T) (*reinv1.Run, string) {
		t.Helper()
		s.tools.failures.Store(1)
		run := s.begin(t, writeContract(refundCall(), final("refunded")), stNeedsApproval)
		p := run.GetPending().GetProposal()
		resp, err := s.decide(run, approveVerdict, "")
		if err != nil {
			t.Fatalf("approval: %v", err)
		}
		after := resp.GetRun()
		if got := after.GetPending().GetProposal(); after.GetStatus() != stNeedsApproval || got.GetProposalId() != p.GetProposalId() || got.GetHash() != p.GetHash() {
			t.Fatalf("after a failed commit the run is %v with pending %v, want needs_approval with proposal %s pending again",
				after.GetStatus(), after.GetPending(), p.GetProposalId())
		}
		evs, op := s.outcome(t, run.GetRunId(), run.GetVersion())
		if got := payloadNames(evs); got != "approval_decided,write_dispatched,write_outcome_unknown" {
			t.Fatalf("after the approval: %s, want approval_decided,write_dispatched,write_outcome_unknown; log:\n%s", got, logText(evs))
		}
		if u := evs[2].GetWriteOutcomeUnknown(); u.GetOperationId() != op || u.GetProposalId() != p.GetProposalId() || !strings.Contains(u.GetError(), "connection reset") {
			t.Errorf("write_outcome_unknown %v, want operation %s and the commit's error", u, op)
		}
		if after.GetWriteOperationId() != op || after.GetApprovedWrite().GetProposalId() != p.GetProposalId() {
			t.Errorf("the run shows approved write %v with key %q, want proposal %s with key %s",
				after.GetApprovedWrite().GetProposalId(), after.GetWriteOperationId(), p.GetProposalId(), op)
		}
		if stored := s.get(t, run.GetRunId()); !proto.Equal(stored, after) {
			t.Errorf("DecideApproval answered a run that differs from the stored one:\nanswer: %v\nstored: %v", after, stored)
		}
		if n := s.tools.commitCounts()[op]; n != 1 {
			t.Fatalf("operation %s committed %d times, want once", op, n)
		}
		// Nothing else is accepted meanwhile.
		before := s.mark(t, run.GetRunId())
		_, err = s.client.ProvideInput(context.Background(), &reinv1.ProvideInputRequest{RunId: run.GetRunId(), Text: "go on"})
		wantCode(t, err, codes.FailedPrecondition)
		s.unchanged(t, "input after an unknown outcome", before)
		_, err = s.client.DecideApproval(context.Background(), &reinv1.DecideApprovalRequest{
			RunId: run.GetRunId(), ProposalId: p.GetProposalId(), ProposalHash: "stale", Verdict: approveVerdict,
		})
		wantCode(t, err, codes.FailedPrecondition)
		s.unchanged(t, "an approval with a wrong hash after an unknown outcome", before)
		if err := s.node.Engine.Wait(context.Background(), run.GetRunId()); err != nil {
			t.Fatal(err)
		}
		s.unchanged(t, "the engine, after an unknown outcome", before)
		if n := s.tools.commitCounts()[op]; n != 1 {
			t.Fatalf("operation %s committed %d times before a person decided again, want once", op, n)
		}
		return after, op
	}
	t.Run("approve again", func(t *testing.T) {
		run, op := unknown(t)
		if _, err := s.decide(run, approveVerdict, "checked: not applied"); err != nil {
			t.Fatalf("second approval: %v", err)
		}
		evs := s.watchToEnd(t, run.GetRunId(), run.GetVersion())
		const head = "approval_decided,write_dispatched,write_committed,status_changed"
		if len(evs) < 4 || payloadNames(evs[:4]) != head {
			t.Fatalf("after the second approval: %s, want %s first; log:\n%s", payloadNames(evs), head, logText(evs))
		}
		if got := evs[1].GetWriteDispatched().GetOperationId(); got != op {
			t.Errorf("the second dispatch has key %q, want the first's %s", got, op)
		}
		wantChange(t, evs[3], stNeedsApproval, stRunning, "write_committed")
		wantChange(t, evs[len(evs)-1], stRunning, stCompleted, "final_answer")
		if n := s.tools.commitCounts()[op]; n != 2 {
			t.Errorf("operation %s committed %d times, want twice (once per approval)", op, n)
		}
	})
	t.Run("reject", func(t *testing.T) {
		run, op := unknown(t)
		if _, err := s.decide(run, rejectVerdict, "refunded by hand"); err != nil {
			t.Fatalf("rejection: %v", err)
		}
		evs := s.watchToEnd(t, run.GetRunId(), run.GetVersion())
		if got := payloadNames(evs); !strings.HasPrefix(got, "approval_decided,status_changed,model_requested") || countPayload(evs, "write_dispatched") != 0 {
			t.Fatalf("after the rejection: %s; log:\n%s", got, logText(evs))
		}
		wantChange(t, evs[1], stNeedsApproval, stRunning, "write_rejected")
		wantChange(t, evs[len(evs)-1], stRunning, stCompleted, "final_answer")
		if n := s.tools.commitCounts()[op]; n != 1 {
			t.Errorf("operation %s committed %d times, want once", op, n)
		}
	})
}

// TestUnknownOutcomeKeepsDeadline: a run left needs_approval by an unknown
// outcome is still paused, so its deadline still ends it (docs/design.md §2:
// needs_approval → budget_exhausted when the deadline passes while waiting).
func TestUnknownOutcomeKeepsDeadline(t *testing.T) {
	s := newPeopleServer(t, Config{})
	s.tools.failures.Store(1)
	run := s.begin(t, withTimeout(writeContract(refundCall(), final("refunded")), 3*time.Second), stNeedsApproval)
	resp, err := s.decide(run, approveVerdict, "")
	if err != nil {
		t.Fatalf("approval: %v", err)
	}
	if resp.GetRun().GetStatus() != stNeedsApproval {
		t.Fatalf("after a failed commit the run is %v, want needs_approval", resp.GetRun().GetStatus())
	}
	evs := s.watchToEnd(t, run.GetRunId(), resp.GetRun().GetVersion())
	if got := payloadNames(evs); got != "budget_reached,status_changed" {
		t.Fatalf("after the deadline: %s, want budget_reached,status_changed", got)
	}
	wantChange(t, evs[1], stNeedsApproval, stExhausted, "deadline")
	if n := len(s.tools.commitCounts()); n != 1 {
		t.Errorf("%d operations committed, want the one", n)
	}
}

// TestCancelDuringCommitKeepsOutcome: a run cancelled while its approved
// write is being committed still records the write's outcome: a write that
// happened is never missing from the log (docs/design.md §3, §7).
func TestCancelDuringCommitKeepsOutcome(t *testing.T) {
	s := newPeopleServer(t, Config{})
	gate := &commitGate{entered: make(chan string, 1), release: make(chan struct{})}
	s.tools.gate.Store(gate)
	run := s.begin(t, writeContract(refundCall(), final("refunded")), stNeedsApproval)
	decided := make(chan error, 1)
	go func() {
		_, err := s.decide(run, approveVerdict, "")
		decided <- err
	}()
	var op string
	select {
	case op = <-gate.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the approved write was not committed within 10s")
	}
	cancelled := make(chan error, 1)
	go func() {
		_, err := s.client.CancelRun(context.Background(), &reinv1.CancelRunRequest{RunId: run.GetRunId(), Reason: "stop"})
		cancelled <- err
	}()
	// Let the commit answer once the cancel returned, or after a while if
	// the cancel waits for the write.
	var cerr error
	cancelReturned := false
	select {
	case cerr = <-cancelled:
		cancelReturned = true
	case <-time.After(500 * time.Millisecond):
	}
	close(gate.release)
	derr := <-decided
	if !cancelReturned {
		cerr = <-cancelled
	}
	evs := s.events(t, run.GetRunId())
	if n := s.tools.commitCounts()[op]; n != 1 {
		t.Fatalf("operation %s committed %d times, want once", op, n)
	}
	if countPayload(evs, "write_committed")+countPayload(evs, "write_outcome_unknown") != 1 {
		t.Errorf("the write was committed but the log has no outcome for it (approval: %v; cancel: %v); log:\n%s", derr, cerr, logText(evs))
	}
}
