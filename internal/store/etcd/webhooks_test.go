package etcd

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/store/storetest"
	"github.com/reinhq/rein/internal/webhook"
)

func TestWebhookConformance(t *testing.T) {
	storetest.RunWebhooks(t, func(t *testing.T, dir string, outbox store.Outbox) storetest.WebhookStore {
		opts := testOptions
		opts.Outbox = outbox
		s, err := Open(t.Context(), shared, prefixOf(dir), opts)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// hookServers opens two Stores on a fresh prefix with the webhook outbox,
// as two servers would (each with its own caches).
func hookServers(t *testing.T) (prefix string, a, b *Store) {
	t.Helper()
	prefix = prefixOf(t.TempDir())
	opts := testOptions
	opts.Outbox = (&webhook.Matcher{}).Outbox()
	open := func() *Store {
		s, err := Open(t.Context(), shared, prefix, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	return prefix, open(), open()
}

func hook(name string, kinds ...string) *reinv1.Webhook {
	return &reinv1.Webhook{Name: name, Tenant: "acme", Url: "https://hooks.example.com/" + name, EventKinds: kinds,
		Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}}
}

func pauseFor(id string, seq uint64) []*reinv1.Event {
	at := timestamppb.New(t0.Add(time.Duration(seq) * time.Second))
	return []*reinv1.Event{
		{RunId: id, Sequence: seq, RecordedAt: at, Actor: "harness", Payload: &reinv1.Event_InputRequested{InputRequested: &reinv1.InputRequested{Question: &reinv1.Question{Text: "which?"}}}},
		{RunId: id, Sequence: seq + 1, RecordedAt: at, Actor: "harness", Payload: &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{
			From: reinv1.RunStatus_RUN_STATUS_RUNNING, To: reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT, Reason: "asked"}}},
	}
}

func outboxIDs(t *testing.T, s *Store, name string) []string {
	t.Helper()
	ds, err := s.Deliveries(t.Context(), "acme", name, 100)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, d := range ds {
		ids = append(ids, d.GetId())
	}
	return ids
}

// TestOutboxSeesAnotherServersSubscriptions: a server that matched its
// tenant's subscriptions (none) before another server created one puts the
// delivery of its next append all the same, in a status change's Txn and
// in a step's shared one; once the other deletes it, nothing more is put
// for it. The append's Txn compares the tenant's P webhook-rev key, so a
// stale cache costs one failed Txn, never a delivery.
func TestOutboxSeesAnotherServersSubscriptions(t *testing.T) {
	ctx := t.Context()
	prefix, a, b := hookServers(t)
	mustCreate(t, a, "run-1") // a has read acme's subscriptions: none
	if err := b.CreateWebhook(ctx, hook("oncall")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Append(ctx, "run-1", 1, pauseFor("run-1", 2)); err != nil {
		t.Fatal(err)
	}
	if got := outboxIDs(t, b, "oncall"); fmt.Sprint(got) != "[msg_oncall_run-1_3]" {
		t.Fatalf("the outbox after a's pause: %v, want the pause's delivery", got)
	}
	mustCreate(t, a, "run-2")
	if err := b.CreateWebhook(ctx, hook("steps", "model_requested")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Append(ctx, "run-2", 1, []*reinv1.Event{step("run-2", 2), step("run-2", 3)}); err != nil {
		t.Fatal(err)
	}
	if got := outboxIDs(t, b, "steps"); fmt.Sprint(got) != "[msg_steps_run-2_2]" {
		t.Fatalf("the outbox after a's step: %v, want the step's delivery", got)
	}
	if err := b.DeleteWebhook(ctx, "acme", "oncall"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Append(ctx, "run-2", 3, pauseFor("run-2", 4)); err != nil {
		t.Fatal(err)
	}
	resp, err := shared.Get(ctx, prefix+"outbox/acme/oncall/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Fatalf("keys under the deleted subscription's outbox: %v, %v; want none", resp.Count, err)
	}
}

// TestRefusedWebhookWritesChangeNoKey: a conflicting append (a stale
// version) enqueues nothing, and each refused subscription write (a name
// taken, an update its function refuses, a name not stored) changes no
// key under the prefix; the twin, the same append at the run's version,
// enqueues its delivery.
func TestRefusedWebhookWritesChangeNoKey(t *testing.T) {
	ctx := t.Context()
	prefix, a, b := hookServers(t)
	if err := a.CreateWebhook(ctx, hook("oncall")); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, a, "run-1")
	if _, err := b.Append(ctx, "run-1", 1, []*reinv1.Event{step("run-1", 2), step("run-1", 3)}); err != nil {
		t.Fatal(err)
	}
	before := dump(t, shared, prefix)
	if _, err := a.Append(ctx, "run-1", 1, pauseFor("run-1", 2)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a's stale append: %v, want ErrConflict", err)
	}
	assertUnchanged(t, "a conflicting append", before, dump(t, shared, prefix))
	if err := b.CreateWebhook(ctx, hook("oncall")); !errors.Is(err, store.ErrExists) {
		t.Fatalf("a second oncall: %v, want ErrExists", err)
	}
	refused := errors.New("refused")
	if _, err := b.UpdateWebhook(ctx, "acme", "oncall", func(w *reinv1.Webhook) error { w.Paused = true; return refused }); !errors.Is(err, refused) {
		t.Fatalf("a refused update: %v", err)
	}
	if err := b.DeleteWebhook(ctx, "acme", "none"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a delete of a name not stored: %v, want ErrNotFound", err)
	}
	if err := b.UpdateDelivery(ctx, &reinv1.WebhookDelivery{Tenant: "acme", Webhook: "oncall", RunId: "run-1", Sequence: 9, Id: "x"},
		func(*reinv1.WebhookDelivery) (bool, error) { return true, nil }); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an update of a delivery not stored: %v, want ErrNotFound", err)
	}
	assertUnchanged(t, "the refused subscription writes", before, dump(t, shared, prefix))
	if _, err := a.Append(ctx, "run-1", 3, pauseFor("run-1", 4)); err != nil {
		t.Fatal(err)
	}
	if got := outboxIDs(t, a, "oncall"); fmt.Sprint(got) != "[msg_oncall_run-1_1 msg_oncall_run-1_5]" {
		t.Fatalf("the outbox after the append at the run's version: %v", got)
	}
}

// TestLeadGoesToAnotherWhenTheLeaderEnds: one Store leads at a time; the
// next leads once the leader resigns, and once the leader's lease ends
// without a resign (it died), when the leader learns it lost the lead.
func TestLeadGoesToAnotherWhenTheLeaderEnds(t *testing.T) {
	ctx := t.Context()
	prefix, a, b := hookServers(t)
	lostA, resignA, err := a.Lead(ctx, "webhook-sender", "a", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	type led struct {
		lost   <-chan struct{}
		resign func()
		err    error
	}
	campaign := func(s *Store, value string) chan led {
		ch := make(chan led, 1)
		go func() {
			lost, resign, err := s.Lead(ctx, "webhook-sender", value, 2*time.Second)
			ch <- led{lost, resign, err}
		}()
		return ch
	}
	// b waits while a leads: a deadline ends its campaign, and it leads
	// nothing.
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, _, err = b.Lead(short, "webhook-sender", "b", 2*time.Second)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("b's campaign while a leads: %v, want its deadline", err)
	}
	bLeads := campaign(b, "b")
	select {
	case <-bLeads:
		t.Fatal("b leads while a does")
	case <-lostA:
		t.Fatal("a lost the lead")
	default:
	}
	resignA()
	got := <-bLeads
	if got.err != nil {
		t.Fatalf("b's campaign after a resigned: %v", got.err)
	}
	// b dies: its lease is revoked without a resign. b learns it, and a
	// leads again.
	aLeads := campaign(a, "a")
	resp, err := shared.Get(ctx, prefix+"leader/webhook-sender/", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) == 0 || string(resp.Kvs[0].Value) != "b" {
		t.Fatalf("the lead's keys: %v, %v; want b's first", resp.Kvs, err)
	}
	if _, err := shared.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	<-got.lost
	again := <-aLeads
	if again.err != nil {
		t.Fatalf("a's campaign after b's lease ended: %v", again.err)
	}
	again.resign()
	got.resign()
}

// TestFollowOutbox: a server following the outbox is told when another
// server's append put a delivery in it (and once at the start, when it
// may have missed some).
func TestFollowOutbox(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	_, a, b := hookServers(t)
	if err := b.CreateWebhook(ctx, hook("oncall")); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, b, "run-1")
	put := make(chan struct{}, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.FollowOutbox(ctx, func() { put <- struct{}{} })
	}()
	defer func() { cancel(); <-done }()
	wake := func(what string) {
		t.Helper()
		select {
		case <-put:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no call within 10s", what)
		}
	}
	wake("the start")
	if _, err := b.Append(ctx, "run-1", 1, pauseFor("run-1", 2)); err != nil {
		t.Fatal(err)
	}
	wake("b's pause")
}

// TestErasureSeesAnotherServersSubscriptions: a server whose cache of its
// tenant's subscriptions predates one another server created still
// deletes, with a run it erases, that subscription's deliveries of the
// run: the erasure's Txn compares the tenant's P webhook-rev key, so a
// stale cache costs one failed Txn, never a delivery left behind.
func TestErasureSeesAnotherServersSubscriptions(t *testing.T) {
	ctx := t.Context()
	prefix, a, b := hookServers(t)
	if err := a.CreateWebhook(ctx, hook("oncall")); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, a, "run-1") // a has read acme's subscriptions: oncall
	if err := b.CreateWebhook(ctx, hook("audit")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Append(ctx, "run-1", 1, []*reinv1.Event{finish("run-1", 2, t0)}); err != nil {
		t.Fatal(err)
	}
	if got := outboxIDs(t, b, "audit"); fmt.Sprint(got) != "[msg_audit_run-1_2]" {
		t.Fatalf("audit's outbox after the run ended: %v, want its end's delivery", got)
	}
	if _, _, err := a.Delete(ctx, &reinv1.RunDeletion{RunId: "run-1", DeletedBy: "principal:test", Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	resp, err := shared.Get(ctx, prefix+"outbox/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("the outbox after a deleted run-1: %v, %v; want no key", resp.Kvs, err)
	}
}
