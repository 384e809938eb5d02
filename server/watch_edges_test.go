package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/reinhq/rein/client"
	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/auth"
	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/tools"
)

// ---- 3. a watcher that never reads ----

// runGates holds each run's model calls until the test opens its gate, so a
// watcher can attach before the run moves.
type runGates struct {
	mu sync.Mutex
	m  map[string]chan struct{}
}

func (g *runGates) gate(runID string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m == nil {
		g.m = map[string]chan struct{}{}
	}
	if g.m[runID] == nil {
		g.m[runID] = make(chan struct{})
	}
	return g.m[runID]
}

func (g *runGates) open(runID string) { close(g.gate(runID)) }

type gatedModel struct {
	model.Model
	g *runGates
}

func (m gatedModel) Next(ctx context.Context, req *model.Request) (*model.Reply, error) {
	select {
	case <-m.g.gate(req.RunID):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return m.Model.Next(ctx, req)
}

// hubSubs is the hub's subscriptions to runID.
func hubSubs(h *Hub, runID string) []*Subscription {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []*Subscription
	for s := range h.subs[runID] {
		out = append(out, s)
	}
	return out
}

// TestStuckWatcherSlowsNobody: a watcher that opens a stream and never reads
// (its flow-control window small and soon full) slows neither the run it
// watches nor another watcher of it: the run completes and the other
// watcher gets every event, as without it. The server holds one
// subscription with a capacity-1 channel for it, and the heap stays small.
func TestStuckWatcherSlowsNobody(t *testing.T) {
	const steps = 500 // 2,000 events
	g := &runGates{}
	script := readsScript(steps, 0)
	big := strings.Repeat("x", 256)
	node := openWatchNode(t, Config{
		Tools:  tools.NewFixtures(map[string][]tools.FixtureResult{"lookup": {{Output: structpb.NewStringValue(big)}}}),
		Models: func(*reinv1.ModelSpec) (model.Model, error) { return gatedModel{model.NewScript(script), g}, nil },
	})
	addr := serveWatchTCP(t, node, "127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()

	// follow runs a gated run to its end with one normal watcher, and
	// returns how long that took.
	follow := func(runID string) time.Duration {
		t.Helper()
		w := &dropWatcher{runID: runID}
		done := make(chan struct{})
		go func() {
			defer close(done)
			w.run(ctx, addr)
		}()
		pollUntil(t, 10*time.Second, "the normal watcher did not attach", func() bool { return w.seen.Load() >= 1 })
		began := time.Now()
		g.open(runID)
		<-done
		took := time.Since(began)
		wantRunStatus(t, node.Store, runID, reinv1.RunStatus_RUN_STATUS_COMPLETED)
		log := watchLog(t, node.Store, runID)
		if len(log) != 4*steps {
			t.Fatalf("run %s has %d events, want %d", runID, len(log), 4*steps)
		}
		if err := w.check(log); err != nil {
			t.Fatalf("normal watcher of %s: %v", runID, err)
		}
		return took
	}

	alone := follow(startWatchedRun(t, node, "alone", readsContract(steps)))

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	runID := startWatchedRun(t, node, "stuck", readsContract(steps))
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	stuck, err := reinv1.NewRunServiceClient(cc).WatchRun(ctx, &reinv1.WatchRunRequest{RunId: runID})
	if err != nil {
		t.Fatal(err)
	}
	var sub *Subscription
	pollUntil(t, 10*time.Second, "the stuck watcher did not subscribe", func() bool {
		subs := hubSubs(node.Hub, runID)
		if len(subs) == 1 {
			sub = subs[0]
		}
		return sub != nil
	})
	if cap(sub.C) != 1 {
		t.Fatalf("the stuck watcher's wake-up channel has capacity %d, want 1", cap(sub.C))
	}

	withStuck := follow(runID)

	// The normal watcher is gone; the stuck one is still there, and all the
	// hub holds for it is its one subscription.
	pollUntil(t, 10*time.Second, "the normal watcher's subscription was not closed", func() bool {
		return len(hubSubs(node.Hub, runID)) == 1
	})
	if subs := hubSubs(node.Hub, runID); subs[0] != sub || cap(subs[0].C) != 1 {
		t.Fatalf("the hub holds %v for the stuck watcher, want its one capacity-1 subscription", subs)
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	growth := int64(after.HeapInuse) - int64(before.HeapInuse)
	var logBytes int
	log := watchLog(t, node.Store, runID)
	for _, ev := range log {
		logBytes += proto.Size(ev)
	}
	t.Logf("run of %d events (%d KiB encoded): %v alone, %v beside a stuck watcher; heap in use %d KiB → %d KiB (%+d KiB)",
		len(log), logBytes>>10, alone, withStuck, before.HeapInuse>>10, after.HeapInuse>>10, growth>>10)
	if logBytes < 4*(64<<10) {
		t.Fatalf("the log is %d bytes: too small to fill the stuck watcher's windows; make the run bigger", logBytes)
	}
	if growth > 32<<20 {
		t.Fatalf("heap in use grew by %d MiB beside one stuck watcher, want under 32 MiB", growth>>20)
	}

	// Once it reads, the stuck watcher catches up from the store.
	var got []*reinv1.Event
	for {
		resp, err := stuck.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the stuck watcher's stream: %v", err)
		}
		got = append(got, resp.GetEvent())
	}
	if err := validateWatch(runID, log, 0, handedOver(0, got)); err != nil {
		t.Fatalf("the stuck watcher, once reading: %v", err)
	}
}

// ---- 4. WatchRun and WatchRuns edge cases ----

// TestWatchRunPausedAndBeyondHead: a paused run's stream stays open through
// wake-ups that bring nothing, and later events (a cancel) arrive; a watch
// from beyond the head is OutOfRange, at once.
func TestWatchRunPausedAndBeyondHead(t *testing.T) {
	s := newTestServer(t, fixtures())
	run := s.start(t, "r", contract(nil, readCall("lookup"), readCall("lookup"), ask("which one?")))
	if run.GetStatus() != reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT {
		t.Fatalf("status %v, want needs_input", run.GetStatus())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	for _, after := range []uint64{run.GetVersion() + 1, run.GetVersion() + 1000} {
		_, err := recvErr(s.client.WatchRun(ctx, &reinv1.WatchRunRequest{RunId: run.GetRunId(), AfterSequence: after}))
		st := wantCode(t, err, codes.OutOfRange)
		if !strings.Contains(st.Message(), fmt.Sprint(run.GetVersion())) {
			t.Fatalf("message %q should name the run's last event %d", st.Message(), run.GetVersion())
		}
	}

	type result struct {
		evs []*reinv1.Event
		err error
	}
	watch := func(after uint64) (chan *reinv1.Event, chan result) {
		stream, err := s.client.WatchRun(ctx, &reinv1.WatchRunRequest{RunId: run.GetRunId(), AfterSequence: after})
		if err != nil {
			t.Fatal(err)
		}
		each, end := make(chan *reinv1.Event, 100), make(chan result, 1)
		go func() {
			var r result
			for {
				resp, err := stream.Recv()
				if err != nil {
					if !errors.Is(err, io.EOF) {
						r.err = err
					}
					end <- r
					return
				}
				r.evs = append(r.evs, resp.GetEvent())
				each <- resp.GetEvent()
			}
		}()
		return each, end
	}
	// s.start left its own watch of the run open.
	others := len(hubSubs(s.node.Hub, run.GetRunId()))
	fromStart, endStart := watch(0)
	fromHead, endHead := watch(run.GetVersion())
	for range run.GetVersion() {
		select {
		case <-fromStart:
		case <-ctx.Done():
			t.Fatal("the history of the paused run did not arrive")
		}
	}
	// Wake both watchers with nothing new: they re-read and stay open.
	pollUntil(t, 10*time.Second, "the watchers did not subscribe", func() bool { return len(hubSubs(s.node.Hub, run.GetRunId())) == others+2 })
	for range 3 {
		s.node.Hub.Notify(run.GetRunId())
	}
	select {
	case r := <-endStart:
		t.Fatalf("the paused run's stream ended (%v) before the run did", r.err)
	case r := <-endHead:
		t.Fatalf("the paused run's stream from its head ended (%v) before the run did", r.err)
	case ev := <-fromHead:
		t.Fatalf("the stream from the head sent %v before anything happened", ev)
	default:
	}

	if _, err := s.client.CancelRun(ctx, &reinv1.CancelRunRequest{RunId: run.GetRunId(), Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	log := watchLog(t, s.node.Store, run.GetRunId())
	if last := log[len(log)-1]; last.GetStatusChanged().GetTo() != reinv1.RunStatus_RUN_STATUS_CANCELLED {
		t.Fatalf("last stored event %v, want the cancellation", last)
	}
	for _, c := range []struct {
		after uint64
		end   chan result
	}{{0, endStart}, {run.GetVersion(), endHead}} {
		r := <-c.end
		if r.err != nil {
			t.Fatalf("watch after %d ended with %v, want OK", c.after, r.err)
		}
		if err := validateWatch(run.GetRunId(), log, c.after, handedOver(c.after, r.evs)); err != nil {
			t.Fatalf("watch after %d: %v", c.after, err)
		}
	}
}

// watchTenants gives alice (tenant acme) and bob (tenant globex) an
// operator token each.
func watchTenants(t *testing.T) *auth.Directory {
	t.Helper()
	sum := func(tok string) string { h := sha256.Sum256([]byte(tok)); return hex.EncodeToString(h[:]) }
	dir, err := auth.ParseDirectory([]byte(fmt.Sprintf(`{"principals": [
		{"id": "alice", "tenant": "acme", "roles": ["operator"], "token_sha256": %q},
		{"id": "bob", "tenant": "globex", "roles": ["operator"], "token_sha256": %q}]}`, sum("alice-token"), sum("bob-token"))))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// recvChanges reads a WatchRuns stream until `until` holds for a change
// (that change included).
func recvChanges(t *testing.T, stream grpc.ServerStreamingClient[reinv1.WatchRunsResponse], until func(*reinv1.RunChange) bool) []*reinv1.RunChange {
	t.Helper()
	var out []*reinv1.RunChange
	for {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("WatchRuns ended after %d changes: %v", len(out), err)
		}
		out = append(out, resp.GetChange())
		if until(resp.GetChange()) {
			return out
		}
	}
}

// diffChanges compares a stream with the expected changes, by value and in
// order.
func diffChanges(got, want []*reinv1.RunChange) error {
	for i := 0; i < max(len(got), len(want)); i++ {
		switch {
		case i >= len(got):
			return fmt.Errorf("missing change %d: %v", i, want[i])
		case i >= len(want):
			return fmt.Errorf("extra change %d: %v", i, got[i])
		case !proto.Equal(got[i], want[i]):
			return fmt.Errorf("change %d:\n got  %v\n want %v", i, got[i], want[i])
		}
	}
	return nil
}

// TestWatchRunsTenantsFiltersResume: WatchRuns streams status changes in
// commit order, only the caller's tenant's, filtered by status, live and
// from history, resumable from a cursor; a cursor beyond the head is
// OutOfRange. Another tenant's run is NotFound to WatchRun.
func TestWatchRunsTenantsFiltersResume(t *testing.T) {
	node := openWatchNode(t, Config{Directory: watchTenants(t)})
	addr := serveWatchTCP(t, node, "127.0.0.1:0")
	dial := func(token string) *client.Client {
		c, err := client.Dial(addr, client.Options{Token: token})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	alice, bob := dial("alice-token"), dial("bob-token")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Live watchers, opened before any run exists.
	watchRuns := func(c *client.Client, req *reinv1.WatchRunsRequest) grpc.ServerStreamingClient[reinv1.WatchRunsResponse] {
		t.Helper()
		stream, err := c.Runs.WatchRuns(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return stream
	}
	terminal := []reinv1.RunStatus{reinv1.RunStatus_RUN_STATUS_COMPLETED, reinv1.RunStatus_RUN_STATUS_CANCELLED}
	liveAlice := watchRuns(alice, &reinv1.WatchRunsRequest{})
	liveAliceEnds := watchRuns(alice, &reinv1.WatchRunsRequest{Statuses: terminal})
	liveBob := watchRuns(bob, &reinv1.WatchRunsRequest{})
	pollUntil(t, 10*time.Second, "the live watchers did not subscribe", func() bool {
		node.Hub.mu.Lock()
		defer node.Hub.mu.Unlock()
		return len(node.Hub.all) == 3
	})

	// Interleave the tenants' changes; each step waits for the run to
	// settle, so the commit order is known.
	start := func(c *client.Client, req string, ct *reinv1.TaskContract) string {
		t.Helper()
		resp, err := c.Runs.StartRun(ctx, &reinv1.StartRunRequest{RequestId: req, Contract: ct})
		if err != nil {
			t.Fatal(err)
		}
		if err := node.Engine.Wait(ctx, resp.GetRun().GetRunId()); err != nil {
			t.Fatal(err)
		}
		return resp.GetRun().GetRunId()
	}
	cancelRun := func(c *client.Client, runID string) {
		t.Helper()
		if _, err := c.Runs.CancelRun(ctx, &reinv1.CancelRunRequest{RunId: runID}); err != nil {
			t.Fatal(err)
		}
	}
	start(alice, "a1", contract(nil, final("a1")))
	b1 := start(bob, "b1", contract(nil, ask("b1?")))
	a2 := start(alice, "a2", contract(nil, ask("a2?")))
	cancelRun(alice, a2)
	b2 := start(bob, "b2", contract(nil, final("b2")))
	cancelRun(bob, b1)
	marker := start(alice, "marker", contract(nil, final("end")))

	// What each should see: the store's change log, in commit order,
	// filtered.
	all, head, err := node.Store.Changes(ctx, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 12 || all[len(all)-1].Cursor != head {
		t.Fatalf("the store holds %d changes up to %d, want 12", len(all), head)
	}
	filter := func(tenant string, statuses ...reinv1.RunStatus) []*reinv1.RunChange {
		var out []*reinv1.RunChange
		for _, c := range all {
			if c.Tenant == tenant && (len(statuses) == 0 || slices.Contains(statuses, c.Change.GetStatus())) {
				out = append(out, c.Change)
			}
		}
		return out
	}
	isEnd := func(runID string, st reinv1.RunStatus) func(*reinv1.RunChange) bool {
		return func(c *reinv1.RunChange) bool { return c.GetRunId() == runID && c.GetStatus() == st }
	}
	aliceAll := filter("acme")
	aliceEnds := filter("acme", terminal...)
	bobAll := filter("globex")
	if len(aliceAll) != 7 || len(aliceEnds) != 3 || len(bobAll) != 5 {
		t.Fatalf("expected changes: alice %d, alice's ends %d, bob %d; want 7, 3, 5", len(aliceAll), len(aliceEnds), len(bobAll))
	}
	markerDone := isEnd(marker, reinv1.RunStatus_RUN_STATUS_COMPLETED)
	cases := []struct {
		name   string
		stream grpc.ServerStreamingClient[reinv1.WatchRunsResponse]
		until  func(*reinv1.RunChange) bool
		want   []*reinv1.RunChange
	}{
		{"alice live", liveAlice, markerDone, aliceAll},
		{"alice live, ends only", liveAliceEnds, markerDone, aliceEnds},
		{"bob live", liveBob, isEnd(b1, reinv1.RunStatus_RUN_STATUS_CANCELLED), bobAll},
		{"alice history", watchRuns(alice, &reinv1.WatchRunsRequest{}), markerDone, aliceAll},
		{"alice history, ends only", watchRuns(alice, &reinv1.WatchRunsRequest{Statuses: terminal}), markerDone, aliceEnds},
		{"alice history, paused only", watchRuns(alice, &reinv1.WatchRunsRequest{Statuses: []reinv1.RunStatus{reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT}}),
			isEnd(a2, reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT), filter("acme", reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT)},
		{"alice resumed", watchRuns(alice, &reinv1.WatchRunsRequest{AfterCursor: aliceAll[2].GetCursor()}), markerDone, aliceAll[3:]},
		{"alice resumed between her changes", watchRuns(alice, &reinv1.WatchRunsRequest{AfterCursor: aliceAll[2].GetCursor() + 1}), markerDone,
			slices.DeleteFunc(slices.Clone(aliceAll[3:]), func(c *reinv1.RunChange) bool { return c.GetCursor() <= aliceAll[2].GetCursor()+1 })},
		{"bob resumed", watchRuns(bob, &reinv1.WatchRunsRequest{AfterCursor: bobAll[1].GetCursor()}), isEnd(b1, reinv1.RunStatus_RUN_STATUS_CANCELLED), bobAll[2:]},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := recvChanges(t, tc.stream, tc.until)
			if err := diffChanges(got, tc.want); err != nil {
				t.Fatal(err)
			}
			for i := 1; i < len(got); i++ {
				if got[i].GetCursor() <= got[i-1].GetCursor() {
					t.Fatalf("cursors not in commit order: %d after %d", got[i].GetCursor(), got[i-1].GetCursor())
				}
			}
		})
	}

	// The head is a valid cursor (nothing yet); beyond it is OutOfRange.
	atHead := watchRuns(alice, &reinv1.WatchRunsRequest{AfterCursor: head})
	beyond := watchRuns(alice, &reinv1.WatchRunsRequest{AfterCursor: head + 1})
	_, err = beyond.Recv()
	st := wantCode(t, err, codes.OutOfRange)
	if !strings.Contains(st.Message(), fmt.Sprint(head)) {
		t.Fatalf("message %q should name the last change %d", st.Message(), head)
	}
	late := start(alice, "late", contract(nil, final("late")))
	got := recvChanges(t, atHead, isEnd(late, reinv1.RunStatus_RUN_STATUS_COMPLETED))
	if len(got) != 2 || got[0].GetRunId() != late || got[0].GetCursor() != head+1 {
		t.Fatalf("from the head: %v, want the late run's two changes from cursor %d", got, head+1)
	}

	// Another tenant's run does not exist for alice.
	_, err = recvErr(alice.Runs.WatchRun(ctx, &reinv1.WatchRunRequest{RunId: b2}))
	wantCode(t, err, codes.NotFound)
	_, err = alice.Runs.GetRun(ctx, &reinv1.GetRunRequest{RunId: b2})
	wantCode(t, err, codes.NotFound)
	// A status filter naming no status is a bad request.
	_, err = watchRuns(alice, &reinv1.WatchRunsRequest{Statuses: []reinv1.RunStatus{reinv1.RunStatus_RUN_STATUS_UNSPECIFIED}}).Recv()
	wantCode(t, err, codes.InvalidArgument)
	// No token, no stream.
	anon := dial("")
	_, err = watchRuns(anon, &reinv1.WatchRunsRequest{}).Recv()
	wantCode(t, err, codes.Unauthenticated)
}

// TestShutdownEndsStuckWatch: Shutdown is not held past its timeout by a
// watcher that stopped reading, and that watcher's stream still ends with
// Unavailable, so its client resumes. (Its handler is blocked in Send by
// flow control, so the stream is cut when the timeout stops the server; the
// runs drain beside it.)
func TestShutdownEndsStuckWatch(t *testing.T) {
	big := strings.Repeat("x", 60_000)
	node := openWatchNode(t, Config{Tools: tools.NewFixtures(map[string][]tools.FixtureResult{"lookup": {{Output: structpb.NewStringValue(big)}}})})
	addr := serveWatchTCP(t, node, "127.0.0.1:0")
	s := &testServer{node: node}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	s.client = reinv1.NewRunServiceClient(cc)
	run := s.start(t, "r", contract(nil, readCall("lookup"), readCall("lookup"), readCall("lookup"),
		readCall("lookup"), readCall("lookup"), readCall("lookup"), ask("more?")))
	stuck, err := s.client.WatchRun(context.Background(), &reinv1.WatchRunRequest{RunId: run.GetRunId()})
	if err != nil {
		t.Fatal(err)
	}
	pollUntil(t, 10*time.Second, "the stuck watcher did not subscribe", func() bool { return len(hubSubs(node.Hub, run.GetRunId())) >= 2 })

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	began := time.Now()
	node.Shutdown(ctx)
	t.Logf("Shutdown took %v (its timeout: 3s)", time.Since(began))
	if ctx.Err() == nil {
		t.Log("the stuck stream drained before the timeout")
	}
	for {
		_, err := stuck.Recv()
		if err == nil {
			continue
		}
		if st := status.Convert(err); st.Code() != codes.Unavailable {
			t.Fatalf("the stuck watch ended with %v, want Unavailable so that its client resumes", err)
		}
		break
	}
}
