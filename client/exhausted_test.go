package client_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/reinhq/rein/client"
	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// exhausting makes the server answer watch streams (WatchRun and
// WatchRuns) with ResourceExhausted, as a server does whose message is over
// the limit or whose disk is full, while left is not 0 (each answer counts
// it down; a negative left never ends).
func exhausting(left *atomic.Int64) grpc.ServerOption {
	return grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if n := left.Load(); n != 0 {
			left.Add(-1)
			return status.Error(codes.ResourceExhausted, "grpc: received message larger than max (6291556 vs. 4194304)")
		}
		return h(srv, ss)
	})
}

// TestWatchGivesUpOnResourceExhausted: a server that answers every watch
// with ResourceExhausted ends Watch and WatchRuns with that error after a
// bounded number of tries, well before ctx's deadline; today they retried
// it until ctx ended. The twin: a ResourceExhausted that goes away after
// two tries is retried through, and the watch hands the run over.
func TestWatchGivesUpOnResourceExhausted(t *testing.T) {
	watches := []struct {
		name  string
		watch func(context.Context, *client.Client, string) error
	}{
		{"Watch", func(ctx context.Context, c *client.Client, runID string) error {
			return c.Watch(ctx, runID, 0, func(*reinv1.Event) error { return nil })
		}},
		{"WatchRuns", func(ctx context.Context, c *client.Client, _ string) error {
			return c.WatchRuns(ctx, &reinv1.WatchRunsRequest{}, func(*reinv1.RunChange) error { return nil })
		}},
	}
	for _, w := range watches {
		t.Run(w.name, func(t *testing.T) {
			var left atomic.Int64
			left.Store(-1 << 40)
			_, addr := serve(t, exhausting(&left))
			var opened attempts
			c, err := client.Dial(addr, client.Options{Backoff: client.Backoff{Min: time.Millisecond, Max: 2 * time.Millisecond},
				DialOptions: []grpc.DialOption{grpc.WithStreamInterceptor(opened.interceptor())}})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err = w.watch(ctx, c, "run_x")
			if status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("%s returned %v after %d tries, want ResourceExhausted", w.name, err, opened.n.Load())
			}
			if n := opened.n.Load(); n < 2 || n > 10 {
				t.Fatalf("%s tried %d times, want a few (retried, but bounded)", w.name, n)
			}
		})
	}
	t.Run("transient", func(t *testing.T) {
		var left atomic.Int64
		_, addr := serve(t, exhausting(&left))
		c, err := client.Dial(addr, client.Options{Backoff: client.Backoff{Min: time.Millisecond, Max: 2 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		runID, log := settle(t, c, "r", reads(1, final()))
		left.Store(2)
		var got []*reinv1.Event
		if err := c.Watch(context.Background(), runID, 0, func(ev *reinv1.Event) error {
			got = append(got, ev)
			return nil
		}); err != nil {
			t.Fatalf("Watch returned %v, want nil once the server answers", err)
		}
		sameEvents(t, got, log)
	})
}
