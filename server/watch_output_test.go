package server

// Tests of the model output WatchRun streams (model_output): a watcher
// following a call, one joining or coming back mid-call, one that asked
// for events only, and a retried call. The model is gated: it writes its
// first piece, then waits for the test to let it go on, so that what each
// watcher is sent does not hang on timing.

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/model"
)

// writingModel answers every call with a final answer, writing pieces: the
// first at once, the others once gate is closed. failFirst makes the
// first attempt end as a rate limit after its first piece.
type writingModel struct {
	pieces    []string
	gate      chan struct{}
	failFirst bool
	calls     int
}

func (m *writingModel) Next(ctx context.Context, req *model.Request) (*model.Reply, error) {
	if req.Output == nil {
		return nil, errors.New("the call does not stream")
	}
	m.calls++
	req.Output(m.pieces[0])
	select {
	case <-m.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if m.failFirst && m.calls == 1 {
		return nil, &model.HTTPError{Provider: "gated", StatusCode: 429, Message: "slow down", RetryAfter: time.Millisecond}
	}
	for _, p := range m.pieces[1:] {
		req.Output(p)
	}
	final := &reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: strings.Join(m.pieces, "")}}}
	return &model.Reply{Decision: final, Usage: &reinv1.Usage{InputTokens: 1, OutputTokens: 1}}, nil
}

func writingServer(t *testing.T, m *writingModel) *tcpServer {
	return newTCPServer(t, Config{StreamModelCalls: true, Models: func(*reinv1.ModelSpec) (model.Model, error) { return m, nil }})
}

// watched is what one watcher was sent, in order.
type watched struct {
	stream interface {
		Recv() (*reinv1.WatchRunResponse, error)
	}
	msgs []*reinv1.WatchRunResponse
	// text is the output so far of the call followed, by its start over.
	text string
}

func watchOutput(t testing.TB, ctx context.Context, s *tcpServer, runID string, after uint64, output bool) *watched {
	t.Helper()
	stream, err := s.client.WatchRun(ctx, &reinv1.WatchRunRequest{RunId: runID, AfterSequence: after, ModelOutput: output})
	if err != nil {
		t.Fatal(err)
	}
	return &watched{stream: stream}
}

// until receives until stop says so of the last message; it fails the test
// if the stream ends first.
func (w *watched) until(t testing.TB, stop func(*reinv1.WatchRunResponse) bool) {
	t.Helper()
	for {
		m, err := w.stream.Recv()
		if err != nil {
			t.Fatalf("the watch ended (%v) before what was awaited; sent %d messages, text %q", err, len(w.msgs), w.text)
		}
		w.msgs = append(w.msgs, m)
		if o := m.GetOutput(); o != nil {
			if o.GetOffset() == 0 {
				w.text = ""
			}
			if int(o.GetOffset()) != len(w.text) {
				t.Fatalf("output at offset %d after %d bytes", o.GetOffset(), len(w.text))
			}
			w.text += o.GetText()
		}
		if stop(m) {
			return
		}
	}
}

// toEnd receives to the end of the stream, which must be OK.
func (w *watched) toEnd(t testing.TB) {
	t.Helper()
	w.until(t, func(m *reinv1.WatchRunResponse) bool {
		sc := m.GetEvent().GetStatusChanged()
		return sc != nil && sc.GetTo() == reinv1.RunStatus_RUN_STATUS_COMPLETED
	})
	if _, err := w.stream.Recv(); err != io.EOF {
		t.Fatalf("after the run's end: %v, want the stream's end", err)
	}
}

func (w *watched) events() []*reinv1.Event {
	var evs []*reinv1.Event
	for _, m := range w.msgs {
		if ev := m.GetEvent(); ev != nil {
			evs = append(evs, ev)
		}
	}
	return evs
}

func (w *watched) lastSeq() uint64 {
	evs := w.events()
	return evs[len(evs)-1].GetSequence()
}

// outputBeforeReturned checks that the call's last output says done and
// comes before its model_returned, with the whole text.
func (w *watched) outputBeforeReturned(t *testing.T, want string) {
	t.Helper()
	var last *reinv1.ModelOutput
	for _, m := range w.msgs {
		if o := m.GetOutput(); o != nil {
			last = o
		}
		if m.GetEvent().GetModelReturned() != nil {
			if last == nil || !last.GetDone() {
				t.Fatalf("model_returned came before the call's output said done (last output %v)", last)
			}
			if w.text != want {
				t.Fatalf("the call's text was %q, want %q", w.text, want)
			}
			return
		}
	}
	t.Fatal("no model_returned was sent")
}

// TestWatchRunStreamsModelOutput: a watcher that asked for it is sent the
// call's text as it is written, all of it before the call's
// model_returned; one that comes back mid-call is sent the text so far
// from offset 0, then the rest; one that asked for events only is sent
// the same events and nothing else.
func TestWatchRunStreamsModelOutput(t *testing.T) {
	m := &writingModel{pieces: []string{"Let me ", "look ", "it up."}, gate: make(chan struct{})}
	s := writingServer(t, m)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := s.client.StartRun(ctx, &reinv1.StartRunRequest{RequestId: "stream", Contract: contract(nil)})
	if err != nil {
		t.Fatal(err)
	}
	runID := resp.GetRun().GetRunId()
	events := watchOutput(t, ctx, s, runID, 0, false)
	following := watchOutput(t, ctx, s, runID, 0, true)
	first := func(w *watched) func(*reinv1.WatchRunResponse) bool {
		return func(*reinv1.WatchRunResponse) bool { return w.text == "Let me " }
	}
	following.until(t, first(following))
	var requested uint64
	for _, ev := range following.events() {
		if ev.GetModelRequested() != nil {
			requested = ev.GetSequence()
		}
	}
	if o := following.msgs[len(following.msgs)-1].GetOutput(); o.GetRequested() != requested || requested == 0 || o.GetStep() != 1 || o.GetAttempt() != 1 || o.GetResumed() {
		t.Fatalf("output %v; want step 1's first attempt, requested at %d", o, requested)
	}

	// A watcher whose connection ends mid-call comes back after its last
	// event and is sent the text so far.
	lctx, leave := context.WithCancel(ctx)
	back := watchOutput(t, lctx, s, runID, 0, true)
	back.until(t, first(back))
	leave()
	back = watchOutput(t, ctx, s, runID, back.lastSeq(), true)
	back.until(t, first(back))
	if o := back.msgs[0].GetOutput(); o == nil || o.GetOffset() != 0 || o.GetText() != "Let me " {
		t.Fatalf("the returning watcher's first message is %v; want the text so far at offset 0", back.msgs[0])
	}

	close(m.gate)
	for _, w := range []*watched{following, back, events} {
		w.toEnd(t)
	}
	following.outputBeforeReturned(t, "Let me look it up.")
	back.outputBeforeReturned(t, "Let me look it up.")
	for _, msg := range events.msgs {
		if msg.GetOutput() != nil {
			t.Fatalf("a watcher that asked for events only was sent output %v", msg.GetOutput())
		}
	}
	evs, fevs := events.events(), following.events()
	if len(evs) != len(fevs) {
		t.Fatalf("the events-only watcher got %d events, the output watcher %d", len(evs), len(fevs))
	}
	for i := range evs {
		if !proto.Equal(evs[i], fevs[i]) {
			t.Fatalf("event %d differs between the watchers", i)
		}
	}

	// A watcher of the ended run is sent its events, none of its output.
	late := watchOutput(t, ctx, s, runID, 0, true)
	late.toEnd(t)
	for _, msg := range late.msgs {
		if msg.GetOutput() != nil {
			t.Fatalf("a watcher of an ended run was sent output %v", msg.GetOutput())
		}
	}
}

// TestWatchRunOutputOfARetry: a call's first attempt fails after writing;
// the watcher is sent its end, then the retry's text from offset 0 as
// attempt 2.
func TestWatchRunOutputOfARetry(t *testing.T) {
	m := &writingModel{pieces: []string{"draft ", "final"}, gate: make(chan struct{}), failFirst: true}
	s := writingServer(t, m)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := s.client.StartRun(ctx, &reinv1.StartRunRequest{RequestId: "retry", Contract: contract(nil)})
	if err != nil {
		t.Fatal(err)
	}
	w := watchOutput(t, ctx, s, resp.GetRun().GetRunId(), 0, true)
	w.until(t, func(*reinv1.WatchRunResponse) bool { return w.text == "draft " })
	close(m.gate)
	w.toEnd(t)
	var attempts []uint32
	var dones int
	for _, msg := range w.msgs {
		if o := msg.GetOutput(); o != nil {
			if len(attempts) == 0 || attempts[len(attempts)-1] != o.GetAttempt() {
				attempts = append(attempts, o.GetAttempt())
				if o.GetOffset() != 0 {
					t.Fatalf("attempt %d starts at offset %d", o.GetAttempt(), o.GetOffset())
				}
			}
			if o.GetDone() {
				dones++
			}
		}
	}
	if len(attempts) != 2 || attempts[0] != 1 || attempts[1] != 2 || dones != 2 {
		t.Fatalf("output of attempts %v with %d ends; want attempt 1 then 2, each ended", attempts, dones)
	}
	w.outputBeforeReturned(t, "draft final")
}

// streamNoted answers each call with the next reply of its script, noting
// whether the call streamed.
type streamNoted struct {
	script   *model.Script
	streamed chan bool
}

func (m *streamNoted) Next(ctx context.Context, req *model.Request) (*model.Reply, error) {
	m.streamed <- req.Output != nil
	return m.script.Next(ctx, req)
}

// TestModelCallsStreamWhenWatched: on a server that does not stream every
// call, a call streams only when its run has a watcher of its output as
// the call starts; one nobody watches is the provider's plain call.
func TestModelCallsStreamWhenWatched(t *testing.T) {
	m := &streamNoted{script: model.NewScript([]*reinv1.ScriptedReply{ask("which ledger?"), final("done")}), streamed: make(chan bool, 2)}
	s := newTCPServer(t, Config{Models: func(*reinv1.ModelSpec) (model.Model, error) { return m, nil }})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := s.client.StartRun(ctx, &reinv1.StartRunRequest{RequestId: "noted", Contract: contract(nil)})
	if err != nil {
		t.Fatal(err)
	}
	runID := resp.GetRun().GetRunId()
	if <-m.streamed {
		t.Fatal("a call of a run nobody watched streamed")
	}
	w := watchOutput(t, ctx, s, runID, 0, true)
	w.until(t, func(r *reinv1.WatchRunResponse) bool {
		return r.GetEvent().GetStatusChanged().GetTo() == reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT
	})
	if _, err := s.client.ProvideInput(ctx, &reinv1.ProvideInputRequest{RunId: runID, Text: "EUR"}); err != nil {
		t.Fatal(err)
	}
	if !<-m.streamed {
		t.Fatal("a call of a run with an output watcher did not stream")
	}
	w.toEnd(t)
}

// heldSend holds the send of an input_provided event until gate closes:
// a watcher that falls behind while the run goes on.
type heldSend struct {
	grpc.ServerStream
	gate <-chan struct{}
}

func (s *heldSend) SendMsg(m any) error {
	if r, ok := m.(*reinv1.WatchRunResponse); ok && r.GetEvent().GetInputProvided() != nil {
		<-s.gate
	}
	return s.ServerStream.SendMsg(m)
}

// TestWatchRunOutputOfAWatcherBehind: a watcher held back while two
// calls stream and return is sent each call's whole text, ended, in its
// place: before the call's model_returned.
func TestWatchRunOutputOfAWatcherBehind(t *testing.T) {
	gate := make(chan struct{})
	streamed := func(r *reinv1.ScriptedReply, pieces ...string) *reinv1.ScriptedReply {
		for _, p := range pieces {
			r.Chunks = append(r.Chunks, &reinv1.ScriptedChunk{Text: p})
		}
		return r
	}
	s := newTCPServer(t, Config{StreamModelCalls: true,
		Models: scriptedModels(ask("which?"), streamed(readCall("lookup"), "looking ", "it up"), streamed(final("42"), "the answer ", "is 42")),
		ServerOptions: []grpc.ServerOption{grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			return h(srv, &heldSend{ServerStream: ss, gate: gate})
		})}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := s.client.StartRun(ctx, &reinv1.StartRunRequest{RequestId: "behind", Contract: contract(nil)})
	if err != nil {
		t.Fatal(err)
	}
	runID := resp.GetRun().GetRunId()
	w := watchOutput(t, ctx, s, runID, 0, true)
	w.until(t, func(r *reinv1.WatchRunResponse) bool {
		return r.GetEvent().GetStatusChanged().GetTo() == reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT
	})
	if _, err := s.client.ProvideInput(ctx, &reinv1.ProvideInputRequest{RunId: runID, Text: "INV-42"}); err != nil {
		t.Fatal(err)
	}
	if err := s.node.Engine.Wait(ctx, runID); err != nil {
		t.Fatal(err)
	}
	close(gate)
	w.toEnd(t)
	want := map[uint32]string{2: "looking it up", 3: "the answer is 42"}
	texts := map[uint64]string{} // by the call's model_requested
	var step uint32
	var requested uint64
	for _, m := range w.msgs {
		if o := m.GetOutput(); o != nil {
			if o.GetOffset() == 0 {
				texts[o.GetRequested()] = ""
			}
			texts[o.GetRequested()] += o.GetText()
		}
		if mr := m.GetEvent().GetModelRequested(); mr != nil {
			step, requested = mr.GetStep(), m.GetEvent().GetSequence()
		}
		if m.GetEvent().GetModelReturned() != nil && want[step] != "" && texts[requested] != want[step] {
			t.Fatalf("step %d's model_returned came with its call's text %q, want %q", step, texts[requested], want[step])
		}
	}
	if len(texts) < 2 {
		t.Fatalf("the watcher behind was sent the texts of %d calls, want both streaming calls", len(texts))
	}
}
