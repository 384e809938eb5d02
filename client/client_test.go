package client_test

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/reinhq/rein/client"
	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/store/bolt"
	"github.com/reinhq/rein/internal/tools"
	"github.com/reinhq/rein/server"
)

// A real node on a temporary bbolt file, served on loopback TCP, reached
// through client.Dial.

func serve(t *testing.T, opts ...grpc.ServerOption) (*server.Node, string) {
	t.Helper()
	node, err := server.Open(context.Background(), server.Config{
		Store:         boltStore(t),
		Tools:         tools.NewFixtures(map[string][]tools.FixtureResult{"lookup": {{Output: structpb.NewStringValue("found")}}}),
		ServerOptions: opts,
		// As rein serve: every model call streams (WatchOutput's tests).
		StreamModelCalls: true,
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
	return node, lis.Addr().String()
}

// conns dials TCP for a client and can cut its current connection.
type conns struct {
	mu       sync.Mutex
	cur, cut net.Conn
	dials    int
}

func (c *conns) dial(ctx context.Context, target string) (net.Conn, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", target)
	if err == nil {
		c.mu.Lock()
		c.cur = conn
		c.dials++
		c.mu.Unlock()
	}
	return conn, err
}

// cutNew cuts the current connection unless it was cut already (events
// received before a cut are still handed over), and reports whether it
// did.
func (c *conns) cutNew() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur == c.cut {
		return false
	}
	_ = c.cur.Close()
	c.cut = c.cur
	return true
}

func (c *conns) dialled() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dials
}

// attempts counts the WatchRun and WatchRuns streams a client opens.
type attempts struct{ n atomic.Int64 }

func (a *attempts) interceptor() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		a.n.Add(1)
		return streamer(ctx, desc, cc, method, opts...)
	}
}

func dial(t *testing.T, addr string, opts ...grpc.DialOption) *client.Client {
	t.Helper()
	c, err := client.Dial(addr, client.Options{DialOptions: opts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func decision(d *reinv1.Decision) *reinv1.ScriptedReply {
	return &reinv1.ScriptedReply{Reply: &reinv1.ScriptedReply_Decision{Decision: d}, Usage: &reinv1.Usage{InputTokens: 10, OutputTokens: 5}}
}

func readCall() *reinv1.ScriptedReply {
	return decision(&reinv1.Decision{Action: &reinv1.Decision_ToolCall{ToolCall: &reinv1.ToolCall{Tool: "lookup", CallId: "c"}}})
}

func final() *reinv1.ScriptedReply {
	return decision(&reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: "done"}}})
}

func ask() *reinv1.ScriptedReply {
	return decision(&reinv1.Decision{Action: &reinv1.Decision_AskHuman{AskHuman: &reinv1.AskHuman{Question: "which?"}}})
}

// reads is a script of n reads, then last.
func reads(n int, last *reinv1.ScriptedReply) []*reinv1.ScriptedReply {
	var out []*reinv1.ScriptedReply
	for range n {
		out = append(out, readCall())
	}
	return append(out, last)
}

// slow makes each reply of a script wait ms.
func slow(ms uint32, script []*reinv1.ScriptedReply) []*reinv1.ScriptedReply {
	for _, r := range script {
		r.DelayMs = ms
	}
	return script
}

// start starts a run of script.
func start(t *testing.T, c *client.Client, requestID string, script []*reinv1.ScriptedReply) string {
	t.Helper()
	resp, err := c.Runs.StartRun(context.Background(), &reinv1.StartRunRequest{RequestId: requestID, Contract: &reinv1.TaskContract{
		Goal:   "test",
		Tools:  []*reinv1.ToolGrant{{Name: "lookup", Tier: reinv1.ToolTier_TOOL_TIER_READ}},
		Model:  &reinv1.ModelSpec{Provider: "script", Script: script},
		Budget: &reinv1.Budget{MaxSteps: uint32(len(script))},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetRun().GetRunId()
}

// settle starts a run and waits, with a plain stream, until it pauses or
// ends; it returns the run's whole stored log.
func settle(t *testing.T, c *client.Client, requestID string, script []*reinv1.ScriptedReply) (string, []*reinv1.Event) {
	t.Helper()
	ctx := context.Background()
	runID := start(t, c, requestID, script)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.Runs.WatchRun(wctx, &reinv1.WatchRunRequest{RunId: runID})
	if err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("watch ended before the run paused or ended: %v", err)
		}
		if sc := resp.GetEvent().GetStatusChanged(); sc != nil && sc.GetTo() != reinv1.RunStatus_RUN_STATUS_RUNNING {
			break
		}
	}
	return runID, events(t, c, runID)
}

// events is a run's whole stored log.
func events(t *testing.T, c *client.Client, runID string) []*reinv1.Event {
	t.Helper()
	var out []*reinv1.Event
	req := &reinv1.ListEventsRequest{RunId: runID}
	for {
		resp, err := c.Runs.ListEvents(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, resp.GetEvents()...)
		if resp.GetNextPageToken() == "" {
			return out
		}
		req.PageToken = resp.GetNextPageToken()
	}
}

// sameEvents reports how got differs from want, event by event.
func sameEvents(t *testing.T, got, want []*reinv1.Event) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("handed over %d events, want %d", len(got), len(want))
	}
	for i := range got {
		if !proto.Equal(got[i], want[i]) {
			t.Fatalf("event %d handed over:\n got  %v\n want %v", i, got[i], want[i])
		}
	}
}

// resent counts what the resending server sent again.
type resent struct {
	// overlap counts the events before the cursor that resumed streams
	// asked for again; twice counts the events sent twice.
	overlap, twice atomic.Int64
}

// resending makes the server re-send what a watcher has seen: it moves each
// WatchRun request's after_sequence back by `back`, and sends every event
// twice.
func resending(back uint64, n *resent) grpc.ServerOption {
	return grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if info.FullMethod != reinv1.RunService_WatchRun_FullMethodName {
			return h(srv, ss)
		}
		return h(srv, &resendStream{ServerStream: ss, back: back, n: n})
	})
}

type resendStream struct {
	grpc.ServerStream
	back uint64
	n    *resent
}

func (s *resendStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if req, ok := m.(*reinv1.WatchRunRequest); ok && err == nil {
		moved := min(req.AfterSequence, s.back)
		req.AfterSequence -= moved
		s.n.overlap.Add(int64(moved))
	}
	return err
}

func (s *resendStream) SendMsg(m any) error {
	if err := s.ServerStream.SendMsg(m); err != nil {
		return err
	}
	s.n.twice.Add(1)
	return s.ServerStream.SendMsg(m)
}

// skipping makes the server leave out the event with one sequence.
func skipping(seq uint64) grpc.ServerOption {
	return grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		return h(srv, &skipStream{ServerStream: ss, seq: seq})
	})
}

type skipStream struct {
	grpc.ServerStream
	seq uint64
}

func (s *skipStream) SendMsg(m any) error {
	if resp, ok := m.(*reinv1.WatchRunResponse); ok && resp.GetEvent().GetSequence() == s.seq {
		return nil
	}
	return s.ServerStream.SendMsg(m)
}

// TestWatchHandsEachEventOnce: the server re-sends events (each twice, and
// from before the cursor on every resume) and the connection is cut twice
// while the run goes on; client.Watch still hands over each event exactly
// once, in order, and returns nil at the terminal event.
func TestWatchHandsEachEventOnce(t *testing.T) {
	var n resent
	_, addr := serve(t, resending(3, &n))
	var cs conns
	var opened attempts
	c := dial(t, addr, grpc.WithContextDialer(cs.dial), grpc.WithStreamInterceptor(opened.interceptor()))
	runID := start(t, dial(t, addr), "r", slow(3, reads(30, final())))

	cuts := []int{10, 40}
	var got []*reinv1.Event
	err := c.Watch(context.Background(), runID, 0, func(ev *reinv1.Event) error {
		got = append(got, ev)
		if len(cuts) > 0 && len(got) >= cuts[0] && cs.cutNew() {
			cuts = cuts[1:]
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Watch returned %v, want nil at the terminal event", err)
	}
	log := events(t, c, runID)
	if last := log[len(log)-1]; last.GetStatusChanged().GetTo() != reinv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Fatalf("the run's last event is %v, want its completion", last)
	}
	sameEvents(t, got, log)
	if len(cuts) > 0 || opened.n.Load() < 3 {
		t.Fatalf("%d cuts left undone, %d streams opened; the test needs Watch to resume twice", len(cuts), opened.n.Load())
	}
	if n.overlap.Load() == 0 || n.twice.Load() == 0 {
		t.Fatalf("the server re-sent %d events on resume and %d twice; the test needs both", n.overlap.Load(), n.twice.Load())
	}
	t.Logf("%d events handed over once each from %d streams; the server re-sent %d on resume and %d twice",
		len(got), opened.n.Load(), n.overlap.Load(), n.twice.Load())
}

// TestWatchRefusesAGap is the failure twin: a server that skips an event
// gets an error, not a silent gap.
func TestWatchRefusesAGap(t *testing.T) {
	_, addr := serve(t, skipping(5))
	c := dial(t, addr)
	runID, _ := settle(t, c, "r", reads(3, final()))
	var got []uint64
	err := c.Watch(context.Background(), runID, 0, func(ev *reinv1.Event) error {
		got = append(got, ev.GetSequence())
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "skipped") {
		t.Fatalf("Watch returned %v, want an error saying the server skipped events", err)
	}
	if len(got) != 4 || got[3] != 4 {
		t.Fatalf("handed over %v before the gap, want 1..4", got)
	}
}

// TestWatchEndsAtTerminal: a finished run's watch returns nil after its
// last event, from any cursor up to the head; beyond the head it is
// OutOfRange, without retrying.
func TestWatchEndsAtTerminal(t *testing.T) {
	_, addr := serve(t)
	var opened attempts
	c := dial(t, addr, grpc.WithStreamInterceptor(opened.interceptor()))
	runID, log := settle(t, c, "r", reads(2, final()))
	head := uint64(len(log))
	for _, after := range []uint64{0, 3, head} {
		var got []*reinv1.Event
		if err := c.Watch(context.Background(), runID, after, func(ev *reinv1.Event) error {
			got = append(got, ev)
			return nil
		}); err != nil {
			t.Fatalf("after %d: Watch returned %v, want nil", after, err)
		}
		sameEvents(t, got, log[after:])
	}
	opened.n.Store(0)
	err := c.Watch(context.Background(), runID, head+1, func(*reinv1.Event) error { return nil })
	if status.Code(err) != codes.OutOfRange || opened.n.Load() != 1 {
		t.Fatalf("after the head: Watch returned %v after %d attempts, want OutOfRange at once", err, opened.n.Load())
	}
}

// TestWatchMissingRun: NotFound is returned at once, not retried; so is a
// request the server finds invalid.
func TestWatchMissingRun(t *testing.T) {
	_, addr := serve(t)
	var opened attempts
	c := dial(t, addr, grpc.WithStreamInterceptor(opened.interceptor()))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, tc := range []struct {
		runID string
		code  codes.Code
	}{{"run_missing", codes.NotFound}, {"", codes.InvalidArgument}} {
		opened.n.Store(0)
		called := false
		err := c.Watch(ctx, tc.runID, 0, func(*reinv1.Event) error { called = true; return nil })
		if status.Code(err) != tc.code || opened.n.Load() != 1 || called {
			t.Fatalf("run %q: Watch returned %v after %d attempts (fn called: %v), want %v at once", tc.runID, err, opened.n.Load(), called, tc.code)
		}
	}
}

// TestWatchReturnsCtxError: ctx's end stops Watch with ctx's error, both
// while a paused run's stream is open and while it retries a server that
// is not there; fn's error is returned as it is.
func TestWatchReturnsCtxError(t *testing.T) {
	_, addr := serve(t)
	c := dial(t, addr)
	runID, log := settle(t, c, "paused", reads(1, ask()))

	// Cancelled while the stream waits on a paused run.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var got []*reinv1.Event
	err := c.Watch(ctx, runID, 0, func(ev *reinv1.Event) error {
		got = append(got, ev)
		if len(got) == len(log) {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch returned %v, want context.Canceled", err)
	}
	sameEvents(t, got, log)

	// Deadline while retrying a server that is gone.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := lis.Addr().String()
	_ = lis.Close()
	var opened attempts
	dead := dial(t, gone, grpc.WithStreamInterceptor(opened.interceptor()))
	dctx, dcancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer dcancel()
	err = dead.Watch(dctx, runID, 0, func(*reinv1.Event) error { return nil })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Watch against no server returned %v, want context.DeadlineExceeded", err)
	}
	if opened.n.Load() < 2 {
		t.Fatalf("Watch tried %d times in 500ms; Unavailable should be retried", opened.n.Load())
	}

	// fn's error ends the watch as it is.
	stop := errors.New("enough")
	n := 0
	err = c.Watch(context.Background(), runID, 0, func(*reinv1.Event) error {
		if n++; n == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || n != 2 {
		t.Fatalf("Watch returned %v after %d events, want fn's error after 2", err, n)
	}
}

// TestWatchRunsResumes: client.WatchRuns hands over each status change
// once, in commit order, across cut connections, and returns fn's error.
func TestWatchRunsResumes(t *testing.T) {
	node, addr := serve(t)
	var cs conns
	c := dial(t, addr, grpc.WithContextDialer(cs.dial))
	setup := dial(t, addr)

	// Every change that arrives on a connection not yet cut cuts it; the
	// eighth change ends the watch.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	handed := make(chan *reinv1.RunChange, 100)
	done := errors.New("done")
	count := 0
	var req reinv1.WatchRunsRequest
	ended := make(chan error, 1)
	go func() {
		ended <- c.WatchRuns(ctx, &req, func(ch *reinv1.RunChange) error {
			handed <- ch
			cs.cutNew()
			if count++; count == 8 {
				return done
			}
			return nil
		})
	}()
	var got []*reinv1.RunChange
	for i, r := range []string{"a", "b", "c", "d"} {
		script := reads(1, final())
		if r == "b" {
			script = reads(0, ask())
		}
		settle(t, setup, r, script)
		// Wait for this run's last change before the next run starts.
		for len(got) < 2*(i+1) {
			select {
			case ch := <-handed:
				got = append(got, ch)
			case <-ctx.Done():
				t.Fatalf("%d changes handed over before the deadline, want %d", len(got), 2*(i+1))
			}
		}
	}
	if err := <-ended; !errors.Is(err, done) {
		t.Fatalf("WatchRuns returned %v, want fn's error", err)
	}
	want, _, err := node.Store.Changes(context.Background(), 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) || len(want) != 8 {
		t.Fatalf("handed over %d changes, the store holds %d, want 8", len(got), len(want))
	}
	for i := range want {
		if !proto.Equal(got[i], want[i].Change) {
			t.Fatalf("change %d:\n got  %v\n want %v", i, got[i], want[i].Change)
		}
	}
	if d := cs.dialled(); d < 4 {
		t.Fatalf("dialled %d times; each run's changes should have come on a new connection", d)
	}
}

func boltStore(t *testing.T) store.Store {
	t.Helper()
	st, err := bolt.Open(filepath.Join(t.TempDir(), "rein.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}
