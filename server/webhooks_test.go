package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/slackapp"
	"github.com/reinhq/rein/internal/store/bolt"
	"github.com/reinhq/rein/internal/webhook"
)

const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// received is one request a test receiver took.
type received struct {
	header http.Header
	body   []byte
}

// webhookServer is a people server on a store with an outbox, its sender
// polling often, and a receiver that takes everything.
func webhookServer(t *testing.T) (*peopleServer, reinv1.WebhookServiceClient, chan received) {
	t.Helper()
	got := make(chan received, 64)
	ps, hooks := webhookServerTo(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- received{r.Header.Clone(), b}
	}), webhook.Timeouts{})
	return ps, hooks, got
}

// webhookServerTo is webhookServer whose receiver is h, reached with
// timeouts.
func webhookServerTo(t *testing.T, h http.Handler, timeouts webhook.Timeouts) (*peopleServer, reinv1.WebhookServiceClient) {
	t.Helper()
	recv := httptest.NewServer(h)
	t.Cleanup(recv.Close)
	st, err := bolt.Open(filepath.Join(t.TempDir(), "rein.db"), bolt.Options{Outbox: (&webhook.Matcher{PublicURL: "https://rein.example.com"}).Outbox()})
	if err != nil {
		t.Fatal(err)
	}
	w := newWriteTools(t)
	m := &modelLog{}
	send := &webhook.Config{Client: webhook.NewClient(true, timeouts), Poll: 10 * time.Millisecond}
	s := serveTCP(t, Config{Store: st, Tools: w, Models: m.models, Directory: testDirectory(t), Webhooks: &Webhooks{Send: send, AllowPrivate: true}})
	w.watchStore(s.node.Store)
	ps := &peopleServer{tcpServer: s, tools: w, models: m, opts: []grpc.CallOption{as("a-operator")}}
	hooks := reinv1.NewWebhookServiceClient(s.conn)
	if _, err := hooks.CreateWebhook(context.Background(), &reinv1.CreateWebhookRequest{Webhook: &reinv1.Webhook{
		Name: "oncall", Url: recv.URL, Statuses: []reinv1.RunStatus{stNeedsApproval}, Secrets: []string{testSecret},
	}}, as("a-operator")); err != nil {
		t.Fatal(err)
	}
	return ps, hooks
}

// TestWebhookDeliversAPause: a run that pauses for approval is delivered
// to its tenant's subscription, signed, with what the person must decide.
func TestWebhookDeliversAPause(t *testing.T) {
	s, _, got := webhookServer(t)
	run := s.begin(t, writeContract(refundCall()), stNeedsApproval, as("a-operator"))
	var r received
	select {
	case r = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery came for the paused run")
	}
	ts, err := strconv.ParseInt(r.header.Get("webhook-timestamp"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	id := r.header.Get("webhook-id")
	want, _ := webhook.Sign([]string{testSecret}, id, ts, r.body)
	if r.header.Get("webhook-signature") != want {
		t.Fatalf("signature %q, want %q", r.header.Get("webhook-signature"), want)
	}
	var p webhook.Payload
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatal(err)
	}
	pr := run.GetPending().GetProposal()
	if p.Type != "run.needs_approval" || p.Data.RunID != run.GetRunId() || p.Data.Tenant != "acme" || p.Data.Approval == nil ||
		p.Data.Approval.Tool != "refund" || p.Data.Approval.Hash != pr.GetHash() || !strings.HasPrefix(id, "msg_oncall_"+run.GetRunId()+"_") ||
		p.Data.ConsoleURL != "https://rein.example.com/#/runs/"+run.GetRunId() {
		t.Fatalf("delivery %s: %s", id, r.body)
	}
}

// TestWebhookServiceRefuses: a viewer may not keep subscriptions, another
// tenant does not see them, and no answer holds a secret.
func TestWebhookServiceRefuses(t *testing.T) {
	_, hooks, _ := webhookServer(t)
	ctx := context.Background()
	w := &reinv1.Webhook{Name: "x", Url: "http://127.0.0.1:1/", Secrets: []string{testSecret}}
	if _, err := hooks.CreateWebhook(ctx, &reinv1.CreateWebhookRequest{Webhook: w}, as("a-viewer")); status.Code(err) != codes.PermissionDenied {
		t.Errorf("a viewer's CreateWebhook: %v, want PermissionDenied", err)
	}
	if _, err := hooks.GetWebhook(ctx, &reinv1.GetWebhookRequest{Name: "oncall"}, as("b-operator")); status.Code(err) != codes.NotFound {
		t.Errorf("another tenant's GetWebhook: %v, want NotFound", err)
	}
	if _, err := hooks.DeleteWebhook(ctx, &reinv1.DeleteWebhookRequest{Name: "oncall"}, as("b-admin")); status.Code(err) != codes.NotFound {
		t.Errorf("another tenant's DeleteWebhook: %v, want NotFound", err)
	}
	bad := &reinv1.Webhook{Name: "y", Url: "http://127.0.0.1:1/", Secrets: []string{"not-a-secret"}}
	if _, err := hooks.CreateWebhook(ctx, &reinv1.CreateWebhookRequest{Webhook: bad}, as("a-operator")); status.Code(err) != codes.InvalidArgument {
		t.Errorf("CreateWebhook with a bad secret: %v, want InvalidArgument", err)
	}
	if _, err := hooks.CreateWebhook(ctx, &reinv1.CreateWebhookRequest{Webhook: &reinv1.Webhook{Name: "oncall", Url: "http://127.0.0.1:1/", Secrets: []string{testSecret}}}, as("a-admin")); status.Code(err) != codes.AlreadyExists {
		t.Errorf("CreateWebhook of a name taken: %v, want AlreadyExists", err)
	}
	got, err := hooks.GetWebhook(ctx, &reinv1.GetWebhookRequest{Name: "oncall"}, as("a-operator"))
	if err != nil {
		t.Fatal(err)
	}
	list, err := hooks.ListWebhooks(ctx, &reinv1.ListWebhooksRequest{}, as("a-admin"))
	if err != nil || len(list.GetWebhooks()) != 1 {
		t.Fatalf("ListWebhooks = %v, %v", list, err)
	}
	for _, w := range []*reinv1.Webhook{got.GetWebhook(), list.GetWebhooks()[0]} {
		if len(w.GetSecrets()) != 0 || len(w.GetSecretFingerprints()) != 1 || w.GetSecretFingerprints()[0] != webhook.Fingerprint(testSecret) {
			t.Fatalf("webhook as returned: %v", w)
		}
	}
	if l, _ := hooks.ListWebhooks(ctx, &reinv1.ListWebhooksRequest{}, as("b-operator")); len(l.GetWebhooks()) != 0 {
		t.Fatalf("another tenant lists %v", l.GetWebhooks())
	}
}

// TestWebhookReceiverNeverSlowsARun: a receiver that holds every delivery
// without answering (a slowloris, with an hour's timeout) holds only its
// deliveries: the run pauses, is approved and completes while the
// receiver still holds the first.
func TestWebhookReceiverNeverSlowsARun(t *testing.T) {
	held := make(chan struct{}, 16)
	release := make(chan struct{})
	s, _ := webhookServerTo(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		held <- struct{}{}
		<-release
	}), webhook.Timeouts{Response: time.Hour})
	t.Cleanup(func() { close(release) }) // before the receiver's Close, which waits for it
	run := s.begin(t, writeContract(refundCall(), final("refunded")), stNeedsApproval, as("a-operator"))
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the receiver was never called")
	}
	if _, err := s.decide(run, reinv1.ApprovalVerdict_APPROVAL_VERDICT_APPROVE, "ok", as("a-admin")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.node.Engine.Wait(ctx, run.GetRunId()); err != nil {
		t.Fatal(err)
	}
	if got := s.get(t, run.GetRunId()); got.GetStatus() != stCompleted {
		t.Fatalf("run is %v, want completed while the receiver holds its delivery", got.GetStatus())
	}
}

// TestWebhookSlackFormat: a subscription of format slack is sent the Block
// Kit message of a run paused for approval, signed, its Approve and Deny
// buttons carrying the proposal's hash; and, the twin, a notice with no
// buttons once the run has nothing left to decide (it completed).
func TestWebhookSlackFormat(t *testing.T) {
	s, hooks, _ := webhookServer(t)
	got := make(chan received, 16)
	chat := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- received{r.Header.Clone(), b}
	}))
	t.Cleanup(chat.Close)
	if _, err := hooks.CreateWebhook(context.Background(), &reinv1.CreateWebhookRequest{Webhook: &reinv1.Webhook{
		Name: "chat", Url: chat.URL, Format: reinv1.WebhookFormat_WEBHOOK_FORMAT_SLACK, Secrets: []string{testSecret},
		Statuses: []reinv1.RunStatus{stNeedsApproval, stCompleted},
	}}, as("a-operator")); err != nil {
		t.Fatal(err)
	}
	next := func(what string) received {
		t.Helper()
		select {
		case r := <-got:
			return r
		case <-time.After(10 * time.Second):
			t.Fatalf("no Slack message came for %s", what)
			return received{}
		}
	}
	type slackBlock struct {
		Type     string `json:"type"`
		Elements []struct {
			ActionID string `json:"action_id"`
			Value    string `json:"value"`
		} `json:"elements"`
	}
	blocks := func(r received) []slackBlock {
		t.Helper()
		var m struct {
			Text   string       `json:"text"`
			Blocks []slackBlock `json:"blocks"`
		}
		if err := json.Unmarshal(r.body, &m); err != nil || m.Text == "" || len(m.Blocks) == 0 {
			t.Fatalf("not a Block Kit message (%v): %s", err, r.body)
		}
		return m.Blocks
	}

	run := s.begin(t, writeContract(refundCall(), final("refunded")), stNeedsApproval, as("a-operator"))
	r := next("the pause")
	ts, _ := strconv.ParseInt(r.header.Get("webhook-timestamp"), 10, 64)
	if want, _ := webhook.Sign([]string{testSecret}, r.header.Get("webhook-id"), ts, r.body); r.header.Get("webhook-signature") != want {
		t.Fatalf("signature %q, want %q", r.header.Get("webhook-signature"), want)
	}
	if !strings.HasPrefix(r.header.Get("webhook-id"), "msg_chat_"+run.GetRunId()+"_") {
		t.Fatalf("webhook-id %q", r.header.Get("webhook-id"))
	}
	bs := blocks(r)
	last := bs[len(bs)-1]
	if last.Type != "actions" || len(last.Elements) != 2 || last.Elements[0].ActionID != slackapp.ActionApprove || last.Elements[1].ActionID != slackapp.ActionDeny {
		t.Fatalf("the message ends with %+v, want the Approve and Deny buttons:\n%s", last, r.body)
	}
	var v struct{ Run, Tenant, Proposal, Hash string }
	if err := json.Unmarshal([]byte(last.Elements[0].Value), &v); err != nil {
		t.Fatal(err)
	}
	pr := run.GetPending().GetProposal()
	if v.Run != run.GetRunId() || v.Tenant != "acme" || v.Proposal != pr.GetProposalId() || v.Hash == "" || v.Hash != pr.GetHash() {
		t.Fatalf("the buttons carry %+v, want run %s, proposal %s, hash %s", v, run.GetRunId(), pr.GetProposalId(), pr.GetHash())
	}

	if _, err := s.decide(run, reinv1.ApprovalVerdict_APPROVAL_VERDICT_APPROVE, "ok", as("a-admin")); err != nil {
		t.Fatal(err)
	}
	r = next("the end")
	for _, b := range blocks(r) {
		if b.Type == "actions" {
			t.Fatalf("the message of a completed run has buttons:\n%s", r.body)
		}
	}
	if !strings.Contains(string(r.body), "completed") {
		t.Fatalf("the message does not say the run completed:\n%s", r.body)
	}
}
