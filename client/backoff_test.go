package client_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/reinhq/rein/client"
	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// TestWatchBackoffIsAnOption: Options.Backoff sets how soon Watch and
// WatchRuns try again against a server that is not there. With waits of
// a few milliseconds they try ten times or more in 300ms; the twin, a first
// wait of an hour, tries once and waits out the deadline; the zero
// Backoff takes the default, whose 50ms first wait allows a few tries.
func TestWatchBackoffIsAnOption(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := lis.Addr().String()
	_ = lis.Close()
	watches := []struct {
		name  string
		watch func(context.Context, *client.Client) error
	}{
		{"Watch", func(ctx context.Context, c *client.Client) error {
			return c.Watch(ctx, "run_x", 0, func(*reinv1.Event) error { return nil })
		}},
		{"WatchRuns", func(ctx context.Context, c *client.Client) error {
			return c.WatchRuns(ctx, &reinv1.WatchRunsRequest{}, func(*reinv1.RunChange) error { return nil })
		}},
	}
	for _, tc := range []struct {
		name     string
		backoff  client.Backoff
		min, max int64
	}{
		{"fast", client.Backoff{Min: time.Millisecond, Max: 2 * time.Millisecond}, 10, 1 << 30},
		{"an hour", client.Backoff{Min: time.Hour, Max: time.Hour}, 1, 1},
		{"default", client.Backoff{}, 2, 6},
	} {
		for _, w := range watches {
			name, watch := w.name, w.watch
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				var opened attempts
				c, err := client.Dial(gone, client.Options{Backoff: tc.backoff, DialOptions: []grpc.DialOption{grpc.WithStreamInterceptor(opened.interceptor())}})
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				defer cancel()
				if err := watch(ctx, c); !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("%s against no server returned %v, want context.DeadlineExceeded", name, err)
				}
				if n := opened.n.Load(); n < tc.min || n > tc.max {
					t.Fatalf("%s with %+v tried %d times in 300ms, want %d to %d", name, tc.backoff, n, tc.min, tc.max)
				}
			})
		}
	}
}
