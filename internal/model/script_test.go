package model

import (
	"context"
	"errors"
	"testing"
	"time"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

func replies() []*reinv1.ScriptedReply {
	final := &reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: "done"}}}
	return []*reinv1.ScriptedReply{
		{Reply: &reinv1.ScriptedReply_Decision{Decision: final}, Usage: &reinv1.Usage{InputTokens: 100, OutputTokens: 50}},
		{Reply: &reinv1.ScriptedReply_Raw{Raw: "not json"}},
		{Reply: &reinv1.ScriptedReply_Error{Error: "upstream 503"}},
		{Reply: &reinv1.ScriptedReply_Decision{Decision: final}, DelayMs: 60_000},
	}
}

func TestScriptAnswersByStep(t *testing.T) {
	s := NewScript(replies())
	ctx := context.Background()
	r, err := s.Next(ctx, &Request{Step: 1})
	if err != nil || r.Decision.GetFinalAnswer().GetText() != "done" || r.Usage.GetOutputTokens() != 50 {
		t.Fatalf("step 1 = %v, %v; want the final answer with 50 output tokens", r, err)
	}
	if n, _ := s.CountTokens(ctx, &Request{Step: 1}); n != 100 {
		t.Fatalf("CountTokens(step 1) = %d, want the reply's 100", n)
	}
	// The cap on output tokens holds whatever the script says.
	if r, _ := s.Next(ctx, &Request{Step: 1, MaxOutputTokens: 20}); r.Usage.GetOutputTokens() != 20 {
		t.Fatalf("capped output = %d, want 20", r.Usage.GetOutputTokens())
	}
	if r, err := s.Next(ctx, &Request{Step: 2}); err != nil || r.Decision != nil || r.Raw != "not json" {
		t.Fatalf("step 2 = %v, %v; want raw text and no decision", r, err)
	}
	if _, err := s.Next(ctx, &Request{Step: 3}); err == nil || err.Error() != "upstream 503" {
		t.Fatalf("step 3 error = %v, want the scripted error", err)
	}
}

func TestScriptRunsOut(t *testing.T) {
	s := NewScript(replies())
	for _, step := range []uint32{0, 5, 100} {
		if _, err := s.Next(context.Background(), &Request{Step: step}); !errors.Is(err, ErrScriptExhausted) {
			t.Errorf("step %d: %v, want ErrScriptExhausted", step, err)
		}
	}
}

func TestScriptDelayHonoursContext(t *testing.T) {
	s := NewScript(replies())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := s.Next(ctx, &Request{Step: 4}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a 60s reply under a 20ms deadline: %v, want DeadlineExceeded", err)
	}
}

func TestNewKnowsOnlyScript(t *testing.T) {
	if _, err := New(&reinv1.ModelSpec{Provider: "script"}); err != nil {
		t.Fatal(err)
	}
	if _, err := New(&reinv1.ModelSpec{Provider: "oracle"}); !errors.Is(err, ErrUnknownProvider) {
		t.Fatalf("unknown provider: %v, want ErrUnknownProvider", err)
	}
}

func TestScriptFailAttempts(t *testing.T) {
	final := &reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: "done"}}}
	s := NewScript([]*reinv1.ScriptedReply{{Reply: &reinv1.ScriptedReply_Decision{Decision: final}, FailAttempts: 1, RetryAfterMs: 1500}})
	_, err := s.Next(context.Background(), &Request{Step: 1})
	if wait, ok := RetryAfter(err); !ok || wait != 1500*time.Millisecond {
		t.Fatalf("first attempt: %v (retry after %v, %v), want a retryable error asking for 1.5s", err, wait, ok)
	}
	if r, err := s.Next(context.Background(), &Request{Step: 1}); err != nil || r.Decision.GetFinalAnswer().GetText() != "done" {
		t.Fatalf("second attempt: %v, %v; want the reply", r, err)
	}
}
