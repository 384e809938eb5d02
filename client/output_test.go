package client_test

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// writes is a final answer that streams pieces, each after ms.
func writes(ms uint32, pieces ...string) *reinv1.ScriptedReply {
	r := final()
	for _, p := range pieces {
		r.Chunks = append(r.Chunks, &reinv1.ScriptedChunk{Text: p, DelayMs: ms})
	}
	return r
}

// TestWatchOutputAcrossACut: the connection is cut after the call's first
// piece of text; WatchOutput hands each event over once, and the call's
// text again from offset 0 after the cut, so that started over it is the
// whole text.
func TestWatchOutputAcrossACut(t *testing.T) {
	_, addr := serve(t)
	var cs conns
	c := dial(t, addr, grpc.WithContextDialer(cs.dial))
	runID := start(t, dial(t, addr), "r", []*reinv1.ScriptedReply{writes(150, "one ", "two ", "three")})
	var got []*reinv1.Event
	var text string
	cut, restarts := false, 0
	err := c.WatchOutput(context.Background(), runID, 0, func(ev *reinv1.Event) error {
		got = append(got, ev)
		return nil
	}, func(o *reinv1.ModelOutput) error {
		if o.GetOffset() == 0 {
			text, restarts = "", restarts+1
		}
		text += o.GetText()
		if !cut && text == "one " {
			cut = cs.cutNew()
		}
		return nil
	})
	if err != nil {
		t.Fatalf("WatchOutput: %v", err)
	}
	sameEvents(t, got, events(t, c, runID))
	if !cut || restarts < 2 {
		t.Fatalf("cut %v, the call's text started %d times; the test needs a cut mid-call", cut, restarts)
	}
	if text != "one two three" {
		t.Fatalf("the call's text came to %q after the cut, want %q", text, "one two three")
	}
}

// TestWatchOutputStopsOnItsError is the failure twin: an error from out
// ends the watch with that error; and Watch, which asked for no output, is
// handed none.
func TestWatchOutputStopsOnItsError(t *testing.T) {
	_, addr := serve(t)
	c := dial(t, addr)
	runID := start(t, c, "r", []*reinv1.ScriptedReply{writes(20, "a", "b")})
	stop := errors.New("enough")
	err := c.WatchOutput(context.Background(), runID, 0, func(*reinv1.Event) error { return nil },
		func(*reinv1.ModelOutput) error { return stop })
	if !errors.Is(err, stop) {
		t.Fatalf("WatchOutput returned %v, want out's error", err)
	}
	if err := c.Watch(context.Background(), runID, 0, func(*reinv1.Event) error { return nil }); err != nil {
		t.Fatalf("Watch: %v", err)
	}
}
