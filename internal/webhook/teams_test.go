package webhook

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/secret"
)

// teamsCard is the part of a Teams message the tests read.
type teamsCard struct {
	Type        string `json:"type"`
	Attachments []struct {
		ContentType string `json:"contentType"`
		Content     struct {
			Type    string            `json:"type"`
			Version string            `json:"version"`
			Body    []json.RawMessage `json:"body"`
			Actions []struct {
				Type  string `json:"type"`
				Title string `json:"title"`
				URL   string `json:"url"`
			} `json:"actions"`
		} `json:"content"`
	} `json:"attachments"`
}

// teamsDelivery is the delivery the matcher makes of a run going from
// running to to (a proposal pending when to is needs_approval), with the
// console at publicURL ("" for none).
func teamsDelivery(t *testing.T, to reinv1.RunStatus, publicURL string) *reinv1.WebhookDelivery {
	t.Helper()
	before := &runstate.State{RunID: "run_01", Tenant: "acme", Principal: "bob", Status: reinv1.RunStatus_RUN_STATUS_RUNNING}
	after := &runstate.State{RunID: "run_01", Tenant: "acme", Principal: "bob", Status: to}
	if to == reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL {
		args, err := structpb.NewStruct(map[string]any{"invoice_id": "INV-42", "note": "key sk-live-0123456789abcdef"})
		if err != nil {
			t.Fatal(err)
		}
		preview, _ := structpb.NewValue(map[string]any{"refund": "1200.00 EUR to ACME"})
		after.Pending = &reinv1.PendingAction{Action: &reinv1.PendingAction_Proposal{Proposal: &reinv1.Proposal{
			ProposalId: "prop_01", Tool: "refunds.create", Arguments: args, Preview: preview, Hash: strings.Repeat("ab", 32),
			ExpiresAt: timestamppb.New(time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)), PolicyMessage: "A refund above 1,000 EUR needs a person.",
		}}}
	}
	ev := &reinv1.Event{RunId: "run_01", Sequence: 7, RecordedAt: timestamppb.New(time.Unix(1700000000, 0)),
		Payload: &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{From: before.Status, To: to, Reason: "done"}}}
	m := &Matcher{PublicURL: publicURL, Secrets: secret.New(map[string]string{"STRIPE": "sk-live-0123456789abcdef"})}
	ds := m.Match([]*reinv1.Webhook{{Name: "teams", Format: reinv1.WebhookFormat_WEBHOOK_FORMAT_TEAMS}}, before, after, []*reinv1.Event{ev})
	if len(ds) != 1 {
		t.Fatalf("%d deliveries, want 1", len(ds))
	}
	return ds[0]
}

func renderTeams(t *testing.T, d *reinv1.WebhookDelivery) (teamsCard, string) {
	t.Helper()
	body, ctype, err := Teams(d)
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "application/json" {
		t.Errorf("content type %q, want application/json", ctype)
	}
	var c teamsCard
	if err := json.Unmarshal(body, &c); err != nil {
		t.Fatalf("the body is not JSON: %v\n%s", err, body)
	}
	if c.Type != "message" || len(c.Attachments) != 1 || c.Attachments[0].ContentType != "application/vnd.microsoft.card.adaptive" ||
		c.Attachments[0].Content.Type != "AdaptiveCard" {
		t.Fatalf("not a Teams message with one Adaptive Card:\n%s", body)
	}
	return c, string(body)
}

// TestTeamsCardShowsTheDecision: a pause for approval becomes a card with
// the tool, the arguments (secrets redacted), the preview, the policy's
// message, the expiry and the hash, and a button to the run in the
// console; no secret reaches the card.
func TestTeamsCardShowsTheDecision(t *testing.T) {
	c, body := renderTeams(t, teamsDelivery(t, reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL, "https://rein.example.com/"))
	for _, want := range []string{"refunds.create", "INV-42", "1200.00 EUR to ACME", "A refund above 1,000 EUR needs a person.",
		"2026-12-07T12:00:00Z", strings.Repeat("ab", 32), "prop_01", "bob"} {
		if !strings.Contains(body, want) {
			t.Errorf("the card lacks %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, "sk-live-0123456789abcdef") {
		t.Errorf("a secret reached the card:\n%s", body)
	}
	acts := c.Attachments[0].Content.Actions
	if len(acts) != 1 || acts[0].Type != "Action.OpenUrl" || acts[0].URL != "https://rein.example.com/#/runs/run_01" {
		t.Errorf("actions %+v, want one Action.OpenUrl to the run in the console", acts)
	}
}

// TestTeamsCardWithoutAConsole: with no --public-url the card has no
// button and says how to decide from the CLI instead.
func TestTeamsCardWithoutAConsole(t *testing.T) {
	c, body := renderTeams(t, teamsDelivery(t, reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL, ""))
	if len(c.Attachments[0].Content.Actions) != 0 {
		t.Errorf("a card with no console to link to has actions: %s", body)
	}
	if !strings.Contains(body, "rein approve run_01 --hash "+strings.Repeat("ab", 32)) {
		t.Errorf("the card does not say how to decide without the console:\n%s", body)
	}
}

// TestTeamsNotice: a status change that asks nothing is a notice of it,
// with no proposal in it.
func TestTeamsNotice(t *testing.T) {
	_, body := renderTeams(t, teamsDelivery(t, reinv1.RunStatus_RUN_STATUS_COMPLETED, "https://rein.example.com"))
	if !strings.Contains(body, "Run run_01 is completed") || !strings.Contains(body, `"running"`) {
		t.Errorf("the notice does not say what became of the run:\n%s", body)
	}
	if strings.Contains(body, "Hash") || strings.Contains(body, "decide") {
		t.Errorf("a notice of a completed run asks a decision:\n%s", body)
	}
}

// TestTeamsRefusesWhatIsNotADelivery is the twin: a body that is not a
// delivery's payload, or one with no type, is refused rather than posted.
func TestTeamsRefusesWhatIsNotADelivery(t *testing.T) {
	for _, body := range []string{"not json", `{"data":{"run_id":"run_01"}}`} {
		if _, _, err := Teams(&reinv1.WebhookDelivery{Id: "msg_1", Body: []byte(body)}); err == nil {
			t.Errorf("Teams(%q) rendered, want an error", body)
		}
	}
}

// TestSendTeams: a subscription of format teams is sent the card, signed
// as any delivery is (over the card's bytes).
func TestSendTeams(t *testing.T) {
	got := make(chan *http.Request, 1)
	bodies := make(chan []byte, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- r
		bodies <- b
	}))
	defer srv.Close()
	d := teamsDelivery(t, reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL, "https://rein.example.com")
	w := sub(srv.URL)
	w.Format = reinv1.WebhookFormat_WEBHOOK_FORMAT_TEAMS
	if a := testSender(NewClient(true, Timeouts{})).Send(context.Background(), w, d); a.Err != nil {
		t.Fatal(a.Err)
	}
	r, body := <-got, <-bodies
	want, _, _ := Teams(d)
	if string(body) != string(want) {
		t.Fatalf("sent %s, want the card %s", body, want)
	}
	var ts int64
	if _, err := fmtSscan(r.Header.Get("webhook-timestamp"), &ts); err != nil {
		t.Fatal(err)
	}
	if sig, _ := Sign([]string{specSecret}, d.GetId(), ts, body); r.Header.Get("webhook-signature") != sig {
		t.Errorf("signature %q, want %q over the card", r.Header.Get("webhook-signature"), sig)
	}
	// Its twin: a delivery whose body is not a payload is not sent.
	bad := &reinv1.WebhookDelivery{Id: "msg_bad", Body: []byte("not json")}
	if a := testSender(NewClient(true, Timeouts{})).Send(context.Background(), w, bad); a.Err == nil || a.Status != 0 {
		t.Errorf("Send of a body that is no payload = %+v, want an error before any request", a)
	}
	select {
	case r := <-got:
		t.Errorf("a request was sent for a body that is no payload: %v", r.Header)
	default:
	}
}
