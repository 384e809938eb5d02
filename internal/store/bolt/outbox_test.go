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
	if err := s.view("outbox", func(tx *rtx) error {
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

// TestOutboxGoesWithAnErasedRun: deleting a run deletes its deliveries,
// pending and failed, in the erasure's commit, and no other run's; a run
// that may not be deleted (it is live) keeps its deliveries.
func TestOutboxGoesWithAnErasedRun(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "rein.db")
	s := openOutbox(t, path)
	for _, name := range []string{"oncall", "audit"} {
		if err := s.CreateWebhook(ctx, &reinv1.Webhook{Name: name, Tenant: "t", Url: "https://example.com/h"}); err != nil {
			t.Fatal(err)
		}
	}
	running, done := reinv1.RunStatus_RUN_STATUS_RUNNING, reinv1.RunStatus_RUN_STATUS_COMPLETED
	// r1 and r10 (whose ID r1's is a prefix of) end; live stays running.
	for _, id := range []string{"r1", "r10", "live"} {
		if _, _, err := s.Create(ctx, startEvent(id)); err != nil {
			t.Fatal(err)
		}
		if id == "live" {
			continue
		}
		if _, err := s.Append(ctx, id, 1, []*reinv1.Event{statusEvent(id, 2, running, done)}); err != nil {
			t.Fatal(err)
		}
	}
	// One of r1's deliveries failed: a failed delivery goes too.
	ds, err := s.Deliveries(ctx, "t", "oncall", 100)
	if err != nil || len(ds) != 5 {
		t.Fatalf("deliveries = %v, %v; want r1's, r10's and live's", ds, err)
	}
	if err := s.UpdateDelivery(ctx, ds[0], func(d *reinv1.WebhookDelivery) (bool, error) {
		d.State = reinv1.WebhookDeliveryState_WEBHOOK_DELIVERY_STATE_FAILED
		return false, nil
	}); err != nil {
		t.Fatal(err)
	}
	runsOf := func(s *Store) map[string]int {
		t.Helper()
		got := map[string]int{}
		for _, name := range []string{"oncall", "audit"} {
			ds, err := s.Deliveries(ctx, "t", name, 100)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range ds {
				got[d.GetRunId()]++
			}
		}
		return got
	}
	del := func(id string) error {
		_, _, err := s.Delete(ctx, &reinv1.RunDeletion{RunId: id, DeletedBy: "principal:test", DeletedAt: timestamppb.Now(), Reason: "test"})
		return err
	}
	if err := del("live"); !errors.Is(err, store.ErrLive) {
		t.Fatalf("deleting a live run: %v, want ErrLive", err)
	}
	if got := runsOf(s); got["live"] != 2 || got["r1"] != 4 || got["r10"] != 4 {
		t.Fatalf("deliveries by run after a refused delete = %v, want live 2, r1 4, r10 4", got)
	}
	if err := del("r1"); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"r10": 4, "live": 2}
	if got := runsOf(s); len(got) != len(want) || got["r10"] != 4 || got["live"] != 2 {
		t.Fatalf("deliveries by run after deleting r1 = %v, want %v", got, want)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openOutbox(t, path)
	defer s.Close()
	if got := runsOf(s); len(got) != len(want) || got["r10"] != 4 || got["live"] != 2 {
		t.Fatalf("deliveries by run after a reopen = %v, want %v", got, want)
	}
}

// TestOutboxRemovalsAreLogged: the sender's writes (a removal, an
// attempt's outcome) are records of the store's log, as appends are, not
// checkpoints of the file; a crash after them keeps them; and a removal of
// what is no longer stored writes nothing.
func TestOutboxRemovalsAreLogged(t *testing.T) {
	ctx := context.Background()
	s := openOutbox(t, filepath.Join(t.TempDir(), "rein.db"))
	defer s.Close()
	if err := s.CreateWebhook(ctx, &reinv1.Webhook{Name: "oncall", Tenant: "t", Url: "https://example.com/h"}); err != nil {
		t.Fatal(err)
	}
	running, done := reinv1.RunStatus_RUN_STATUS_RUNNING, reinv1.RunStatus_RUN_STATUS_COMPLETED
	if _, _, err := s.Create(ctx, startEvent("r1")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "r1", 1, []*reinv1.Event{statusEvent("r1", 2, running, done)}); err != nil {
		t.Fatal(err)
	}
	ds, err := s.Deliveries(ctx, "t", "oncall", 10)
	if err != nil || len(ds) != 2 {
		t.Fatalf("deliveries = %v, %v", ds, err)
	}
	records := func() (applied, logged uint64) {
		s.txMu.Lock()
		defer s.txMu.Unlock()
		return s.applied, s.logged
	}
	applied, logged := records()
	if err := s.RemoveDeliveries(ctx, ds[:1]); err != nil {
		t.Fatal(err)
	}
	if err := s.UpdateDelivery(ctx, ds[1], func(d *reinv1.WebhookDelivery) (bool, error) {
		d.State, d.Attempts = reinv1.WebhookDeliveryState_WEBHOOK_DELIVERY_STATE_FAILED, 3
		return false, nil
	}); err != nil {
		t.Fatal(err)
	}
	if a, l := records(); a != applied || l != logged+2 {
		t.Fatalf("after a removal and an outcome: applied %d, logged %d; want applied %d (no checkpoint), logged %d", a, l, applied, logged+2)
	}
	// The twin: removing it again stores nothing, and logs nothing.
	if err := s.RemoveDeliveries(ctx, ds[:1]); err != nil {
		t.Fatal(err)
	}
	if _, l := records(); l != logged+2 {
		t.Fatalf("removing a removed delivery logged a record (logged %d, want %d)", l, logged+2)
	}
	c := openOutbox(t, crashImage(t, s))
	defer c.Close()
	got, err := c.Deliveries(ctx, "t", "oncall", 10)
	if err != nil || len(got) != 1 || got[0].GetId() != ds[1].GetId() ||
		got[0].GetState() != reinv1.WebhookDeliveryState_WEBHOOK_DELIVERY_STATE_FAILED || got[0].GetAttempts() != 3 {
		t.Fatalf("after a crash, deliveries = %v, %v; want %s alone, failed after 3 attempts", got, err, ds[1].GetId())
	}
}
