package server

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store/bolt"
	"github.com/reinhq/rein/internal/webhook"
)

// TestSendWhileLeading: the sender sends only while its lead holds: it
// stops and resigns when the lead is lost, campaigns again, sends what
// waited once it leads again, and resigns when it stops.
func TestSendWhileLeading(t *testing.T) {
	ctx := context.Background()
	got := make(chan string, 16)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		got <- r.Header.Get("webhook-id")
	}))
	defer recv.Close()
	st, err := bolt.Open(filepath.Join(t.TempDir(), "rein.db"), bolt.Options{Outbox: (&webhook.Matcher{}).Outbox()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.CreateWebhook(ctx, &reinv1.Webhook{Name: "oncall", Tenant: "acme", Url: recv.URL, Secrets: []string{testSecret}}); err != nil {
		t.Fatal(err)
	}
	at := timestamppb.New(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	if _, _, err := st.Create(ctx, &reinv1.Event{RunId: "r1", Sequence: 1, RecordedAt: at, Actor: "principal:alice",
		Payload: &reinv1.Event_RunStarted{RunStarted: &reinv1.RunStarted{Contract: &reinv1.TaskContract{Goal: "g"}, Principal: "alice", Tenant: "acme"}}}); err != nil {
		t.Fatal(err)
	}

	type lead struct {
		lost     chan struct{}
		resigned chan struct{}
	}
	leads := make(chan lead)
	campaigns := make(chan struct{}, 8)
	campaign := func(ctx context.Context) (<-chan struct{}, func(), error) {
		campaigns <- struct{}{}
		select {
		case l := <-leads:
			return l.lost, func() { close(l.resigned) }, nil
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
	sender := webhook.NewSender(webhook.Config{Store: st, Client: webhook.NewClient(true, webhook.Timeouts{}), Poll: 10 * time.Millisecond})
	sctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sendWhileLeading(sctx, sender, campaign, nil, slog.New(slog.DiscardHandler))
	}()
	wait := func(what string, ch <-chan struct{}) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: not within 10s", what)
		}
	}
	// deliveredID waits for want; repeats of the ids before it may come
	// first (a lead lost while a 2xx was on its way sends again).
	deliveredID := func(want string, repeats ...string) {
		t.Helper()
		for {
			select {
			case id := <-got:
				if id == want {
					return
				}
				if !slices.Contains(repeats, id) {
					t.Fatalf("delivered %s, want %s", id, want)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%s was not delivered", want)
			}
		}
	}

	wait("the first campaign", campaigns)
	first := lead{lost: make(chan struct{}), resigned: make(chan struct{})}
	leads <- first
	deliveredID("msg_oncall_r1_1")
	close(first.lost)
	wait("the resign after the lead was lost", first.resigned)
	wait("the campaign after the lead was lost", campaigns)

	// What a run commits meanwhile waits for the next lead.
	pause := []*reinv1.Event{
		{RunId: "r1", Sequence: 2, RecordedAt: at, Actor: "harness", Payload: &reinv1.Event_InputRequested{InputRequested: &reinv1.InputRequested{Question: &reinv1.Question{Text: "which?"}}}},
		{RunId: "r1", Sequence: 3, RecordedAt: at, Actor: "harness", Payload: &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{
			From: reinv1.RunStatus_RUN_STATUS_RUNNING, To: reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT}}},
	}
	if _, err := st.Append(ctx, "r1", 1, pause); err != nil {
		t.Fatal(err)
	}
	second := lead{lost: make(chan struct{}), resigned: make(chan struct{})}
	leads <- second
	deliveredID("msg_oncall_r1_3", "msg_oncall_r1_1")
	stop()
	wait("the stop", done)
	wait("the resign at the stop", second.resigned)
}
