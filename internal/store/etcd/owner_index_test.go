package etcd

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
)

// indexes reads the ownership indexes: the runs no replica took, and those
// replicas a and b hold.
func indexes(t *testing.T, s *Store) (unowned, heldA, heldB []string) {
	t.Helper()
	var err error
	if unowned, _, err = s.Unowned(t.Context(), 0, "", 0); err != nil {
		t.Fatal(err)
	}
	if heldA, err = s.Held(t.Context(), "replica-a", "", 0); err != nil {
		t.Fatal(err)
	}
	if heldB, err = s.Held(t.Context(), "replica-b", "", 0); err != nil {
		t.Fatal(err)
	}
	return unowned, heldA, heldB
}

// TestOwnershipIndexes: a created run is in the unowned index until a
// replica takes it; the run a replica takes is in its held index, moved to
// another's when that one takes it (a person's decision on a paused run),
// and leaves every index when it ends. A paused run another replica holds
// under a live lease is refused to Acquire (its holder keeps its
// deadlines), and nothing is written; once the holder's lease ends it may
// be taken. Listing pages in ID order.
func TestOwnershipIndexes(t *testing.T) {
	ctx := t.Context()
	a, b, _, revoke := replicas(t)
	for _, id := range []string{"run-1", "run-2", "run-3"} {
		mustCreate(t, a, id)
	}
	if u, ha, hb := indexes(t, a); !slices.Equal(u, []string{"run-1", "run-2", "run-3"}) || len(ha)+len(hb) != 0 {
		t.Fatalf("after creating three runs: unowned %v, held by a %v, by b %v; want all three unowned", u, ha, hb)
	}
	page, rev, err := a.Unowned(ctx, 0, "run-1", 1)
	if err != nil || !slices.Equal(page, []string{"run-2"}) {
		t.Fatalf("Unowned after run-1, one: %v, %v; want [run-2]", page, err)
	}
	// Since the revision read: a run created after it is not listed.
	mustCreate(t, a, "run-4")
	if since, _, err := a.Unowned(ctx, rev, "", 0); err != nil || !slices.Equal(since, []string{"run-1", "run-2", "run-3"}) {
		t.Fatalf("Unowned since revision %d: %v, %v; want the three runs created before it, not run-4", rev, since, err)
	}
	if _, err := a.Append(ctx, "run-4", 1, []*reinv1.Event{finish("run-4", 2, t0.Add(time.Minute))}); err != nil {
		t.Fatal(err)
	}
	ea, err := a.Acquire(ctx, "run-1", "replica-a")
	if err != nil {
		t.Fatal(err)
	}
	if u, ha, _ := indexes(t, a); !slices.Equal(u, []string{"run-2", "run-3"}) || !slices.Equal(ha, []string{"run-1"}) {
		t.Fatalf("after a took run-1: unowned %v, held by a %v", u, ha)
	}
	// run-1 pauses under a; b may not take it to keep its deadlines.
	pause := []*reinv1.Event{
		{RunId: "run-1", Sequence: 2, RecordedAt: timestamppb.New(t0), Actor: "harness", Payload: &reinv1.Event_InputRequested{InputRequested: &reinv1.InputRequested{Question: &reinv1.Question{Text: "which branch?"}}}},
		{RunId: "run-1", Sequence: 3, RecordedAt: timestamppb.New(t0), Actor: "harness", Payload: &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{From: reinv1.RunStatus_RUN_STATUS_RUNNING, To: reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT, Reason: "asked"}}},
	}
	if _, err := a.Append(ctx, "run-1", 1, pause, store.WithEpoch(ea)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Acquire(ctx, "run-1", "replica-b"); !errors.Is(err, store.ErrOwned) {
		t.Fatalf("b takes the paused run a holds under a live lease: %v, want ErrOwned", err)
	}
	if _, ha, hb := indexes(t, b); !slices.Equal(ha, []string{"run-1"}) || len(hb) != 0 {
		t.Fatalf("after b was refused: held by a %v, by b %v; want a's still", ha, hb)
	}
	// A person's answer through b takes it (WithAcquire): the index moves.
	answer := []*reinv1.Event{
		{RunId: "run-1", Sequence: 4, RecordedAt: timestamppb.New(t0.Add(time.Second)), Actor: "principal:bob", Payload: &reinv1.Event_InputProvided{InputProvided: &reinv1.InputProvided{Text: "main"}}},
		{RunId: "run-1", Sequence: 5, RecordedAt: timestamppb.New(t0.Add(time.Second)), Actor: "principal:bob", Payload: &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{From: reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT, To: reinv1.RunStatus_RUN_STATUS_RUNNING, Reason: "answered"}}},
	}
	var eb uint64
	if _, err := b.Append(ctx, "run-1", 3, answer, store.WithAcquire("replica-b", &eb)); err != nil {
		t.Fatal(err)
	}
	if _, ha, hb := indexes(t, a); len(ha) != 0 || !slices.Equal(hb, []string{"run-1"}) {
		t.Fatalf("after b took run-1 with a decision: held by a %v, by b %v; want b's", ha, hb)
	}
	// The end of a run leaves every index.
	if _, err := b.Append(ctx, "run-1", 5, []*reinv1.Event{finish("run-1", 6, t0.Add(time.Minute))}, store.WithEpoch(eb)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Append(ctx, "run-2", 1, []*reinv1.Event{finish("run-2", 2, t0.Add(time.Minute))}); err != nil {
		t.Fatal(err)
	}
	if u, ha, hb := indexes(t, a); !slices.Equal(u, []string{"run-3"}) || len(ha)+len(hb) != 0 {
		t.Fatalf("after run-1 and run-2 ended: unowned %v, held by a %v, by b %v; want run-3 unowned only", u, ha, hb)
	}
	// A paused run whose holder's lease ended is b's to take.
	e3, err := a.Acquire(ctx, "run-3", "replica-a")
	if err != nil {
		t.Fatal(err)
	}
	pause3 := []*reinv1.Event{
		{RunId: "run-3", Sequence: 2, RecordedAt: timestamppb.New(t0), Actor: "harness", Payload: &reinv1.Event_InputRequested{InputRequested: &reinv1.InputRequested{Question: &reinv1.Question{Text: "which branch?"}}}},
		{RunId: "run-3", Sequence: 3, RecordedAt: timestamppb.New(t0), Actor: "harness", Payload: &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{From: reinv1.RunStatus_RUN_STATUS_RUNNING, To: reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT, Reason: "asked"}}},
	}
	if _, err := a.Append(ctx, "run-3", 1, pause3, store.WithEpoch(e3)); err != nil {
		t.Fatal(err)
	}
	revoke(a)
	if _, err := b.Acquire(ctx, "run-3", "replica-b"); err != nil {
		t.Fatalf("b takes the paused run whose holder's lease ended: %v", err)
	}
	if u, ha, hb := indexes(t, b); len(u)+len(ha) != 0 || !slices.Equal(hb, []string{"run-3"}) {
		t.Fatalf("after b took run-3: unowned %v, held by a %v, by b %v; want b's", u, ha, hb)
	}
	if n, err := b.HeldCount(ctx, "replica-b"); err != nil || n != 1 {
		t.Fatalf("HeldCount(replica-b) = %d, %v; want 1", n, err)
	}
}

// TestWatchLeft: the end of a replica's lease deletes its name key, and
// WatchLeft says its name; claiming a name (a put) says nothing.
func TestWatchLeft(t *testing.T) {
	ctx := t.Context()
	a, _, _, _ := replicas(t)
	left := make(chan string, 8)
	missed := make(chan struct{}, 8)
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.WatchLeft(wctx, func(name string) { left <- name }, func() { missed <- struct{}{} })
	}()
	defer func() { cancel(); <-done }()
	select {
	case <-missed: // live
	case <-time.After(30 * time.Second):
		t.Fatal("WatchLeft did not start within 30s")
	}
	g, err := shared.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := a.ClaimName(ctx, "replica/one", "test", g.ID); err != nil || !ok {
		t.Fatalf("claim: %v %v", ok, err)
	}
	if _, err := shared.Revoke(ctx, g.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case name := <-left:
		if name != "replica/one" {
			t.Fatalf("WatchLeft said %q, want replica/one (its name, unescaped)", name)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("WatchLeft did not say the replica whose lease ended within 30s")
	}
	select {
	case name := <-left:
		t.Fatalf("WatchLeft said %q a second time", name)
	default:
	}
}
