package crash_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/prototext"

	"github.com/reinhq/rein/client"
	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// TestModelOutputSIGKILL: the server is SIGKILLed while a model call
// streams its text to a watcher. The restarted server sends the call
// again, marked resumed; the watcher, reconnected, is sent its text from
// the start (offset 0, resumed), all of it before the call's
// model_returned, and each event once. Nothing of the text is in the log.
func TestModelOutputSIGKILL(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	in := newInstance(t)
	srv := in.start(t)
	in.waitServing(t, srv)
	cl := in.dial(t, client.Backoff{Min: 20 * time.Millisecond, Max: 200 * time.Millisecond})
	c := contract(0)
	c.Model.Script = []*reinv1.ScriptedReply{{
		Reply:  &reinv1.ScriptedReply_Decision{Decision: &reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: "done"}}}},
		Chunks: []*reinv1.ScriptedChunk{{Text: "first "}, {Text: "half", DelayMs: 2500}},
	}}
	started, err := cl.Runs.StartRun(ctx, &reinv1.StartRunRequest{RequestId: "output-kill", Contract: c})
	if err != nil {
		t.Fatalf("StartRun: %v", err)
	}
	runID := started.GetRun().GetRunId()

	type message struct {
		ev  *reinv1.Event
		out *reinv1.ModelOutput
	}
	msgs := make(chan message, 1000)
	watched := make(chan error, 1)
	go func() {
		watched <- cl.WatchOutput(ctx, runID, 0,
			func(ev *reinv1.Event) error { msgs <- message{ev: ev}; return nil },
			func(o *reinv1.ModelOutput) error { msgs <- message{out: o}; return nil })
	}()
	var got []message
	text := ""
	for text != "first " {
		select {
		case m := <-msgs:
			got = append(got, m)
			if m.out != nil {
				text += m.out.GetText()
			}
		case err := <-watched:
			t.Fatalf("the watch ended (%v) before the call's first text", err)
		case <-ctx.Done():
			t.Fatal("the call's first text never came")
		}
	}
	srv.kill(t)
	srv = in.start(t)
	in.waitServing(t, srv)
	if err := <-watched; err != nil {
		t.Fatalf("WatchOutput across the restart: %v", err)
	}
	close(msgs)
	for m := range msgs {
		got = append(got, m)
	}

	l, err := fetchLog(ctx, cl, runID)
	if err != nil {
		t.Fatal(err)
	}
	var evs []*reinv1.Event
	var resumed *reinv1.ModelOutput
	text = ""
	for _, m := range got {
		switch {
		case m.ev != nil:
			evs = append(evs, m.ev)
			if m.ev.GetModelReturned() != nil && (resumed == nil || text != "first half") {
				t.Fatalf("model_returned came with the resumed call's text %q (resumed output %v)", text, resumed)
			}
		case m.out.GetResumed() && m.out.GetOffset() == 0:
			resumed, text = m.out, m.out.GetText()
		case resumed != nil:
			text += m.out.GetText()
		}
	}
	if len(evs) != len(l.events) {
		t.Fatalf("the watch handed over %d events, the log has %d", len(evs), len(l.events))
	}
	if gap := l.gapFree(); gap != "" {
		t.Fatal(gap)
	}
	for _, ev := range l.events[1:] { // run_started holds the script
		if strings.Contains(prototext.Format(ev), "first ") {
			t.Fatalf("the streamed text is in the log: %v", ev)
		}
	}
	if requested := l.find("model_requested"); len(requested) != 2 || !requested[1].GetModelRequested().GetResumed() ||
		resumed.GetRequested() != requested[1].GetSequence() {
		t.Fatalf("model calls %v, the resumed output names %d: want the call sent again, marked resumed", requested, resumed.GetRequested())
	}
	in.stop(t, srv)
	checkBolt(t, in.db)
}
