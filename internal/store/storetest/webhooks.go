package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/webhook"
)

// WebhookStore is a store that keeps webhook subscriptions and their
// outbox.
type WebhookStore interface {
	store.Store
	store.Webhooks
}

// RunWebhooks runs the webhook suite against the backend that open opens:
// as Run's, with outbox as the store's store.Outbox (every create, import
// and append puts what it returns in its commit).
func RunWebhooks(t *testing.T, open func(t *testing.T, dir string, outbox store.Outbox) WebhookStore) {
	tests := []struct {
		name string
		fn   func(t *testing.T, h *hookHarness)
	}{
		{"Subscriptions", testWebhookSubscriptions},
		{"OutboxWithTheEvent", testOutboxWithTheEvent},
		{"OutboxRefusedWrites", testOutboxRefusedWrites},
		{"OutboxFollowsSubscriptions", testOutboxFollowsSubscriptions},
		{"OutboxOfAnImport", testOutboxOfAnImport},
		{"DeliveryHeads", testDeliveryHeads},
		{"UpdateAndRemoveDeliveries", testUpdateAndRemoveDeliveries},
		{"OutboxGoesWithAnErasedRun", testOutboxGoesWithAnErasedRun},
	}
	outbox := (&webhook.Matcher{}).Outbox()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := &hookHarness{t: t, dir: t.TempDir(), open: func(t *testing.T, dir string) WebhookStore { return open(t, dir, outbox) }}
			h.s = h.open(t, h.dir)
			t.Cleanup(func() {
				if err := h.s.Close(); err != nil && !errors.Is(err, store.ErrClosed) {
					t.Errorf("Close: %v", err)
				}
			})
			tc.fn(t, h)
		})
	}
}

type hookHarness struct {
	t    *testing.T
	dir  string
	open func(t *testing.T, dir string) WebhookStore
	s    WebhookStore
}

func (h *hookHarness) reopen() {
	h.t.Helper()
	if err := h.s.Close(); err != nil {
		h.t.Fatalf("Close: %v", err)
	}
	h.s = h.open(h.t, h.dir)
}

const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func subscription(tenant, name string) *reinv1.Webhook {
	return &reinv1.Webhook{Name: name, Tenant: tenant, Url: "https://hooks.example.com/" + name, Secrets: []string{testSecret}}
}

func mustCreateWebhook(t *testing.T, s store.Webhooks, w *reinv1.Webhook) {
	t.Helper()
	if err := s.CreateWebhook(context.Background(), w); err != nil {
		t.Fatalf("CreateWebhook(%s/%s): %v", w.GetTenant(), w.GetName(), err)
	}
}

// deliveries is the subscription's outbox, as "id type" lines.
func deliveries(t *testing.T, s store.Webhooks, tenant, name string) []string {
	t.Helper()
	ds, err := s.Deliveries(context.Background(), tenant, name, 1000)
	if err != nil {
		t.Fatalf("Deliveries(%s/%s): %v", tenant, name, err)
	}
	out := make([]string, 0, len(ds))
	for _, d := range ds {
		out = append(out, d.GetId()+" "+d.GetType())
	}
	return out
}

func assertDeliveries(t *testing.T, what string, s store.Webhooks, tenant, name string, want ...string) {
	t.Helper()
	got := deliveries(t, s, tenant, name)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s: the outbox of %s/%s holds %q, want %q", what, tenant, name, got, want)
	}
}

// pause is a question and the pause for it, at seq and seq+1.
func pause(id string, seq uint64) []*reinv1.Event {
	return []*reinv1.Event{inputRequested(id, seq), statusChanged(id, seq+1, running, needsIn)}
}

func mustStart(t *testing.T, s store.Store, sp spec) {
	t.Helper()
	if _, created, err := s.Create(context.Background(), runStarted(sp)); err != nil || !created {
		t.Fatalf("Create(%s): created %v, %v", sp.id, created, err)
	}
}

// testWebhookSubscriptions: a subscription is created once per tenant and
// name, listed by tenant (or all), updated, kept across a reopen, and
// deleted; a refused update (its function's error) changes nothing.
func testWebhookSubscriptions(t *testing.T, h *hookHarness) {
	ctx := context.Background()
	for _, w := range []*reinv1.Webhook{subscription("acme", "a"), subscription("acme", "b"), subscription("globex", "a")} {
		mustCreateWebhook(t, h.s, w)
	}
	if err := h.s.CreateWebhook(ctx, subscription("acme", "a")); !errors.Is(err, store.ErrExists) {
		t.Fatalf("a second acme/a: %v, want ErrExists", err)
	}
	acme, err := h.s.ListWebhooks(ctx, "acme")
	if err != nil || len(acme) != 2 || acme[0].GetName() != "a" || acme[1].GetName() != "b" || acme[0].GetSecrets()[0] != testSecret {
		t.Fatalf("acme's webhooks: %v, %v; want a and b, secrets included", acme, err)
	}
	if all, err := h.s.ListWebhooks(ctx, ""); err != nil || len(all) != 3 {
		t.Fatalf("every webhook: %d, %v; want 3", len(all), err)
	}
	refused := errors.New("refused")
	if _, err := h.s.UpdateWebhook(ctx, "acme", "a", func(w *reinv1.Webhook) error { w.Paused = true; return refused }); !errors.Is(err, refused) {
		t.Fatalf("a refused update: %v, want its error", err)
	}
	up, err := h.s.UpdateWebhook(ctx, "acme", "a", func(w *reinv1.Webhook) error { w.Labels = map[string]string{"team": "x"}; return nil })
	if err != nil || up.GetLabels()["team"] != "x" || up.GetPaused() {
		t.Fatalf("update: %v, %v", up, err)
	}
	if _, err := h.s.UpdateWebhook(ctx, "acme", "none", func(*reinv1.Webhook) error { return nil }); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("update of a subscription not stored: %v, want ErrNotFound", err)
	}
	h.reopen()
	acme, err = h.s.ListWebhooks(ctx, "acme")
	if err != nil || len(acme) != 2 || acme[0].GetLabels()["team"] != "x" || acme[0].GetPaused() {
		t.Fatalf("after a reopen: %v, %v; want the update kept and the refused one not", acme, err)
	}
	if err := h.s.DeleteWebhook(ctx, "acme", "a"); err != nil {
		t.Fatal(err)
	}
	if err := h.s.DeleteWebhook(ctx, "acme", "a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a second delete: %v, want ErrNotFound", err)
	}
	if all, err := h.s.ListWebhooks(ctx, ""); err != nil || len(all) != 2 {
		t.Fatalf("every webhook after a delete: %d, %v; want 2", len(all), err)
	}
}

// testOutboxWithTheEvent: the commit of an event a subscription chooses
// holds its delivery, in the order of the run's events, with an id that
// names the subscription, the run and the sequence; a run of another
// tenant, or started before the subscription, is not delivered; the
// outbox is the same after a reopen.
func testOutboxWithTheEvent(t *testing.T, h *hookHarness) {
	early := newSpec(1)
	mustStart(t, h.s, early)
	mustCreateWebhook(t, h.s, subscription("acme", "oncall"))
	kinds := subscription("acme", "questions")
	kinds.EventKinds = []string{"input_requested"}
	mustCreateWebhook(t, h.s, kinds)
	mustAppend(t, h.s, early.id, 1, modelRequested(early.id, 2, "h"))
	assertDeliveries(t, "a step after the subscription", h.s, "acme", "oncall")

	sp := newSpec(2)
	mustStart(t, h.s, sp)
	other := newSpec(3)
	other.tenant = "globex"
	mustStart(t, h.s, other)
	mustAppend(t, h.s, sp.id, 1, inputRequested(sp.id, 2), statusChanged(sp.id, 3, running, needsIn))
	id := func(name string, seq int) string { return fmt.Sprintf("msg_%s_%s_%d", name, sp.id, seq) }
	want := []string{id("oncall", 1) + " run.running", id("oncall", 3) + " run.needs_input"}
	assertDeliveries(t, "after a pause", h.s, "acme", "oncall", want...)
	assertDeliveries(t, "after a pause", h.s, "acme", "questions", id("questions", 2)+" event.input_requested")
	h.reopen()
	assertDeliveries(t, "after a reopen", h.s, "acme", "oncall", want...)
}

// testOutboxRefusedWrites: a write the store refuses (a stale version, a
// transition the fold rejects, a run that exists) puts nothing in the
// outbox.
func testOutboxRefusedWrites(t *testing.T, h *hookHarness) {
	ctx := context.Background()
	mustCreateWebhook(t, h.s, subscription("acme", "oncall"))
	sp := newSpec(1)
	mustStart(t, h.s, sp)
	mustAppend(t, h.s, sp.id, 1, pause(sp.id, 2)...)
	before := deliveries(t, h.s, "acme", "oncall")
	if _, err := h.s.Append(ctx, sp.id, 1, []*reinv1.Event{statusChanged(sp.id, 2, running, completed)}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a stale append: %v, want ErrConflict", err)
	}
	if _, err := h.s.Append(ctx, sp.id, 3, []*reinv1.Event{statusChanged(sp.id, 4, needsIn, completed)}); !errors.Is(err, runstate.ErrIllegalTransition) {
		t.Fatalf("an illegal transition: %v, want ErrIllegalTransition", err)
	}
	dup := runStarted(sp)
	dup.GetRunStarted().RequestId = "another request"
	if _, _, err := h.s.Create(ctx, dup); err == nil {
		t.Fatal("a second run under an ID stored: no error")
	}
	assertDeliveries(t, "after the refused writes", h.s, "acme", "oncall", before...)
}

// testOutboxFollowsSubscriptions: the next append matches a subscription
// as it is now: an update's labels, and nothing of a deleted one, whose
// outbox goes with it.
func testOutboxFollowsSubscriptions(t *testing.T, h *hookHarness) {
	ctx := context.Background()
	w := subscription("acme", "billing")
	w.Labels = map[string]string{"team": "billing"}
	mustCreateWebhook(t, h.s, w)
	r1 := newSpec(1)
	mustStart(t, h.s, r1)
	assertDeliveries(t, "a run without the label", h.s, "acme", "billing")
	if _, err := h.s.UpdateWebhook(ctx, "acme", "billing", func(w *reinv1.Webhook) error { w.Labels = nil; return nil }); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, h.s, r1.id, 1, pause(r1.id, 2)...)
	assertDeliveries(t, "after the labels went", h.s, "acme", "billing", "msg_billing_"+r1.id+"_3 run.needs_input")
	if err := h.s.DeleteWebhook(ctx, "acme", "billing"); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, h.s, r1.id, 3, statusChanged(r1.id, 4, needsIn, running))
	assertDeliveries(t, "after the delete", h.s, "acme", "billing")
	mustCreateWebhook(t, h.s, subscription("acme", "billing"))
	assertDeliveries(t, "a subscription made again under the name", h.s, "acme", "billing")
}

// testOutboxOfAnImport: an imported run's log is matched as its append
// would be, in the import's commit.
func testOutboxOfAnImport(t *testing.T, h *hookHarness) {
	mustCreateWebhook(t, h.s, subscription("acme", "oncall"))
	sp := newSpec(1)
	evs := append([]*reinv1.Event{runStarted(sp)}, pause(sp.id, 2)...)
	if _, err := h.s.Import(context.Background(), evs, nil); err != nil {
		t.Fatal(err)
	}
	assertDeliveries(t, "after an import", h.s, "acme", "oncall",
		"msg_oncall_"+sp.id+"_1 run.running", "msg_oncall_"+sp.id+"_3 run.needs_input")
}

// testDeliveryHeads: the heads are the first perRun deliveries of the
// first runs runs, in order; queued counts the whole outbox.
func testDeliveryHeads(t *testing.T, h *hookHarness) {
	mustCreateWebhook(t, h.s, subscription("acme", "oncall"))
	for i := 1; i <= 3; i++ {
		sp := newSpec(i)
		mustStart(t, h.s, sp)
		mustAppend(t, h.s, sp.id, 1, pause(sp.id, 2)...)
		mustAppend(t, h.s, sp.id, 3, statusChanged(sp.id, 4, needsIn, running))
	}
	heads, queued, err := h.s.DeliveryHeads(context.Background(), "acme", "oncall", 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, q := range heads {
		var line string
		for _, d := range q {
			line += fmt.Sprintf("%s/%d ", d.GetRunId(), d.GetSequence())
		}
		got = append(got, line)
	}
	want := []string{runID(1) + "/1 " + runID(1) + "/3 ", runID(2) + "/1 " + runID(2) + "/3 "}
	if queued != 9 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("DeliveryHeads(2 runs, 2 each) = %q, %d queued; want %q, 9", got, queued, want)
	}
	if heads, queued, err := h.s.DeliveryHeads(context.Background(), "acme", "none", 2, 2); err != nil || len(heads) != 0 || queued != 0 {
		t.Fatalf("the heads of a subscription not stored: %v, %d, %v; want none", heads, queued, err)
	}
}

// testUpdateAndRemoveDeliveries: UpdateDelivery stores what its function
// leaves, or removes the delivery; its function's error stores nothing;
// a delivery no longer stored is ErrNotFound to it and passed over by
// RemoveDeliveries.
func testUpdateAndRemoveDeliveries(t *testing.T, h *hookHarness) {
	ctx := context.Background()
	mustCreateWebhook(t, h.s, subscription("acme", "oncall"))
	sp := newSpec(1)
	mustStart(t, h.s, sp)
	mustAppend(t, h.s, sp.id, 1, append(pause(sp.id, 2), statusChanged(sp.id, 4, needsIn, running))...)
	ds, err := h.s.Deliveries(ctx, "acme", "oncall", 10)
	if err != nil || len(ds) != 3 {
		t.Fatalf("Deliveries: %v, %v; want 3", ds, err)
	}
	refused := errors.New("refused")
	if err := h.s.UpdateDelivery(ctx, ds[0], func(d *reinv1.WebhookDelivery) (bool, error) { d.Attempts = 9; return true, refused }); !errors.Is(err, refused) {
		t.Fatalf("a refused update: %v, want its error", err)
	}
	if err := h.s.UpdateDelivery(ctx, ds[0], func(d *reinv1.WebhookDelivery) (bool, error) {
		d.Attempts, d.LastError = 1, "the receiver answered 500"
		return false, nil
	}); err != nil {
		t.Fatal(err)
	}
	got, err := h.s.Deliveries(ctx, "acme", "oncall", 1)
	if err != nil || len(got) != 1 || got[0].GetAttempts() != 1 || got[0].GetLastError() == "" || !proto.Equal(got[0].GetCreatedAt(), ds[0].GetCreatedAt()) {
		t.Fatalf("after an update: %v, %v; want attempts 1 and the error kept", got, err)
	}
	if err := h.s.UpdateDelivery(ctx, ds[1], func(*reinv1.WebhookDelivery) (bool, error) { return true, nil }); err != nil {
		t.Fatal(err)
	}
	if err := h.s.UpdateDelivery(ctx, ds[1], func(*reinv1.WebhookDelivery) (bool, error) { return false, nil }); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an update of a removed delivery: %v, want ErrNotFound", err)
	}
	if err := h.s.RemoveDeliveries(ctx, []*reinv1.WebhookDelivery{ds[1], ds[2], ds[2]}); err != nil {
		t.Fatalf("RemoveDeliveries with one removed already and one twice: %v", err)
	}
	assertDeliveries(t, "after the removals", h.s, "acme", "oncall", ds[0].GetId()+" "+ds[0].GetType())
	if err := h.s.RemoveDeliveries(ctx, nil); err != nil {
		t.Fatalf("RemoveDeliveries of none: %v", err)
	}
}
