package slackapp_test

// Tests of the Slack face against a fake Slack: it signs its action posts
// as Slack documents (api.slack.com/authentication/verifying-requests-from-slack),
// with its own HMAC code rather than the package's, posts them to the
// handler in front of a real node (facetest's refund task on a temporary
// bbolt file), and receives the handler's updates on its response_url.
// Every refused click is checked to change no stored byte and, when it is
// not Slack's, to post nothing.

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/auth"
	"github.com/reinhq/rein/internal/slackapp"
	"github.com/reinhq/rein/server/facetest"
)

// TestClickApprovesOnce: a signed click on Approve by a mapped approver
// approves the write once, the run carries on to its end, and the message
// is replaced by one without buttons saying who approved. The same post
// again is refused as a replay, and a fresh click on the old message is
// told the proposal is no longer pending.
func TestClickApprovesOnce(t *testing.T) {
	s := newSlack(t, nil)
	run := s.start(t)
	blocks, value := message(t, run)
	c := click{user: "U_ALICE", action: slackapp.ActionApprove, value: value, blocks: blocks}
	body := s.body(c)
	headers := signed(body, time.Now())
	if code := s.send(t, body, headers); code != http.StatusOK {
		t.Fatalf("the click: HTTP %d, want 200", code)
	}
	got := s.next(t)
	if !replaces(got.msg) || buttonValue(t, got.msg.Blocks) != "" || !strings.Contains(outcome(t, got.msg), "Approved by alice") {
		t.Fatalf("the update after the approval: replace %v, buttons %q, outcome %q; want the message replaced, no buttons, approved by alice",
			replaces(got.msg), buttonValue(t, got.msg.Blocks), outcome(t, got.msg))
	}
	if len(got.msg.Blocks) != len(blocks) {
		t.Errorf("the update has %d blocks, want the message's %d with the outcome in place of the buttons", len(got.msg.Blocks), len(blocks))
	}
	ended := s.waitFor(t, run.GetRunId(), reinv1.RunStatus_RUN_STATUS_COMPLETED, run.GetVersion())
	resp, err := s.runs.ListEvents(facetest.As(deadline(t), "starter"), &reinv1.ListEventsRequest{RunId: run.GetRunId(), PageSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	committed, decidedBy := 0, ""
	for _, ev := range resp.GetEvents() {
		if ev.GetWriteCommitted() != nil {
			committed++
		}
		if ev.GetApprovalDecided() != nil {
			decidedBy = ev.GetActor()
		}
	}
	if committed != 1 || decidedBy != "principal:alice" {
		t.Fatalf("%d writes committed, approval decided by %q; want 1, by principal:alice", committed, decidedBy)
	}

	m := s.mark(t, ended.GetRunId())
	if code := s.send(t, body, headers); code != http.StatusUnauthorized {
		t.Errorf("the same signed post again: HTTP %d, want 401 (a replay)", code)
	}
	s.nothingPosted(t, "a replay")
	again := s.clickNow(t, click{user: "U_CAROL", action: slackapp.ActionApprove, value: value, blocks: blocks})
	if !replaces(again.msg) || !strings.Contains(outcome(t, again.msg), "no longer pending") || buttonValue(t, again.msg.Blocks) != "" {
		t.Errorf("a fresh click on the decided message: replace %v, outcome %q; want the message replaced, saying it is no longer pending", replaces(again.msg), outcome(t, again.msg))
	}
	s.unchanged(t, "clicks after the decision", m)
}

// TestClicksNotFromSlackAreRefused: a click without a signature, with a
// signature by another secret or of another body, or signed more than five
// minutes before or after now, is answered 401, decides nothing and posts
// nothing.
func TestClicksNotFromSlackAreRefused(t *testing.T) {
	s := newSlack(t, nil)
	run := s.start(t)
	blocks, value := message(t, run)
	body := s.body(click{user: "U_ALICE", action: slackapp.ActionApprove, value: value, blocks: blocks})
	now := time.Now()
	ts := strconv.FormatInt(now.Unix(), 10)
	m := s.mark(t, run.GetRunId())
	for _, tc := range []struct {
		name    string
		headers map[string]string
	}{
		{"unsigned", nil},
		{"a timestamp without a signature", map[string]string{"X-Slack-Request-Timestamp": ts}},
		{"signed by another secret", map[string]string{"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": sign("not-the-secret", ts, body)}},
		{"signed for another body", map[string]string{"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": sign(secret, ts, []byte("payload=%7B%7D"))}},
		{"signed for another timestamp", map[string]string{"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": sign(secret, strconv.FormatInt(now.Unix()-1, 10), body)}},
		{"a v1 signature", map[string]string{"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": "v1=" + strings.TrimPrefix(sign(secret, ts, body), "v0=")}},
		{"signed six minutes ago", signed(body, now.Add(-6*time.Minute))},
		{"signed six minutes ahead", signed(body, now.Add(6*time.Minute))},
		{"a timestamp that is not a number", map[string]string{"X-Slack-Request-Timestamp": "soon", "X-Slack-Signature": sign(secret, "soon", body)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if code := s.send(t, body, tc.headers); code != http.StatusUnauthorized {
				t.Errorf("HTTP %d, want 401", code)
			}
			s.nothingPosted(t, tc.name)
			s.unchanged(t, tc.name, m)
		})
	}
	// The twin: the same body, signed now, decides.
	if code := s.send(t, body, signed(body, now)); code != http.StatusOK {
		t.Fatalf("the click signed now: HTTP %d, want 200", code)
	}
	if got := s.next(t); !strings.Contains(outcome(t, got.msg), "Approved by alice") {
		t.Fatalf("the click signed now: outcome %q, want approved by alice", outcome(t, got.msg))
	}
}

// TestResponseURLMustBeSlacks: a signed click whose response_url is not
// one the handler may post to decides nothing, and nothing is posted.
func TestResponseURLMustBeSlacks(t *testing.T) {
	s := newSlack(t, nil)
	run := s.start(t)
	blocks, value := message(t, run)
	m := s.mark(t, run.GetRunId())
	for _, u := range []string{"http://169.254.169.254/latest/meta-data/", "https://hooks.slack.com.evil.example/x", "https://hooks.slack.com/actions/x"} {
		body := s.body(click{user: "U_ALICE", action: slackapp.ActionApprove, value: value, blocks: blocks, responseURL: u})
		if code := s.send(t, body, signed(body, time.Now())); code != http.StatusBadRequest {
			t.Errorf("response_url %s: HTTP %d, want 400", u, code)
		}
	}
	s.nothingPosted(t, "clicks with another response_url")
	s.unchanged(t, "clicks with another response_url", m)
}

// TestStaleClickIsRefused: after a revision, a click on the message of
// the proposal as it was is refused, decides nothing, and the message says
// the proposal changed and who revised it.
func TestStaleClickIsRefused(t *testing.T) {
	s := newSlack(t, nil)
	run := s.start(t)
	blocks, value := message(t, run)
	p := run.GetPending().GetProposal()
	args := p.GetArguments().AsMap()
	args["amount"] = "600.00"
	revised, _ := structpb.NewStruct(args)
	if _, err := s.runs.DecideApproval(facetest.As(deadline(t), "alice"), &reinv1.DecideApprovalRequest{
		RunId: run.GetRunId(), ProposalId: p.GetProposalId(), ProposalHash: p.GetHash(),
		Verdict: reinv1.ApprovalVerdict_APPROVAL_VERDICT_REVISE, Arguments: revised, Reason: "half of it",
	}); err != nil {
		t.Fatal(err)
	}
	now := s.get(t, run.GetRunId())
	if now.GetPending().GetProposal().GetHash() == p.GetHash() {
		t.Fatal("the revision kept the proposal's hash")
	}
	m := s.mark(t, run.GetRunId())
	got := s.clickNow(t, click{user: "U_CAROL", action: slackapp.ActionApprove, value: value, blocks: blocks})
	if !replaces(got.msg) || buttonValue(t, got.msg.Blocks) != "" || !strings.Contains(outcome(t, got.msg), "changed since this message was sent: alice revised it") {
		t.Errorf("a click on the stale message: replace %v, outcome %q; want the message replaced, saying alice revised the proposal", replaces(got.msg), outcome(t, got.msg))
	}
	s.unchanged(t, "a click on the stale message", m)

	// The twin: the revision's own message decides.
	blocks, value = message(t, now)
	if got := s.clickNow(t, click{user: "U_CAROL", action: slackapp.ActionApprove, value: value, blocks: blocks}); !strings.Contains(outcome(t, got.msg), "Approved by carol") {
		t.Fatalf("a click on the revision's message: outcome %q, want approved by carol", outcome(t, got.msg))
	}
	s.waitFor(t, run.GetRunId(), reinv1.RunStatus_RUN_STATUS_COMPLETED, m.run.GetVersion())
}

// TestWhoMayNotDecide: a Slack user the users file does not map, a mapped
// user without the approver role, one of another tenant, and the run's
// starter when the contract forbids approving one's own run are told why
// (the unmapped one whom to ask) in a reply to them alone, and decide
// nothing; the message keeps its buttons.
func TestWhoMayNotDecide(t *testing.T) {
	s := newSlack(t, func(task map[string]any) {
		task["approval"].(map[string]any)["forbid_self_approval"] = true
	})
	run := s.start(t)
	blocks, value := message(t, run)
	m := s.mark(t, run.GetRunId())
	for _, tc := range []struct {
		name, user, action string
		want               []string
	}{
		{"an unmapped user", "U_NOBODY", slackapp.ActionApprove, []string{"not mapped to a rein principal", "#rein-admins", `"user_id": "U_NOBODY"`}},
		{"an unmapped user's deny", "U_NOBODY", slackapp.ActionDeny, []string{"not mapped to a rein principal"}},
		{"a user without the approver role", "U_VIC", slackapp.ActionApprove, []string{"refused", `"vic"`, "approver role"}},
		{"a user of another tenant", "U_GUS", slackapp.ActionApprove, []string{"tenant globex", "tenant acme"}},
		{"the run's starter", "U_STARTER", slackapp.ActionApprove, []string{"refused", "forbids approving a write of a run one started"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := s.clickNow(t, click{user: tc.user, action: tc.action, value: value, blocks: blocks})
			if got.msg.ResponseType != "ephemeral" || replaces(got.msg) {
				t.Errorf("the reply is %q, replace_original %v; want an ephemeral reply that leaves the message", got.msg.ResponseType, replaces(got.msg))
			}
			for _, w := range tc.want {
				if !strings.Contains(got.msg.Text, w) {
					t.Errorf("the reply %q does not say %q", got.msg.Text, w)
				}
			}
			s.unchanged(t, tc.name, m)
		})
	}
	// The twin: another approver of the tenant decides.
	if got := s.clickNow(t, click{user: "U_ALICE", action: slackapp.ActionDeny, value: value, blocks: blocks}); !strings.Contains(outcome(t, got.msg), "Denied by alice") {
		t.Fatalf("alice's deny: outcome %q, want denied by alice", outcome(t, got.msg))
	}
}

// TestTwoApprovers: of a write that needs two approvers, the first click
// leaves the run waiting and the message, buttons kept, says who else must
// approve; a second click by the same person counts once; another
// approver's click on the updated message approves, and the run goes on.
func TestTwoApprovers(t *testing.T) {
	s := newSlack(t, func(task map[string]any) {
		task["tools"].([]any)[1].(map[string]any)["approvals"] = 2
	})
	run := s.start(t)
	blocks, value := message(t, run)
	first := s.clickNow(t, click{user: "U_ALICE", action: slackapp.ActionApprove, value: value, blocks: blocks})
	note := outcome(t, first.msg)
	for _, w := range []string{"Approved by alice", "1 of 2 approvals", "not starter (who started the run), alice"} {
		if !strings.Contains(note, w) {
			t.Errorf("the update after the first approval says %q, not %q", note, w)
		}
	}
	if !replaces(first.msg) || buttonValue(t, first.msg.Blocks) != value {
		t.Fatalf("the update after the first approval: replace %v, buttons %q; want the message replaced with its buttons", replaces(first.msg), buttonValue(t, first.msg.Blocks))
	}
	waiting := s.get(t, run.GetRunId())
	if waiting.GetStatus() != reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL || strings.Join(waiting.GetPending().GetProposal().GetApprovedBy(), ",") != "alice" {
		t.Fatalf("after one approval the run is %v, approved by %v; want waiting, approved by alice", waiting.GetStatus(), waiting.GetPending().GetProposal().GetApprovedBy())
	}
	m := s.mark(t, run.GetRunId())
	s.clickNow(t, click{user: "U_ALICE", action: slackapp.ActionApprove, value: value, blocks: first.msg.Blocks})
	s.unchanged(t, "alice's second approval", m)

	second := s.clickNow(t, click{user: "U_CAROL", action: slackapp.ActionApprove, value: value, blocks: first.msg.Blocks})
	if o := outcome(t, second.msg); !strings.Contains(o, "Approved by carol") || strings.Contains(o, "must approve") || buttonValue(t, second.msg.Blocks) != "" {
		t.Errorf("the update after the second approval: outcome %q, buttons %q; want approved by carol, no buttons", o, buttonValue(t, second.msg.Blocks))
	}
	s.waitFor(t, run.GetRunId(), reinv1.RunStatus_RUN_STATUS_COMPLETED, m.run.GetVersion())
}

// TestNotAClick: a signed interaction that is not a click of rein's
// buttons is answered 200 and does nothing; a body that is not Slack's is
// 400.
func TestNotAClick(t *testing.T) {
	s := newSlack(t, nil)
	for _, tc := range []struct {
		name    string
		payload string
		code    int
	}{
		{"a view submission", `{"type": "view_submission", "user": {"id": "U_ALICE", "team_id": "T0REIN"}}`, http.StatusOK},
		{"another app's button", `{"type": "block_actions", "user": {"id": "U_ALICE", "team_id": "T0REIN"}, "actions": [{"action_id": "other", "value": "x"}]}`, http.StatusOK},
		{"a value that is not rein's", `{"type": "block_actions", "user": {"id": "U_ALICE", "team_id": "T0REIN"}, "response_url": "` + s.hooks.URL + `/x", "actions": [{"action_id": "rein_approve", "value": "x"}]}`, http.StatusBadRequest},
		{"not JSON", `{`, http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := []byte(url.Values{"payload": {tc.payload}}.Encode())
			if code := s.send(t, body, signed(body, time.Now())); code != tc.code {
				t.Errorf("HTTP %d, want %d", code, tc.code)
			}
			s.nothingPosted(t, tc.name)
		})
	}
}

// heldRuns holds each decision until the test lets it go.
type heldRuns struct {
	slackapp.Runs
	release chan struct{}
}

func (h heldRuns) DecideApprovalAs(ctx context.Context, p auth.Principal, req *reinv1.DecideApprovalRequest) (*reinv1.DecideApprovalResponse, error) {
	select {
	case <-h.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return h.Runs.DecideApprovalAs(ctx, p, req)
}

// TestSlowDecisionIsAcknowledged: a decision slower than AckAfter is
// answered 200 before it is made (Slack wants an answer within 3 s), and
// its outcome is posted to the response_url once it is. The twin: the
// decision is made, and the run carries on.
func TestSlowDecisionIsAcknowledged(t *testing.T) {
	release := make(chan struct{})
	s := newSlack(t, nil, func(o *slackapp.Options) {
		o.Runs = heldRuns{Runs: o.Runs, release: release}
		o.AckAfter = time.Millisecond
	})
	run := s.start(t)
	blocks, value := message(t, run)
	body := s.body(click{user: "U_ALICE", action: slackapp.ActionApprove, value: value, blocks: blocks})
	if code := s.send(t, body, signed(body, time.Now())); code != http.StatusOK {
		t.Fatalf("a held click: HTTP %d, want 200 before the decision", code)
	}
	s.nothingPosted(t, "a decision not made yet")
	if got := s.get(t, run.GetRunId()); got.GetStatus() != reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL {
		t.Fatalf("the run is %v before the decision was let go", got.GetStatus())
	}
	close(release)
	if got := s.next(t); !strings.Contains(outcome(t, got.msg), "Approved by alice") {
		t.Fatalf("the outcome posted after the decision: %q, want approved by alice", outcome(t, got.msg))
	}
	s.waitFor(t, run.GetRunId(), reinv1.RunStatus_RUN_STATUS_COMPLETED, run.GetVersion())
}
