package model

import (
	"context"
	"errors"
	"strings"
	"testing"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

func streamed(delayMs uint32) *reinv1.ScriptedReply {
	final := &reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: "done"}}}
	return &reinv1.ScriptedReply{
		Reply:  &reinv1.ScriptedReply_Decision{Decision: final},
		Chunks: []*reinv1.ScriptedChunk{{Text: "Thinking "}, {Text: "about it, "}, {Text: "done.", DelayMs: delayMs}},
	}
}

// TestScriptStreamsItsChunks: a call that streams writes the reply's
// chunks in order, then returns the reply; one that does not writes none.
func TestScriptStreamsItsChunks(t *testing.T) {
	s := NewScript([]*reinv1.ScriptedReply{streamed(1), streamed(1)})
	var got []string
	r, err := s.Next(context.Background(), &Request{Step: 1, Output: func(text string) { got = append(got, text) }})
	if err != nil || r.Decision.GetFinalAnswer().GetText() != "done" {
		t.Fatalf("Next = %v, %v; want the final answer", r, err)
	}
	if strings.Join(got, "|") != "Thinking |about it, |done." {
		t.Fatalf("the call wrote %q; want the three chunks in order", got)
	}
	if r, err := s.Next(context.Background(), &Request{Step: 2}); err != nil || r.Decision == nil {
		t.Fatalf("a call that does not stream: %v, %v; want the reply", r, err)
	}
}

// TestScriptStreamHonoursContext: a call cancelled while it writes ends
// with the context's error and no reply; what it wrote stays written.
func TestScriptStreamHonoursContext(t *testing.T) {
	s := NewScript([]*reinv1.ScriptedReply{streamed(60_000)})
	ctx, cancel := context.WithCancel(context.Background())
	var got []string
	r, err := s.Next(ctx, &Request{Step: 1, Output: func(text string) {
		got = append(got, text)
		if len(got) == 2 {
			cancel() // before the slow last chunk
		}
	}})
	if !errors.Is(err, context.Canceled) || r != nil {
		t.Fatalf("Next = %v, %v; want context.Canceled and no reply", r, err)
	}
	if len(got) != 2 {
		t.Fatalf("the call wrote %q; want the two chunks before the cancel", got)
	}
}
