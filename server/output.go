package server

import (
	"strings"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/step"
)

// maxCallText bounds the text the hub keeps of one model call: what a
// call writes past it is not streamed (ModelOutput.truncated); its reply
// is recorded whole as ever.
const maxCallText = 1 << 20

// liveCall is the text so far of a run's model call in flight (one
// attempt of it). Its text only grows, under the hub's lock.
type liveCall struct {
	call      step.OutputCall
	text      []byte
	truncated bool
	done      bool
	// followers are the watchers that sent some of its text and have not
	// yet sent its end: a call that returned is kept until they have.
	followers int
}

var _ step.Output = (*Hub)(nil)

// Begin implements step.Output: runID's call starts (over), and the run's
// output watchers are woken.
func (h *Hub) Begin(runID string, call step.OutputCall) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := &liveCall{call: call}
	h.calls[runID] = c
	// The run's output watchers that follow no call follow this one from
	// its start, so that they are sent it even if it returns before they
	// look.
	for s := range h.subs[runID] {
		if s.O != nil && s.call == nil {
			s.call, s.off, s.told = c, 0, false
			c.followers++
		}
	}
	h.wakeOutputLocked(runID)
}

// Write implements step.Output: text is added to runID's call in flight,
// up to maxCallText, and the run's output watchers are woken. Text that
// is not valid UTF-8 has its bad bytes replaced (a message carries text).
func (h *Hub) Write(runID, text string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.calls[runID]
	if c == nil || c.done || c.truncated || text == "" {
		return
	}
	text = strings.ToValidUTF8(text, "\uFFFD")
	if len(c.text)+len(text) > maxCallText {
		c.truncated = true
	} else {
		c.text = append(c.text, text...)
	}
	h.wakeOutputLocked(runID)
}

// End implements step.Output: runID's call returned. It is dropped now
// unless watchers are still to send its end.
func (h *Hub) End(runID string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.calls[runID]
	if c == nil {
		return
	}
	c.done = true
	if c.followers == 0 {
		delete(h.calls, runID)
	}
	h.wakeOutputLocked(runID)
}

func (h *Hub) wakeOutputLocked(runID string) {
	for s := range h.subs[runID] {
		if s.O != nil {
			select {
			case s.O <- struct{}{}:
			default:
			}
		}
	}
}

// Output is the next piece of the run's model output for this watcher, or
// nil when it has none to send. cursor is the last event the watcher sent:
// it is sent a call's text only once it sent the call's model_requested.
// A watcher follows each call that begins while it watches, from its
// start; one that joins mid-call, from the text so far; never a call that
// had returned before it looked (its reply is in the model_returned that
// follows). Each piece of text is sent once, in order; the piece that
// says done ends the call for the watcher.
func (s *Subscription) Output(cursor uint64) *reinv1.ModelOutput {
	h := s.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	c := s.call
	if c == nil {
		c = h.calls[s.runID]
		if c == nil || c.done || c.call.Requested > cursor {
			return nil
		}
		s.call, s.off, s.told = c, 0, false
		c.followers++
	} else if c.call.Requested > cursor {
		return nil // the watcher has not sent the call's model_requested yet
	} else if s.off == len(c.text) && !c.done && s.told && c.truncated == s.toldTruncated {
		return nil // nothing new
	}
	out := &reinv1.ModelOutput{
		Requested: c.call.Requested, Step: c.call.Step, Attempt: c.call.Attempt, Resumed: c.call.Resumed,
		Offset: uint64(s.off), Text: string(c.text[s.off:]), Done: c.done, Truncated: c.truncated,
	}
	s.off, s.told, s.toldTruncated = len(c.text), true, c.truncated
	if c.done {
		s.releaseLocked()
	}
	return out
}

// releaseLocked stops following the call: one that returned is dropped
// once no watcher is still to send its end.
func (s *Subscription) releaseLocked() {
	c := s.call
	if c == nil {
		return
	}
	s.call = nil
	c.followers--
	if c.done && c.followers == 0 && s.hub.calls[s.runID] == c {
		delete(s.hub.calls, s.runID)
	}
}
