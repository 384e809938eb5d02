package client_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// streams counts the streams the server has open, and signals each one
// that closes.
type streams struct {
	open   atomic.Int64
	closed chan struct{} // capacity 1: a stream closed since the last wait
}

func newStreams() *streams { return &streams{closed: make(chan struct{}, 1)} }

// count is how many streams the server has open.
func (s *streams) count() int64 { return s.open.Load() }

// counting is the server option that keeps s's count.
func (s *streams) counting() grpc.ServerOption {
	return grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		s.open.Add(1)
		defer func() {
			s.open.Add(-1)
			select {
			case s.closed <- struct{}{}:
			default:
			}
		}()
		return h(srv, ss)
	})
}

// closedWithin waits, at most d, for the server to have no stream open:
// it reads the count again each time a stream closes.
func (s *streams) closedWithin(d time.Duration) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for s.open.Load() != 0 {
		select {
		case <-s.closed:
		case <-deadline.C:
			return false
		}
	}
	return true
}

// TestWatchClosesItsStream: a watch of a paused run (whose stream the
// server keeps open) that ends on its callback's error, or on a gap the
// server left, closes its stream on the server at once, though the
// caller's ctx goes on; so does WatchRuns on its callback's error.
func TestWatchClosesItsStream(t *testing.T) {
	open := newStreams()
	_, addr := serve(t, open.counting(), skipping(0))
	c := dial(t, addr)
	runID, _ := settle(t, c, "r", []*reinv1.ScriptedReply{ask()})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // only at the end: the watches must not wait for it
	stop := errors.New("enough")

	if err := c.Watch(ctx, runID, 0, func(*reinv1.Event) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("Watch returned %v, want the callback's error", err)
	}
	if !open.closedWithin(10 * time.Second) {
		t.Fatalf("Watch returned on its callback's error with %d streams still open on the server", open.count())
	}

	if err := c.WatchRuns(ctx, &reinv1.WatchRunsRequest{}, func(*reinv1.RunChange) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("WatchRuns returned %v, want the callback's error", err)
	}
	if !open.closedWithin(10 * time.Second) {
		t.Fatalf("WatchRuns returned on its callback's error with %d streams still open on the server", open.count())
	}
}

// TestWatchClosesItsStreamOnAGap is the gap's case: the server leaves an
// event out of a paused run's stream; Watch refuses it and closes the
// stream.
func TestWatchClosesItsStreamOnAGap(t *testing.T) {
	open := newStreams()
	_, addr := serve(t, open.counting(), skipping(2))
	c := dial(t, addr)
	runID, _ := settle(t, c, "r", []*reinv1.ScriptedReply{ask()})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err := c.Watch(ctx, runID, 0, func(*reinv1.Event) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "skipped") {
		t.Fatalf("Watch returned %v, want an error saying the server skipped events", err)
	}
	if !open.closedWithin(10 * time.Second) {
		t.Fatalf("Watch refused a gap with %d streams still open on the server", open.count())
	}
}
