package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestWatchChildWaitsForItsCreation: a child a parent named is watched
// again while it is not found yet (the engine creates it after the
// parent's delegation_started), until it is. The twins: a root that is not
// found fails at once; a child that never appears fails once childWait
// has passed, saying so; other errors are returned as they are.
func TestWatchChildWaitsForItsCreation(t *testing.T) {
	notFound := status.Error(codes.NotFound, "run r not found")
	calls := 0
	err := watchChild(t.Context(), true, func() error {
		if calls++; calls < 3 {
			return notFound
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("a child created after two looks: %v after %d watches, want nil after 3", err, calls)
	}

	calls = 0
	if err := watchChild(t.Context(), false, func() error { calls++; return notFound }); status.Code(err) != codes.NotFound || calls != 1 {
		t.Errorf("a root not found: %v after %d watches, want NotFound after 1", err, calls)
	}
	unavailable := status.Error(codes.Unavailable, "down")
	if err := watchChild(t.Context(), true, func() error { return unavailable }); err != unavailable {
		t.Errorf("a child whose watch failed otherwise: %v, want %v", err, unavailable)
	}

	was := childWait
	childWait = 3 * childPoll
	defer func() { childWait = was }()
	err = watchChild(t.Context(), true, func() error { return notFound })
	if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "does not exist yet") {
		t.Errorf("a child never created: %v, want NotFound saying it was waited for", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel()
	childWait = time.Hour
	if err := watchChild(ctx, true, func() error { return notFound }); status.Code(err) != codes.NotFound {
		t.Errorf("a child waited for until ctx ended: %v, want the last NotFound", err)
	}
}
