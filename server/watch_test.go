package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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
	"github.com/reinhq/rein/internal/harness"
	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/tools"
)

var watchSeed = flag.Uint64("watch.seed", 0, "seed of the watch tests' random drops; 0 picks one (and logs it)")

// ---- the validator ----

// streamRecord is one stream a watcher opened, as seen below client.Watch:
// the after_sequence it asked for, every event the server sent on it, and
// how it ended.
type streamRecord struct {
	// Sent is false when the stream failed before its request went out.
	Sent   bool
	After  uint64
	Events []*reinv1.Event
	// Ended is set once Recv returned an error; Err is that error, nil for
	// an OK end (io.EOF).
	Ended bool
	Err   error
}

// handedOver is the record of a watcher that saw events as one stream (the
// events client.Watch handed to its callback).
func handedOver(after uint64, evs []*reinv1.Event) []streamRecord {
	return []streamRecord{{Sent: true, After: after, Events: evs}}
}

// validateWatch checks the recorded streams of one watcher of runID that
// asked first for the events after `after` (DESIGN §6): each stream is in
// order, without a repeat or a gap, from its after_sequence + 1; each
// reconnection resumes from the last sequence the watcher saw; and the
// concatenation of the streams is exactly the stored log from after+1 to
// its end. log is the run's whole stored log. It returns the first
// violation.
func validateWatch(runID string, log []*reinv1.Event, after uint64, streams []streamRecord) error {
	for i, ev := range log {
		if ev.GetSequence() != uint64(i)+1 || ev.GetRunId() != runID {
			return fmt.Errorf("the stored log itself is broken at index %d: run %s sequence %d", i, ev.GetRunId(), ev.GetSequence())
		}
	}
	if after > uint64(len(log)) {
		return fmt.Errorf("watched after %d, beyond the log's end %d", after, len(log))
	}
	cursor := after
	var all []*reinv1.Event
	for i, s := range streams {
		if !s.Sent {
			if len(s.Events) > 0 {
				return fmt.Errorf("stream %d: %d events on a stream whose request never went out", i, len(s.Events))
			}
			continue
		}
		if s.After != cursor {
			return fmt.Errorf("stream %d: resumed after sequence %d, but the watcher had seen up to %d (not resumable)", i, s.After, cursor)
		}
		for j, ev := range s.Events {
			switch seq := ev.GetSequence(); {
			case ev.GetRunId() != runID:
				return fmt.Errorf("stream %d, event %d: an event of run %q in the watch of %q", i, j, ev.GetRunId(), runID)
			case seq <= cursor:
				return fmt.Errorf("stream %d, event %d: sequence %d after %d: out of order or repeated", i, j, seq, cursor)
			case seq > cursor+1:
				return fmt.Errorf("stream %d, event %d: sequence %d after %d: a gap", i, j, seq, cursor)
			}
			cursor = ev.GetSequence()
			all = append(all, ev)
		}
	}
	if cursor != uint64(len(log)) {
		return fmt.Errorf("incomplete: the watcher saw up to sequence %d; the stored log ends at %d", cursor, len(log))
	}
	for i, ev := range all {
		if want := log[after+uint64(i)]; !proto.Equal(ev, want) {
			return fmt.Errorf("event %d differs from the stored one:\n got  %v\n want %v", ev.GetSequence(), ev, want)
		}
	}
	return nil
}

// TestValidateWatch is the validator's failure twin: each way a stream can
// be broken is caught, and named.
func TestValidateWatch(t *testing.T) {
	var log []*reinv1.Event
	for i := uint64(1); i <= 6; i++ {
		log = append(log, &reinv1.Event{RunId: "r", Sequence: i, Actor: "harness",
			Payload: &reinv1.Event_ModelRequested{ModelRequested: &reinv1.ModelRequested{Step: uint32(i)}}})
	}
	evs := func(seqs ...int) []*reinv1.Event {
		var out []*reinv1.Event
		for _, s := range seqs {
			out = append(out, log[s-1])
		}
		return out
	}
	other := proto.Clone(log[2]).(*reinv1.Event)
	other.RunId = "q"
	altered := proto.Clone(log[3]).(*reinv1.Event)
	altered.Actor = "model"
	cases := []struct {
		name    string
		after   uint64
		streams []streamRecord
		want    string // "" means valid
	}{
		{"whole", 0, handedOver(0, evs(1, 2, 3, 4, 5, 6)), ""},
		{"from the middle", 2, handedOver(2, evs(3, 4, 5, 6)), ""},
		{"from the end", 6, handedOver(6, nil), ""},
		{"resumed twice", 0, []streamRecord{
			{Sent: true, After: 0, Events: evs(1, 2), Ended: true, Err: status.Error(codes.Unavailable, "x")},
			{Sent: false, Ended: true, Err: status.Error(codes.Unavailable, "refused")},
			{Sent: true, After: 2, Events: evs(3, 4, 5), Ended: true, Err: status.Error(codes.Unavailable, "x")},
			{Sent: true, After: 5, Events: evs(6), Ended: true},
		}, ""},
		{"repeated", 0, handedOver(0, evs(1, 2, 2, 3, 4, 5, 6)), "repeated"},
		{"out of order", 0, handedOver(0, evs(1, 3, 2, 4, 5, 6)), "gap"},
		{"gap", 0, handedOver(0, evs(1, 2, 4, 5, 6)), "gap"},
		{"not from after+1", 2, handedOver(2, evs(2, 3, 4, 5, 6)), "repeated"},
		{"incomplete", 0, handedOver(0, evs(1, 2, 3, 4, 5)), "incomplete"},
		{"another run", 0, handedOver(0, []*reinv1.Event{log[0], log[1], other, log[3], log[4], log[5]}), "an event of run"},
		{"altered", 0, handedOver(0, []*reinv1.Event{log[0], log[1], log[2], altered, log[4], log[5]}), "differs"},
		{"resumed from the wrong place", 0, []streamRecord{
			{Sent: true, After: 0, Events: evs(1, 2, 3)},
			{Sent: true, After: 1, Events: evs(2, 3, 4, 5, 6)},
		}, "not resumable"},
		{"resumed and lost", 0, []streamRecord{
			{Sent: true, After: 0, Events: evs(1, 2, 3)},
			{Sent: true, After: 4, Events: evs(5, 6)},
		}, "not resumable"},
		{"events without a request", 0, []streamRecord{
			{Sent: true, After: 0, Events: evs(1, 2, 3)},
			{Sent: false, Events: evs(4)},
		}, "never went out"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := validateWatch("r", log, tc.after, tc.streams)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("a valid history was refused: %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("a broken history passed; want an error naming %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("error %q, want one naming %q", err, tc.want)
			}
		})
	}
}

// ---- recording below client.Watch ----

// watchRecorder records every WatchRun stream that a client opens, through a
// client stream interceptor, so that what the server sent is validated, not
// only what client.Watch chose to hand over.
type watchRecorder struct {
	mu      sync.Mutex
	streams []*streamRecord
}

func (r *watchRecorder) interceptor() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if method != reinv1.RunService_WatchRun_FullMethodName {
			return streamer(ctx, desc, cc, method, opts...)
		}
		rec := &streamRecord{}
		r.mu.Lock()
		r.streams = append(r.streams, rec)
		r.mu.Unlock()
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			r.mu.Lock()
			rec.Ended, rec.Err = true, err
			r.mu.Unlock()
			return nil, err
		}
		return &recordingStream{ClientStream: cs, r: r, rec: rec}, nil
	}
}

// records returns a copy of what was recorded.
func (r *watchRecorder) records() []streamRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]streamRecord, len(r.streams))
	for i, s := range r.streams {
		out[i] = *s
		out[i].Events = slices.Clone(s.Events)
	}
	return out
}

type recordingStream struct {
	grpc.ClientStream
	r   *watchRecorder
	rec *streamRecord
}

func (s *recordingStream) SendMsg(m any) error {
	if req, ok := m.(*reinv1.WatchRunRequest); ok {
		s.r.mu.Lock()
		s.rec.Sent, s.rec.After = true, req.GetAfterSequence()
		s.r.mu.Unlock()
	}
	return s.ClientStream.SendMsg(m)
}

func (s *recordingStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	switch {
	case errors.Is(err, io.EOF):
		s.rec.Ended = true
	case err != nil:
		s.rec.Ended, s.rec.Err = true, err
	default:
		if resp, ok := m.(*reinv1.WatchRunResponse); ok {
			s.rec.Events = append(s.rec.Events, resp.GetEvent())
		}
	}
	return err
}

// dropWatcher follows one run with client.Watch over its own TCP connection,
// which it cuts at the event counts in drops, so that client.Watch has to
// reconnect and resume.
type dropWatcher struct {
	runID string
	drops []int
	rec   watchRecorder
	// seen counts the events handed over so far, for progress checks.
	seen atomic.Int64
	// dials counts the TCP connections made.
	dials atomic.Int64

	// Set by run, read once it returned.
	handed  []*reinv1.Event
	dropped int
	err     error
}

func (w *dropWatcher) run(ctx context.Context, addr string) {
	var mu sync.Mutex
	var conn, cut net.Conn
	dial := func(ctx context.Context, target string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", target)
		if err == nil {
			w.dials.Add(1)
			mu.Lock()
			conn = c
			mu.Unlock()
		}
		return c, err
	}
	c, err := client.Dial(addr, client.Options{DialOptions: []grpc.DialOption{
		grpc.WithContextDialer(dial), grpc.WithStreamInterceptor(w.rec.interceptor()),
	}})
	if err != nil {
		w.err = err
		return
	}
	defer c.Close()
	w.err = c.Watch(ctx, w.runID, 0, func(ev *reinv1.Event) error {
		w.handed = append(w.handed, ev)
		w.seen.Add(1)
		mu.Lock()
		defer mu.Unlock()
		// Cut at the drop point, or at the first event after it that came
		// on a new connection (events buffered before a cut still arrive).
		if w.dropped < len(w.drops) && len(w.handed) >= w.drops[w.dropped] && conn != cut {
			w.dropped++
			_ = conn.Close()
			cut = conn
		}
		return nil
	})
}

// check validates what the server sent on each of the watcher's streams and
// what client.Watch handed over, against the stored log.
func (w *dropWatcher) check(log []*reinv1.Event) error {
	if w.err != nil {
		return fmt.Errorf("client.Watch returned %v, want nil at the terminal event", w.err)
	}
	if err := validateWatch(w.runID, log, 0, w.rec.records()); err != nil {
		return fmt.Errorf("server streams: %w", err)
	}
	if err := validateWatch(w.runID, log, 0, handedOver(0, w.handed)); err != nil {
		return fmt.Errorf("handed over by client.Watch: %w", err)
	}
	return nil
}

// ---- fixtures of these tests ----

// openWatchNode opens a node on a temporary bbolt file (unless cfg names one) and
// closes it at the end of the test.
func openWatchNode(t *testing.T, cfg Config) *Node {
	t.Helper()
	if cfg.DBPath == "" {
		cfg.DBPath = filepath.Join(t.TempDir(), "rein.db")
	}
	node, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Close)
	return node
}

// serveWatchTCP serves node on a loopback TCP listener at addr ("127.0.0.1:0"
// picks a port) and returns the address.
func serveWatchTCP(t *testing.T, node *Node, addr string) string {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = node.GRPC.Serve(lis) }()
	return lis.Addr().String()
}

// readsScript is a run of `steps` model calls: steps-1 reads of the lookup
// fixture, then a final answer; each reply waits delayMs. Its run has
// 4*steps events. The node serves it to every run (scriptedModels), so
// the contracts stay small.
func readsScript(steps int, delayMs uint32) []*reinv1.ScriptedReply {
	var replies []*reinv1.ScriptedReply
	for i := 0; i < steps-1; i++ {
		r := readCall("lookup")
		r.DelayMs = delayMs
		replies = append(replies, r)
	}
	f := final("done")
	f.DelayMs = delayMs
	return append(replies, f)
}

// readsContract is the contract of a run of `steps` model calls whose script
// the node supplies.
func readsContract(steps int) *reinv1.TaskContract {
	c := contract(nil)
	c.Budget = &reinv1.Budget{MaxSteps: uint32(steps)}
	return c
}

func startWatchedRun(t *testing.T, node *Node, requestID string, c *reinv1.TaskContract) string {
	t.Helper()
	st, _, err := node.Engine.Start(context.Background(), harness.StartRequest{RequestID: requestID, Contract: c, Principal: "local", Tenant: "default"})
	if err != nil {
		t.Fatal(err)
	}
	return st.RunID
}

// watchLog is a run's whole log, from the store.
func watchLog(t *testing.T, st store.Store, runID string) []*reinv1.Event {
	t.Helper()
	var out []*reinv1.Event
	for after := uint64(0); ; {
		evs, err := st.Events(context.Background(), runID, after, 1000)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, evs...)
		if len(evs) < 1000 {
			return out
		}
		after = evs[len(evs)-1].GetSequence()
	}
}

func wantRunStatus(t *testing.T, st store.Store, runID string, want reinv1.RunStatus) {
	t.Helper()
	got, err := st.Load(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != want {
		t.Fatalf("run %s is %v (version %d), want %v", runID, got.Status, got.Version, want)
	}
}

// pollUntil polls cond every few milliseconds until it holds, and fails the
// test with what after the deadline.
func pollUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(within)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("after %v: %s", within, what)
		}
	}
}

func watchSeedOf(t *testing.T) uint64 {
	s := *watchSeed
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -watch.seed=%d)", s, s)
	return s
}

// ---- 1. many watchers, dropped connections ----

// TestWatchersSurviveDroppedConnections: runs append while 50 watchers follow
// them with client.Watch over TCP connections that are cut at random events;
// every watcher ends with exactly the stored log, and every stream the
// server sent passes the validator.
func TestWatchersSurviveDroppedConnections(t *testing.T) {
	const runs, steps, watchers = 3, 200, 50
	rng := rand.New(rand.NewPCG(watchSeedOf(t), 1))
	node := openWatchNode(t, Config{Tools: fixtures(), Models: scriptedModels(readsScript(steps, 1)...)})
	addr := serveWatchTCP(t, node, "127.0.0.1:0")

	var ids []string
	for i := range runs {
		ids = append(ids, startWatchedRun(t, node, fmt.Sprintf("r%d", i), readsContract(steps)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	ws := make([]*dropWatcher, watchers)
	var wg sync.WaitGroup
	for i := range ws {
		w := &dropWatcher{runID: ids[i%runs]}
		for range 1 + rng.IntN(4) {
			w.drops = append(w.drops, 1+rng.IntN(4*steps-100))
		}
		slices.Sort(w.drops)
		w.drops = slices.Compact(w.drops)
		ws[i] = w
		wg.Go(func() { w.run(ctx, addr) })
	}
	wg.Wait()

	logs := map[string][]*reinv1.Event{}
	for _, id := range ids {
		wantRunStatus(t, node.Store, id, reinv1.RunStatus_RUN_STATUS_COMPLETED)
		logs[id] = watchLog(t, node.Store, id)
		if len(logs[id]) != 4*steps {
			t.Fatalf("run %s has %d events, want %d", id, len(logs[id]), 4*steps)
		}
	}
	drops, streams := 0, 0
	for i, w := range ws {
		if err := w.check(logs[w.runID]); err != nil {
			t.Errorf("watcher %d (drops at %v): %v", i, w.drops, err)
			continue
		}
		// Every cut but one that lands after the run's last event (the
		// stream had ended OK) must be followed by a new dial.
		if w.dropped == 0 || w.dials.Load() < int64(w.dropped) {
			t.Errorf("watcher %d: cut %d of %d connections, dialled %d times", i, w.dropped, len(w.drops), w.dials.Load())
		}
		drops += w.dropped
		streams += len(w.rec.records())
	}
	t.Logf("%d watchers of %d runs: %d connections cut, %d streams opened", watchers, runs, drops, streams)
}

// ---- 2. a server restart ----

// TestWatchersResumeAcrossRestart: watchers follow runs over TCP; the node
// shuts down mid-run (their streams end with Unavailable, said by the server
// itself); a new node opens the same file with Resume on the same address;
// the watchers resume and end with the whole logs, and the runs complete.
func TestWatchersResumeAcrossRestart(t *testing.T) {
	const runs, steps, watchers = 3, 150, 12
	path := filepath.Join(t.TempDir(), "rein.db")
	models := scriptedModels(readsScript(steps, 2)...)
	first, err := Open(context.Background(), Config{DBPath: path, Tools: fixtures(), Models: models})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(first.Close)
	addr := serveWatchTCP(t, first, "127.0.0.1:0")
	var ids []string
	for i := range runs {
		ids = append(ids, startWatchedRun(t, first, fmt.Sprintf("r%d", i), readsContract(steps)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	ws := make([]*dropWatcher, watchers)
	var wg sync.WaitGroup
	for i := range ws {
		w := &dropWatcher{runID: ids[i%runs]}
		ws[i] = w
		wg.Go(func() { w.run(ctx, addr) })
	}

	// Every watcher is streaming and every run is well under way.
	pollUntil(t, 20*time.Second, "watchers and runs did not get going", func() bool {
		for _, w := range ws {
			if w.seen.Load() < 20 {
				return false
			}
		}
		for _, id := range ids {
			if st, err := first.Store.Load(ctx, id); err != nil || st.Version < 40 {
				return false
			}
		}
		return true
	})
	for _, id := range ids {
		st, err := first.Store.Load(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if st.Status != reinv1.RunStatus_RUN_STATUS_RUNNING {
			t.Fatalf("run %s is already %v before the restart; the test needs runs mid-way", id, st.Status)
		}
		t.Logf("at shutdown: run %s at version %d of %d", id, st.Version, 4*steps)
	}
	down := time.Now()
	sctx, scancel := context.WithTimeout(context.Background(), time.Second)
	first.Shutdown(sctx)
	scancel()
	t.Logf("first node shut down in %v", time.Since(down))

	second := openWatchNode(t, Config{DBPath: path, Tools: fixtures(), Models: models, Resume: true})
	for _, id := range ids {
		st, err := second.Store.Load(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if st.Version >= uint64(4*steps) {
			t.Fatalf("run %s completed before the restart; the test needs runs mid-way", id)
		}
	}
	if got := serveWatchTCP(t, second, addr); got != addr {
		t.Fatalf("second node listens on %s, want %s", got, addr)
	}
	up := time.Now()
	wg.Wait()
	t.Logf("watchers done %v after the second node listened", time.Since(up))

	for _, id := range ids {
		wantRunStatus(t, second.Store, id, reinv1.RunStatus_RUN_STATUS_COMPLETED)
	}
	for i, w := range ws {
		log := watchLog(t, second.Store, w.runID)
		if err := w.check(log); err != nil {
			t.Errorf("watcher %d: %v", i, err)
			continue
		}
		recs := w.rec.records()
		if len(recs) < 2 {
			t.Errorf("watcher %d opened %d streams; it should have reconnected", i, len(recs))
			continue
		}
		// The stream cut by the shutdown ended with the server's own
		// Unavailable; every failed attempt until the second node was up
		// is Unavailable too; the last stream ended OK.
		if st := status.Convert(recs[0].Err); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "shutting down") {
			t.Errorf("watcher %d: the stream open at shutdown ended with %v, want the server's Unavailable", i, recs[0].Err)
		}
		for j, r := range recs[:len(recs)-1] {
			if code := status.Code(r.Err); code != codes.Unavailable {
				t.Errorf("watcher %d: stream %d ended with %v (%v), want Unavailable", i, j, code, r.Err)
			}
		}
		if last := recs[len(recs)-1]; !last.Ended || last.Err != nil {
			t.Errorf("watcher %d: the last stream ended with %v, want OK", i, last.Err)
		}
	}
}

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
		s.node.Hub.Notify(run.GetRunId(), run.GetVersion())
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
