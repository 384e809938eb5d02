package slackapp_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	rsecret "github.com/reinhq/rein/internal/secret"
	"github.com/reinhq/rein/internal/slackapp"
	"github.com/reinhq/rein/internal/webhook"
)

var (
	stRunning  = reinv1.RunStatus_RUN_STATUS_RUNNING
	stApproval = reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL
	stDone     = reinv1.RunStatus_RUN_STATUS_COMPLETED
)

// deliveries is what webhook's matcher makes of a run going from running
// to to, with a proposal pending when to is needs_approval.
func deliveries(t *testing.T, to reinv1.RunStatus, p *reinv1.Proposal) []*reinv1.WebhookDelivery {
	t.Helper()
	before := &runstate.State{RunID: "run_01", Tenant: "acme", Principal: "bob", Status: stRunning}
	after := &runstate.State{RunID: "run_01", Tenant: "acme", Principal: "bob", Status: to, StatusReason: "the answer is in"}
	if p != nil {
		after.Pending = &reinv1.PendingAction{Action: &reinv1.PendingAction_Proposal{Proposal: p}}
	}
	ev := &reinv1.Event{RunId: "run_01", Sequence: 7, RecordedAt: timestamppb.New(time.Unix(1700000000, 0)),
		Payload: &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{From: stRunning, To: to, Reason: "the answer is in"}}}
	m := &webhook.Matcher{PublicURL: "https://rein.example.com", Secrets: rsecret.New(map[string]string{"STRIPE": "sk-live-0123456789abcdef"})}
	return m.Match([]*reinv1.Webhook{{Name: "chat", Format: reinv1.WebhookFormat_WEBHOOK_FORMAT_SLACK}}, before, after, []*reinv1.Event{ev})
}

func proposal(t *testing.T) *reinv1.Proposal {
	t.Helper()
	args, err := structpb.NewStruct(map[string]any{"invoice_id": "INV-42", "amount": 1200, "note": "key sk-live-0123456789abcdef"})
	if err != nil {
		t.Fatal(err)
	}
	preview, _ := structpb.NewValue(map[string]any{"refund": "1200.00 EUR to ACME"})
	return &reinv1.Proposal{ProposalId: "prop_01", Tool: "refunds.create", Arguments: args, Preview: preview, Hash: strings.Repeat("ab", 32),
		ExpiresAt: timestamppb.New(time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)), PolicyMessage: "A refund above 1,000 EUR needs a person."}
}

// blocksOf is a rendered message's blocks and every text in them.
func blocksOf(t *testing.T, body []byte) ([]renderedBlock, string) {
	t.Helper()
	var m slackMessage
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("the body is not a Slack message: %v\n%s", err, body)
	}
	var blocks []renderedBlock
	var all strings.Builder
	for _, raw := range m.Blocks {
		var b renderedBlock
		if err := json.Unmarshal(raw, &b); err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, b)
		all.WriteString(b.texts() + "\n")
	}
	return blocks, all.String()
}

// TestDeliveryOfAPause: a slack subscription's delivery of a run paused
// for approval is the Block Kit message of the proposal in its body, the
// buttons carrying its hash, secrets redacted.
func TestDeliveryOfAPause(t *testing.T) {
	ds := deliveries(t, stApproval, proposal(t))
	if len(ds) != 1 {
		t.Fatalf("deliveries = %v", ds)
	}
	body, ctype, err := slackapp.Delivery(ds[0])
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "application/json" {
		t.Errorf("content type %q", ctype)
	}
	blocks, text := blocksOf(t, body)
	for _, want := range []string{"Approval needed: refunds.create", "*bob*", "A refund above 1,000 EUR needs a person.",
		"*invoice_id*\nINV-42", "*amount*\n1200", "1200.00 EUR to ACME", "|open in the console>", "<!date^1796644800^"} {
		if !strings.Contains(text, want) {
			t.Errorf("the message does not show %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "sk-live-0123456789abcdef") {
		t.Errorf("the message shows a secret:\n%s", text)
	}
	last := blocks[len(blocks)-1]
	if last.Type != "actions" || len(last.Elements) != 2 || last.Elements[0].ActionID != slackapp.ActionApprove || last.Elements[1].ActionID != slackapp.ActionDeny {
		t.Fatalf("the last block is %+v, want the Approve and Deny buttons", last)
	}
	var v map[string]string
	if err := json.Unmarshal([]byte(last.Elements[1].Value), &v); err != nil {
		t.Fatal(err)
	}
	if v["hash"] != strings.Repeat("ab", 32) || v["proposal"] != "prop_01" || v["run"] != "run_01" || v["tenant"] != "acme" {
		t.Errorf("the buttons carry %v", v)
	}
}

// TestDeliveryOfARevision: a revision of the proposal a run waits on,
// chosen by its event kind, is a message of the revised proposal whose
// buttons carry the new hash.
func TestDeliveryOfARevision(t *testing.T) {
	p := proposal(t)
	p.ProposalId, p.Hash = "prop_02", strings.Repeat("cd", 32)
	st := &runstate.State{RunID: "run_01", Tenant: "acme", Principal: "bob", Status: stApproval,
		Pending: &reinv1.PendingAction{Action: &reinv1.PendingAction_Proposal{Proposal: p}}}
	ev := &reinv1.Event{RunId: "run_01", Sequence: 9, Payload: &reinv1.Event_ProposalRevised{ProposalRevised: &reinv1.ProposalRevised{
		SupersededProposalId: "prop_01", Proposal: p}}}
	ds := (&webhook.Matcher{}).Match([]*reinv1.Webhook{{Name: "chat", EventKinds: []string{"proposal_revised"}}}, st, st, []*reinv1.Event{ev})
	if len(ds) != 1 || ds[0].GetType() != "event.proposal_revised" {
		t.Fatalf("deliveries = %v", ds)
	}
	body, _, err := slackapp.Delivery(ds[0])
	if err != nil {
		t.Fatal(err)
	}
	blocks, _ := blocksOf(t, body)
	last := blocks[len(blocks)-1]
	if last.Type != "actions" || !strings.Contains(last.Elements[0].Value, strings.Repeat("cd", 32)) {
		t.Fatalf("the last block is %+v, want buttons carrying the revised proposal's hash", last)
	}
}

// TestDeliveryOfAnEnd: a delivery that asks no decision is a notice with
// no buttons: what the run became and why, and the console link.
func TestDeliveryOfAnEnd(t *testing.T) {
	ds := deliveries(t, stDone, nil)
	if len(ds) != 1 {
		t.Fatalf("deliveries = %v", ds)
	}
	body, _, err := slackapp.Delivery(ds[0])
	if err != nil {
		t.Fatal(err)
	}
	blocks, text := blocksOf(t, body)
	for _, want := range []string{"`run_01` (tenant acme) is now *completed*, was running.", "the answer is in", "*bob*", "|open in the console>"} {
		if !strings.Contains(text, want) {
			t.Errorf("the notice does not show %q:\n%s", want, text)
		}
	}
	for _, b := range blocks {
		if b.Type == "actions" {
			t.Fatalf("a notice of a run that ended has buttons: %+v", b)
		}
	}
}

// TestDeliveryRefused: a body that is not a delivery's, and an approval
// whose proposal lost its hash, are refused with what is wrong: no message
// is sent whose buttons could not bind a decision.
func TestDeliveryRefused(t *testing.T) {
	noHash := proposal(t)
	noHash.Hash = ""
	for _, c := range []struct {
		name string
		d    *reinv1.WebhookDelivery
		want string
	}{
		{"not JSON", &reinv1.WebhookDelivery{Id: "msg_1", Body: []byte("<html>")}, "not a webhook payload"},
		{"no type", &reinv1.WebhookDelivery{Id: "msg_2", Body: []byte(`{"data":{}}`)}, "has no type"},
		{"an approval without its hash", deliveries(t, stApproval, noHash)[0], "proposal hash"},
	} {
		t.Run(c.name, func(t *testing.T) {
			body, _, err := slackapp.Delivery(c.d)
			if err == nil || !strings.Contains(err.Error(), c.want) || body != nil {
				t.Fatalf("Delivery = %q, %v; want no body and an error saying %q", body, err, c.want)
			}
		})
	}
}
