package model

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// Script is the scripted model: it answers call N with the script's reply N,
// so a run is deterministic and survives a restart (the step index, not
// in-memory state, picks the reply). When the script runs out, it fails.
type Script struct {
	replies []*reinv1.ScriptedReply

	mu sync.Mutex
	// attempts counts the calls made for each step, for fail_attempts.
	attempts map[uint32]uint32
}

var (
	_ Model        = (*Script)(nil)
	_ TokenCounter = (*Script)(nil)
)

// NewScript returns a scripted model over replies.
func NewScript(replies []*reinv1.ScriptedReply) *Script {
	return &Script{replies: replies, attempts: map[uint32]uint32{}}
}

// ErrScriptExhausted is the error of a call past the script's end.
var ErrScriptExhausted = errors.New("the model script ran out of replies")

func (s *Script) reply(step uint32) (*reinv1.ScriptedReply, error) {
	if step == 0 || int(step) > len(s.replies) {
		return nil, fmt.Errorf("%w: call %d, the script has %d; add replies to the script", ErrScriptExhausted, step, len(s.replies))
	}
	return s.replies[step-1], nil
}

// CountTokens returns the input tokens the next reply will report.
func (s *Script) CountTokens(_ context.Context, req *Request) (uint64, error) {
	r, err := s.reply(req.Step)
	if err != nil {
		return 0, nil
	}
	return r.GetUsage().GetInputTokens(), nil
}

// Next implements Model.
func (s *Script) Next(ctx context.Context, req *Request) (*Reply, error) {
	r, err := s.reply(req.Step)
	if err != nil {
		return nil, err
	}
	if n := r.GetFailAttempts(); n > 0 {
		s.mu.Lock()
		s.attempts[req.Step]++
		attempt := s.attempts[req.Step]
		s.mu.Unlock()
		if attempt <= n {
			return nil, &HTTPError{Provider: "script", StatusCode: 429, Message: fmt.Sprintf("scripted rate limit (attempt %d of call %d)", attempt, req.Step),
				RetryAfter: time.Duration(r.GetRetryAfterMs()) * time.Millisecond}
		}
	}
	if d := time.Duration(r.GetDelayMs()) * time.Millisecond; d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	} else if err := ctx.Err(); err != nil {
		return nil, err
	}
	if req.Output != nil {
		if err := s.stream(ctx, r.GetChunks(), req.Output); err != nil {
			return nil, err
		}
	}
	u := r.GetUsage()
	usage := &reinv1.Usage{InputTokens: u.GetInputTokens(), OutputTokens: u.GetOutputTokens(),
		CacheWriteInputTokens: u.GetCacheWriteInputTokens(), CacheReadInputTokens: u.GetCacheReadInputTokens()}
	if req.MaxOutputTokens > 0 && usage.OutputTokens > req.MaxOutputTokens {
		usage.OutputTokens = req.MaxOutputTokens
	}
	switch x := r.GetReply().(type) {
	case *reinv1.ScriptedReply_Decision:
		return &Reply{Decision: x.Decision, Usage: usage}, nil
	case *reinv1.ScriptedReply_Raw:
		return &Reply{Raw: x.Raw, Usage: usage}, nil
	case *reinv1.ScriptedReply_Error:
		return nil, errors.New(x.Error)
	}
	return nil, fmt.Errorf("script reply %d has no decision, raw or error", req.Step)
}

// stream writes a reply's chunks to out, each after its delay.
func (s *Script) stream(ctx context.Context, chunks []*reinv1.ScriptedChunk, out func(string)) error {
	for _, c := range chunks {
		if d := time.Duration(c.GetDelayMs()) * time.Millisecond; d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
		}
		out(c.GetText())
	}
	return ctx.Err()
}
