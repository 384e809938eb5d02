package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/reinhq/rein/client"
	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/tools"
	"github.com/reinhq/rein/server"
)

// serveRated is serve with a rate limit per principal.
func serveRated(t *testing.T, perSecond float64, burst int) string {
	t.Helper()
	node, err := server.Open(context.Background(), server.Config{
		Store:         boltStore(t),
		Tools:         tools.NewFixtures(map[string][]tools.FixtureResult{"lookup": {{Output: structpb.NewStringValue("found")}}}),
		RatePerSecond: perSecond, RateBurst: burst,
	})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = node.GRPC.Serve(lis) }()
	t.Cleanup(node.Close)
	return lis.Addr().String()
}

// refusals counts the ResourceExhausted answers a client's calls got, each
// try of a unary call and each stream opened.
type refusals struct{ unary, stream atomic.Int64 }

func (r *refusals) options() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			err := invoker(ctx, method, req, reply, cc, opts...)
			if status.Code(err) == codes.ResourceExhausted {
				r.unary.Add(1)
			}
			return err
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			s, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil {
				return s, err
			}
			return &refusedStream{ClientStream: s, r: r}, nil
		}),
	}
}

type refusedStream struct {
	grpc.ClientStream
	r *refusals
}

func (s *refusedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if status.Code(err) == codes.ResourceExhausted {
		s.r.stream.Add(1)
	}
	return err
}

// startWatchGet starts n runs at once, follows each with Watch to its end,
// then reads it with GetRun, as a service calling rein does.
func startWatchGet(t *testing.T, c *client.Client, n int) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			resp, err := c.Runs.StartRun(ctx, &reinv1.StartRunRequest{RequestId: fmt.Sprintf("svc-%d", i), Contract: &reinv1.TaskContract{
				Goal:   "test",
				Tools:  []*reinv1.ToolGrant{{Name: "lookup", Tier: reinv1.ToolTier_TOOL_TIER_READ}},
				Model:  &reinv1.ModelSpec{Provider: "script", Script: reads(1, final())},
				Budget: &reinv1.Budget{MaxSteps: 2},
			}})
			if err != nil {
				errs <- err
				return
			}
			id := resp.GetRun().GetRunId()
			if err := c.Watch(ctx, id, 0, func(*reinv1.Event) error { return nil }); err != nil {
				errs <- err
				return
			}
			got, err := c.Runs.GetRun(ctx, &reinv1.GetRunRequest{RunId: id})
			if err != nil {
				errs <- err
				return
			}
			if got.GetRun().GetStatus() != reinv1.RunStatus_RUN_STATUS_COMPLETED {
				errs <- errors.New(id + " is " + got.GetRun().GetStatus().String())
			}
		})
	}
	wg.Wait()
	close(errs)
	return errors.Join(func() []error {
		var all []error
		for err := range errs {
			all = append(all, err)
		}
		return all
	}()...)
}

// TestDefaultRateCarriesAService: a client that starts runs at once and
// follows each with Watch and GetRun, as a service calling rein does, is
// never refused at rein serve's default rate: the 16 runs, and a
// hundred (300 calls at once). The twin: the hundred under a tight limit
// (5 calls/s, burst 20) are refused. (At the old default, 50 calls/s and
// burst 100, they were refused on a quiet machine; on a loaded one the 300
// calls take long enough for the bucket to refill, so that case proves
// nothing either way.)
func TestDefaultRateCarriesAService(t *testing.T) {
	cases := []struct {
		name        string
		rate        float64
		burst, runs int
		refused     bool
	}{
		{"16 runs, default", server.DefaultRatePerSecond, server.DefaultRateBurst, 16, false},
		{"100 runs, default", server.DefaultRatePerSecond, server.DefaultRateBurst, 100, false},
		{"100 runs, a tight limit", 5, 20, 100, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			addr := serveRated(t, tc.rate, tc.burst)
			var r refusals
			c, err := client.Dial(addr, client.Options{DialOptions: r.options()})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			err = startWatchGet(t, c, tc.runs)
			n := r.unary.Load() + r.stream.Load()
			if tc.refused {
				if n == 0 {
					t.Fatalf("no refusal for %d runs at %g calls/s, burst %d: the twin shows nothing", tc.runs, tc.rate, tc.burst)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Fatalf("%d unary and %d stream refusals for %d runs at %g calls/s, burst %d, want none", r.unary.Load(), r.stream.Load(), tc.runs, tc.rate, tc.burst)
			}
		})
	}
}

// TestUnaryCallsHonourRetryInfo: against a tight rate (5 calls/s, burst 2),
// twelve calls in a row through the client all succeed: those refused wait
// the RetryInfo's delay and are sent again. The twins: a ResourceExhausted
// without RetryInfo (a message over the size limit) is not sent again, and
// one whose delay passes ctx's deadline returns at once, before it.
func TestUnaryCallsHonourRetryInfo(t *testing.T) {
	ctx := context.Background()
	t.Run("tight rate", func(t *testing.T) {
		addr := serveRated(t, 5, 2)
		var r refusals
		c, err := client.Dial(addr, client.Options{DialOptions: r.options()})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for i := range 12 {
			if _, err := c.Runs.ListRuns(ctx, &reinv1.ListRunsRequest{}); err != nil {
				t.Fatalf("call %d: %v", i+1, err)
			}
		}
		if r.unary.Load() == 0 {
			t.Fatal("no call was refused: the rate did not bite, so the test shows nothing")
		}
	})

	// refusing answers every unary call ResourceExhausted, with a RetryInfo
	// of delay if delay > 0, and counts the calls.
	refusing := func(delay time.Duration, calls *atomic.Int64) grpc.ServerOption {
		return grpc.ChainUnaryInterceptor(func(context.Context, any, *grpc.UnaryServerInfo, grpc.UnaryHandler) (any, error) {
			calls.Add(1)
			st := status.New(codes.ResourceExhausted, "refused")
			if delay > 0 {
				st, _ = st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(delay)})
			}
			return nil, st.Err()
		})
	}
	t.Run("no RetryInfo", func(t *testing.T) {
		var calls atomic.Int64
		_, addr := serve(t, refusing(0, &calls))
		c := dial(t, addr)
		_, err := c.Runs.ListRuns(ctx, &reinv1.ListRunsRequest{})
		if status.Code(err) != codes.ResourceExhausted || calls.Load() != 1 {
			t.Fatalf("got %v after %d calls, want ResourceExhausted after 1", err, calls.Load())
		}
	})
	t.Run("past the deadline", func(t *testing.T) {
		var calls atomic.Int64
		_, addr := serve(t, refusing(time.Hour, &calls))
		c := dial(t, addr)
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_, err := c.Runs.ListRuns(cctx, &reinv1.ListRunsRequest{})
		if status.Code(err) != codes.ResourceExhausted || calls.Load() != 1 || cctx.Err() != nil {
			t.Fatalf("got %v after %d calls (ctx %v), want ResourceExhausted after 1, before the deadline", err, calls.Load(), cctx.Err())
		}
	})
	t.Run("bounded attempts", func(t *testing.T) {
		var calls atomic.Int64
		_, addr := serve(t, refusing(time.Millisecond, &calls))
		c := dial(t, addr)
		_, err := c.Runs.ListRuns(ctx, &reinv1.ListRunsRequest{})
		if status.Code(err) != codes.ResourceExhausted || calls.Load() != client.MaxRetryInfoAttempts {
			t.Fatalf("got %v after %d calls, want ResourceExhausted after %d", err, calls.Load(), client.MaxRetryInfoAttempts)
		}
	})
}

// unavailable answers the first n calls (unary and streams, together; a
// negative n: all) Unavailable and counts every call.
func unavailable(n int64, calls *atomic.Int64) []grpc.ServerOption {
	refuse := func() error {
		if c := calls.Add(1); n < 0 || c <= n {
			return status.Error(codes.Unavailable, "restarting (test)")
		}
		return nil
	}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := refuse(); err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := refuse(); err != nil {
				return err
			}
			return h(srv, ss)
		}),
	}
}

// TestRetryOutlastsUnavailable: Retry sends a call again while the server
// answers Unavailable, and returns its answer once it comes. The twins: an
// error other than Unavailable is not retried; an Unavailable that outlasts
// Backoff.Patience is returned as it is, well before ctx's deadline.
func TestRetryOutlastsUnavailable(t *testing.T) {
	fast := client.Backoff{Min: time.Millisecond, Max: 10 * time.Millisecond, Patience: time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	list := func(c *client.Client) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := c.Runs.ListRuns(ctx, &reinv1.ListRunsRequest{})
			return err
		}
	}
	t.Run("comes back", func(t *testing.T) {
		var calls atomic.Int64
		_, addr := serve(t, unavailable(3, &calls)...)
		c, err := client.Dial(addr, client.Options{Backoff: fast})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := c.Retry(ctx, list(c)); err != nil || calls.Load() != 4 {
			t.Fatalf("Retry: %v after %d calls, want nil after 4", err, calls.Load())
		}
	})
	t.Run("not Unavailable", func(t *testing.T) {
		_, addr := serve(t)
		c, err := client.Dial(addr, client.Options{Backoff: fast})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		calls := 0
		err = c.Retry(ctx, func(ctx context.Context) error {
			calls++
			_, err := c.Runs.GetRun(ctx, &reinv1.GetRunRequest{RunId: "run_missing"})
			return err
		})
		if status.Code(err) != codes.NotFound || calls != 1 {
			t.Fatalf("Retry: %v after %d calls, want NotFound after 1", err, calls)
		}
	})
	t.Run("past patience", func(t *testing.T) {
		var calls atomic.Int64
		_, addr := serve(t, unavailable(-1, &calls)...)
		c, err := client.Dial(addr, client.Options{Backoff: fast})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		err = c.Retry(ctx, list(c))
		if status.Code(err) != codes.Unavailable || ctx.Err() != nil || calls.Load() < 2 {
			t.Fatalf("Retry: %v after %d calls (ctx %v), want Unavailable, retried, before ctx's deadline", err, calls.Load(), ctx.Err())
		}
		// A watch gives up the same way.
		err = c.Watch(ctx, "run_x", 0, func(*reinv1.Event) error { return nil })
		if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
			t.Fatalf("Watch: %v (ctx %v), want Unavailable before ctx's deadline", err, ctx.Err())
		}
	})
}
