package etcd

import (
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
)

// replicas opens two replicas of one prefix, each holding its runs under
// an etcd lease of its own; revoke(i) ends replica i's lease at once, as
// its expiry would.
func replicas(t *testing.T) (a, b *Store, prefix string, revoke func(*Store)) {
	t.Helper()
	prefix = prefixOf(t.TempDir())
	a, b = openShared(t, prefix), openShared(t, prefix)
	t.Cleanup(func() { a.Close(); b.Close() })
	for _, s := range []*Store{a, b} {
		g, err := shared.Grant(t.Context(), 60)
		if err != nil {
			t.Fatal(err)
		}
		s.SetLease(g.ID)
	}
	revoke = func(s *Store) {
		if _, err := shared.Revoke(t.Context(), s.Lease()); err != nil {
			t.Fatal(err)
		}
	}
	return a, b, prefix, revoke
}

func ownerOf(t *testing.T, prefix, runID string) (string, clientv3.LeaseID) {
	t.Helper()
	resp, err := shared.Get(t.Context(), prefix+"owner/"+runID)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return "", 0
	}
	return string(resp.Kvs[0].Value), clientv3.LeaseID(resp.Kvs[0].Lease)
}

// TestReplicaDrivesUnderItsLease: a replica takes a run under its etcd
// lease; another replica may not take the running run from it (ErrOwned,
// nothing written); once the owner's lease ends, nothing it appends is
// stored (ErrFenced) even before anyone else takes the run, and the other
// replica takes it with a new epoch, after which the first may not take it
// back.
func TestReplicaDrivesUnderItsLease(t *testing.T) {
	ctx := t.Context()
	a, b, prefix, revoke := replicas(t)
	mustCreate(t, a, "run-1")
	ea, err := a.Acquire(ctx, "run-1", "replica-a")
	if err != nil {
		t.Fatal(err)
	}
	if name, lease := ownerOf(t, prefix, "run-1"); name != "replica-a" || lease != a.Lease() {
		t.Fatalf("owner key = %q under lease %x, want replica-a under %x", name, lease, a.Lease())
	}
	before := dump(t, shared, prefix)
	if _, err := b.Acquire(ctx, "run-1", "replica-b"); !errors.Is(err, store.ErrOwned) {
		t.Fatalf("b takes a run a drives: %v, want ErrOwned", err)
	}
	var got uint64
	if _, err := b.Append(ctx, "run-1", 1, steps("run-1", 2, 1), store.WithAcquire("replica-b", &got)); !errors.Is(err, store.ErrOwned) {
		t.Fatalf("b appends to a run a drives: %v, want ErrOwned", err)
	}
	assertUnchanged(t, "a refused taking", before, dump(t, shared, prefix))
	if _, err := a.Append(ctx, "run-1", 1, steps("run-1", 2, 2), store.WithEpoch(ea)); err != nil {
		t.Fatalf("the owner's append: %v", err)
	}

	revoke(a) // a's lease ends: it died, or was cut off past the TTL
	if name, _ := ownerOf(t, prefix, "run-1"); name != "" {
		t.Fatalf("the owner key outlived its lease: %q", name)
	}
	before = dump(t, shared, prefix)
	if _, err := a.Append(ctx, "run-1", 3, steps("run-1", 4, 1), store.WithEpoch(ea)); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("an append after the owner's lease ended: %v, want ErrFenced", err)
	}
	assertUnchanged(t, "a fenced append", before, dump(t, shared, prefix))

	eb, err := b.Acquire(ctx, "run-1", "replica-b")
	if err != nil || eb <= ea {
		t.Fatalf("b takes the orphaned run: epoch %d, %v; want one over %d", eb, err, ea)
	}
	if _, err := b.Append(ctx, "run-1", 3, steps("run-1", 4, 1), store.WithEpoch(eb)); err != nil {
		t.Fatalf("the new owner's append: %v", err)
	}
	g, err := shared.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	a.SetLease(g.ID) // a is back with a new lease
	if _, err := a.Acquire(ctx, "run-1", "replica-a"); !errors.Is(err, store.ErrOwned) {
		t.Fatalf("a takes back the run b now drives: %v, want ErrOwned", err)
	}
}

// TestReplicaTakesPausedOrEndingRun: a paused run is driven by no one, so a
// replica applying a person's decision takes it from a live owner, which
// is then fenced; an append that ends a running run (a cancel) takes it
// too; the append that ends a run deletes its owner key.
func TestReplicaTakesPausedOrEndingRun(t *testing.T) {
	ctx := t.Context()
	a, b, prefix, _ := replicas(t)
	mustCreate(t, a, "run-p")
	ea, err := a.Acquire(ctx, "run-p", "replica-a")
	if err != nil {
		t.Fatal(err)
	}
	pause := []*reinv1.Event{
		{RunId: "run-p", Sequence: 2, RecordedAt: timestamppb.New(t0), Actor: "harness", Payload: &reinv1.Event_InputRequested{InputRequested: &reinv1.InputRequested{Question: &reinv1.Question{Text: "which branch?"}}}},
		{RunId: "run-p", Sequence: 3, RecordedAt: timestamppb.New(t0), Actor: "harness", Payload: &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{From: reinv1.RunStatus_RUN_STATUS_RUNNING, To: reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT, Reason: "asked"}}},
	}
	if _, err := a.Append(ctx, "run-p", 1, pause, store.WithEpoch(ea)); err != nil {
		t.Fatal(err)
	}
	answer := []*reinv1.Event{
		{RunId: "run-p", Sequence: 4, RecordedAt: timestamppb.New(t0.Add(time.Second)), Actor: "principal:bob", Payload: &reinv1.Event_InputProvided{InputProvided: &reinv1.InputProvided{Text: "main"}}},
		{RunId: "run-p", Sequence: 5, RecordedAt: timestamppb.New(t0.Add(time.Second)), Actor: "principal:bob", Payload: &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{From: reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT, To: reinv1.RunStatus_RUN_STATUS_RUNNING, Reason: "answered"}}},
	}
	var eb uint64
	if _, err := b.Append(ctx, "run-p", 3, answer, store.WithAcquire("replica-b", &eb)); err != nil {
		t.Fatalf("b applies a person's answer to a paused run a holds: %v", err)
	}
	if name, lease := ownerOf(t, prefix, "run-p"); name != "replica-b" || lease != b.Lease() || eb <= ea {
		t.Fatalf("after b's decision: owner %q under %x at epoch %d; want replica-b under %x over epoch %d", name, lease, eb, b.Lease(), ea)
	}
	if _, err := a.Append(ctx, "run-p", 5, steps("run-p", 6, 1), store.WithEpoch(ea)); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("the old owner's append after b took the run: %v, want ErrFenced", err)
	}

	// A cancel sent to a replica that does not drive the running run.
	cancel := []*reinv1.Event{{RunId: "run-p", Sequence: 6, RecordedAt: timestamppb.New(t0.Add(2 * time.Second)), Actor: "principal:bob",
		Payload: &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{From: reinv1.RunStatus_RUN_STATUS_RUNNING, To: reinv1.RunStatus_RUN_STATUS_CANCELLED, Reason: "stop"}}}}
	var ec uint64
	if _, err := a.Append(ctx, "run-p", 5, cancel, store.WithAcquire("replica-a", &ec)); err != nil {
		t.Fatalf("a cancels the run b drives: %v", err)
	}
	if name, _ := ownerOf(t, prefix, "run-p"); name != "" {
		t.Fatalf("the ended run still has an owner key: %q", name)
	}
	if _, err := b.Append(ctx, "run-p", 6, steps("run-p", 7, 1), store.WithEpoch(eb)); !errors.Is(err, store.ErrFenced) && !errors.Is(err, store.ErrConflict) {
		t.Fatalf("b's append after the cancel: %v, want it refused", err)
	}
}
