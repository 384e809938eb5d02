package bolt

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/webhook"
)

func openOutbox(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(path, Options{Outbox: (&webhook.Matcher{}).Outbox()})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func statusEvent(runID string, seq uint64, from, to reinv1.RunStatus) *reinv1.Event {
	return &reinv1.Event{
		RunId: runID, Sequence: seq, RecordedAt: timestamppb.Now(), Actor: "harness",
		Payload: &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{From: from, To: to, Reason: "r"}},
	}
}

// outboxBytes is every key and value of the outbox bucket, concatenated.
func outboxBytes(t *testing.T, s *Store) string {
	t.Helper()
	var out []byte
	if err := s.view(context.Background(), "outbox", func(tx *rtx) error {
		b := tx.Bucket(bucketOutbox)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			out = append(append(out, k...), v...)
			return nil
		})
	}); err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// TestOutboxIsCommittedIffTheEventIs: a delivery is stored by the commit
// of the event that causes it, and a refused append stores none.
func TestOutboxIsCommittedIffTheEventIs(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "rein.db")
	s := openOutbox(t, path)
	// A run started before the subscription: its start is not delivered.
	if _, _, err := s.Create(ctx, startEvent("early")); err != nil {
		t.Fatal(err)
	}
	w := &reinv1.Webhook{Name: "oncall", Tenant: "t", Url: "https://example.com/h", Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}}
	if err := s.CreateWebhook(ctx, w); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateWebhook(ctx, w); !errors.Is(err, store.ErrExists) {
		t.Fatalf("second CreateWebhook: %v, want ErrExists", err)
	}
	if _, err := s.Append(ctx, "early", 1, []*reinv1.Event{stepEvent("early", 2)}); err != nil {
		t.Fatal(err)
	}
	if got := outboxBytes(t, s); got != "" {
		t.Fatalf("an event no subscription chooses put %d outbox bytes", len(got))
	}
	if _, _, err := s.Create(ctx, startEvent("r1")); err != nil {
		t.Fatal(err)
	}
	running, paused := reinv1.RunStatus_RUN_STATUS_RUNNING, reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT
	ask := &reinv1.Event{RunId: "r1", Sequence: 2, RecordedAt: timestamppb.Now(), Actor: "harness",
		Payload: &reinv1.Event_InputRequested{InputRequested: &reinv1.InputRequested{Question: &reinv1.Question{Text: "which account?"}}}}
	if _, err := s.Append(ctx, "r1", 1, []*reinv1.Event{ask, statusEvent("r1", 3, running, paused)}); err != nil {
		t.Fatal(err)
	}
	before := outboxBytes(t, s)
	ds, err := s.Deliveries(ctx, "t", "oncall", 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 2 || ds[0].GetType() != "run.running" || ds[1].GetType() != "run.needs_input" || ds[1].GetId() != "msg_oncall_r1_3" {
		t.Fatalf("deliveries after the pause = %v, want run.running (1) and run.needs_input (3)", ds)
	}
	// Refused appends: a stale version, and one the fold rejects (a
	// terminal run cannot go back), store no outbox byte.
	if _, err := s.Append(ctx, "r1", 1, []*reinv1.Event{statusEvent("r1", 2, paused, running)}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("stale append: %v, want ErrConflict", err)
	}
	if _, err := s.Append(ctx, "r1", 3, []*reinv1.Event{statusEvent("r1", 4, paused, reinv1.RunStatus_RUN_STATUS_COMPLETED)}); !errors.Is(err, runstate.ErrIllegalTransition) {
		t.Fatalf("illegal append: %v, want ErrIllegalTransition", err)
	}
	if got := outboxBytes(t, s); got != before {
		t.Fatal("a refused append changed the outbox")
	}
	// What was committed is there after a reopen, with the same ids.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openOutbox(t, path)
	defer s.Close()
	if got := outboxBytes(t, s); got != before {
		t.Fatal("the outbox differs after a reopen")
	}
	// A removed delivery is gone; a deleted subscription takes its outbox.
	if err := s.UpdateDelivery(ctx, ds[0], func(*reinv1.WebhookDelivery) (bool, error) { return true, nil }); err != nil {
		t.Fatal(err)
	}
	if err := s.UpdateDelivery(ctx, ds[0], func(*reinv1.WebhookDelivery) (bool, error) { return true, nil }); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("removing it twice: %v, want ErrNotFound", err)
	}
	if err := s.DeleteWebhook(ctx, "t", "oncall"); err != nil {
		t.Fatal(err)
	}
	if got := outboxBytes(t, s); got != "" {
		t.Fatalf("a deleted subscription left %d outbox bytes", len(got))
	}
}

// TestOutboxFollowsSubscriptionChanges: an update of a subscription (its
// labels) is what the next append matches.
func TestOutboxFollowsSubscriptionChanges(t *testing.T) {
	ctx := context.Background()
	s := openOutbox(t, filepath.Join(t.TempDir(), "rein.db"))
	defer s.Close()
	w := &reinv1.Webhook{Name: "only-billing", Tenant: "t", Labels: map[string]string{"team": "billing"}}
	if err := s.CreateWebhook(ctx, w); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Create(ctx, startEvent("r1")); err != nil {
		t.Fatal(err)
	}
	if got := outboxBytes(t, s); got != "" {
		t.Fatal("a run without the label was delivered")
	}
	if _, err := s.UpdateWebhook(ctx, "t", "only-billing", func(w *reinv1.Webhook) error { w.Labels = nil; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Create(ctx, startEvent("r2")); err != nil {
		t.Fatal(err)
	}
	if ds, err := s.Deliveries(ctx, "t", "only-billing", 10); err != nil || len(ds) != 1 || ds[0].GetRunId() != "r2" {
		t.Fatalf("deliveries = %v, %v; want r2's start", ds, err)
	}
}

// TestOutboxIsRecoveredFromTheLog: a delivery an append put is in the log
// with the append, so a crash before the next checkpoint keeps it: the
// store opened on what the crash left holds the same outbox.
func TestOutboxIsRecoveredFromTheLog(t *testing.T) {
	ctx := context.Background()
	s := openOutbox(t, filepath.Join(t.TempDir(), "rein.db"))
	defer s.Close()
	w := &reinv1.Webhook{Name: "oncall", Tenant: "t", Url: "https://example.com/h", Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}}
	if err := s.CreateWebhook(ctx, w); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Create(ctx, startEvent("r1")); err != nil {
		t.Fatal(err)
	}
	running, paused := reinv1.RunStatus_RUN_STATUS_RUNNING, reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT
	ask := &reinv1.Event{RunId: "r1", Sequence: 2, RecordedAt: timestamppb.Now(), Actor: "harness",
		Payload: &reinv1.Event_InputRequested{InputRequested: &reinv1.InputRequested{Question: &reinv1.Question{Text: "which account?"}}}}
	if _, err := s.Append(ctx, "r1", 1, []*reinv1.Event{ask, statusEvent("r1", 3, running, paused)}); err != nil {
		t.Fatal(err)
	}
	want := outboxBytes(t, s)
	if want == "" {
		t.Fatal("the pause put nothing in the outbox")
	}
	image := crashImage(t, s)
	c := openOutbox(t, image)
	defer c.Close()
	if got := outboxBytes(t, c); got != want {
		t.Fatalf("the outbox recovered from the log differs: %d bytes, want %d", len(got), len(want))
	}
}
