package server

import (
	"strings"
	"unicode/utf8"

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
	// remote: another server, writer, drives the run; the text came
	// through the relay (relay.go).
	remote bool
	writer string
}

var _ step.Output = (*Hub)(nil)

// Streams implements step.Output: every call streams on a hub that
// streams all; otherwise a run's call streams while the run has a watcher
// of its output here.
func (h *Hub) Streams(runID string) bool {
	if h.streamAll {
		return true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs[runID] {
		if s.O != nil {
			return true
		}
	}
	return false
}

// Begin implements step.Output: runID's call starts (over), and the run's
// output watchers are woken.
func (h *Hub) Begin(runID string, call step.OutputCall) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.beginLocked(runID, &liveCall{call: call})
}

func (h *Hub) beginLocked(runID string, c *liveCall) {
	if old := h.calls[runID]; old != nil && !old.done {
		// A call that never ended here (one relayed from a server whose
		// run this one took over) ends now.
		h.endLocked(runID, old)
	}
	h.calls[runID] = c
	// The run's output watchers follow this call from its start, so that
	// they are sent it even if it returns before they look: at once, or
	// next, once they sent the end of the call they follow.
	for s := range h.subs[runID] {
		switch {
		case s.O == nil:
		case s.call == nil:
			s.call, s.off, s.told = c, 0, false
			c.followers++
		default:
			if s.next != nil {
				h.unfollowLocked(runID, s.next) // two calls behind: the older is skipped
			}
			s.next = c
			c.followers++
		}
	}
	h.wakeOutputLocked(runID)
}

// unfollowLocked is a watcher leaving c: a call that returned is dropped
// once no watcher is still to send its end.
func (h *Hub) unfollowLocked(runID string, c *liveCall) {
	c.followers--
	if c.done && c.followers == 0 && h.calls[runID] == c {
		delete(h.calls, runID)
	}
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
	if c := h.calls[runID]; c != nil {
		h.endLocked(runID, c)
	}
}

func (h *Hub) endLocked(runID string, c *liveCall) {
	c.done = true
	if c.followers == 0 && h.calls[runID] == c {
		delete(h.calls, runID)
	}
	h.wakeOutputLocked(runID)
}

// snapshot is runID's call in flight with its text so far (at most
// maxRelayText), or nil.
func (h *Hub) snapshot(runID string) *reinv1.ModelOutput {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.calls[runID]
	if c == nil || c.remote {
		return nil
	}
	text, truncated := c.text, c.truncated
	if len(text) > maxRelayText {
		cut := maxRelayText
		for cut > 0 && !utf8.RuneStart(text[cut]) {
			cut-- // at a character's start
		}
		text, truncated = text[:cut], true
	}
	return &reinv1.ModelOutput{Requested: c.call.Requested, Step: c.call.Step, Attempt: c.call.Attempt, Resumed: c.call.Resumed,
		Text: string(text), Truncated: truncated}
}

// relayed takes a piece of runID's call from writer's relay keys (another
// server drives the run): its text goes at its offset, and only what is
// past the text already held is added, so a piece seen twice adds nothing
// and one past a gap is dropped. Nil ends writer's call (none: any). A
// call of the run in flight here is left alone.
func (h *Hub) relayed(runID, writer string, o *reinv1.ModelOutput) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.calls[runID]
	if c != nil && !c.remote {
		return // driven here
	}
	if o == nil {
		// The writer's call returned, or its server's lease ended; nil
		// from the follow's end (writer "") ends any call.
		if c != nil && !c.done && (writer == "" || c.writer == writer) {
			h.endLocked(runID, c)
		}
		return
	}
	if c != nil && c.writer != writer && o.GetRequested() < c.call.Requested {
		return // an older call of a server that no longer drives the run
	}
	same := c != nil && c.writer == writer && c.call.Requested == o.GetRequested() && c.call.Attempt == o.GetAttempt() && c.call.Resumed == o.GetResumed()
	if !same {
		if o.GetDone() {
			if c != nil && !c.done {
				h.endLocked(runID, c)
			}
			return // a call that returned before it was followed here
		}
		if o.GetOffset() != 0 {
			return // the middle of a call not followed from its start
		}
		c = &liveCall{call: step.OutputCall{Requested: o.GetRequested(), Step: o.GetStep(), Attempt: o.GetAttempt(), Resumed: o.GetResumed()},
			remote: true, writer: writer}
		h.beginLocked(runID, c)
	} else if c.done {
		return
	}
	if off, held := o.GetOffset(), uint64(len(c.text)); off <= held && off+uint64(len(o.GetText())) > held {
		if text := o.GetText()[held-off:]; len(c.text)+len(text) > maxCallText {
			c.truncated = true
		} else {
			c.text = append(c.text, text...)
		}
	}
	c.truncated = c.truncated || o.GetTruncated()
	if o.GetDone() {
		h.endLocked(runID, c)
		return
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

// releaseLocked stops following the call, and follows the next one, if
// one began meanwhile.
func (s *Subscription) releaseLocked() {
	if s.call == nil {
		return
	}
	s.hub.unfollowLocked(s.runID, s.call)
	s.call, s.next = s.next, nil
	s.off, s.told = 0, false
}

// leaveLocked stops following any call: the watcher leaves.
func (s *Subscription) leaveLocked() {
	s.releaseLocked()
	s.releaseLocked()
}
