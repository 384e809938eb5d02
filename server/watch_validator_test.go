package server

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/reinhq/rein/client"
	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/engine"
	"github.com/reinhq/rein/internal/store"
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
// asked first for the events after `after` (docs/design.md §6): each stream is in
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
	if cfg.Store == nil {
		cfg.Store = tempBolt(t)
	}
	if cfg.Tools == nil {
		cfg.Tools = fixtures() // the tool contract grants
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
	st, _, err := node.Engine.Start(context.Background(), engine.StartRequest{RequestID: requestID, Contract: c, Principal: "local", Tenant: "default"})
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
