package etcd

import (
	"context"
	"testing"
	"time"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/etcdtest"
)

// TestFollowRunHearsItsRunOnly: a follow of run-1 is told of run-1's
// commits and of none of run-2's, which etcd does not send it at all; the
// follow of the change feed is told of a status change (run-2 completing)
// and not of a step that changes no status.
func TestFollowRunHearsItsRunOnly(t *testing.T) {
	ctx := t.Context()
	c := etcdtest.Start(t, 1)
	s, err := Open(ctx, c.Client(), "/rein/", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, id := range []string{"run-1", "run-2"} {
		if _, _, err := s.Create(ctx, started(id)); err != nil {
			t.Fatal(err)
		}
	}
	grew := make(chan uint64, 64)
	changed := make(chan struct{}, 64)
	missed := make(chan string, 64)
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{}, 2)
	go func() {
		s.FollowRun(wctx, "run-1", func(v uint64) { grew <- v }, func() { missed <- "run" })
		done <- struct{}{}
	}()
	go func() {
		s.FollowChanges(wctx, func() { changed <- struct{}{} }, func() { missed <- "changes" })
		done <- struct{}{}
	}()
	defer func() {
		cancel()
		<-done
		<-done
	}()
	for range 2 {
		select {
		case <-missed: // both follows are live
		case <-time.After(30 * time.Second):
			t.Fatal("a follow did not start within 30s")
		}
	}
	if _, err := s.Append(ctx, "run-2", 1, steps("run-2", 2, 2)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "run-2", 3, []*reinv1.Event{finish("run-2", 4, t0.Add(time.Minute))}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-time.After(30 * time.Second):
		t.Fatal("the change feed's follow was not told of run-2 completing within 30s")
	}
	if _, err := s.Append(ctx, "run-1", 1, steps("run-1", 2, 2)); err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-grew:
		if v != 3 {
			t.Fatalf("run-1's follow was first told of version %d: run-2's commits reached it (want run-1's 3)", v)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run-1's follow was not told of its commit within 30s")
	}
	select {
	case <-changed:
		t.Fatal("the change feed's follow was told of a step that changed no status")
	default:
	}
}
