package server

import (
	"sync"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// tailLen bounds the committed events the hub keeps per watched run.
const tailLen = 256

// Hub wakes watchers when a run's log grows. The writer commits, then calls
// Published with the committed events, which does not block; a
// watcher subscribes first, then reads the store from its cursor, and on each
// wake-up takes what follows its cursor from the run's tail (the last
// committed events of a watched run, at most tailLen) or, when the tail does
// not reach back to its cursor, from the store. A watcher that falls behind
// loses nothing, because the store has every event, and holds at most one
// pending wake-up, so its memory is bounded; the tail is shared by a run's
// watchers and dropped when the last one leaves.
type Hub struct {
	// mu guards subs and all.
	mu   sync.Mutex
	subs map[string]map[*Subscription]struct{}
	// all are the watchers of every run (WatchRuns).
	all map[*Subscription]struct{}
	// tails are the last committed events of watched runs, gap-free and in
	// order; a run without watchers has none.
	tails map[string][]*reinv1.Event
	// calls are the runs' model calls in flight, with their text so far
	// (output.go).
	calls map[string]*liveCall
	// streamAll: every run's calls stream (Config.StreamModelCalls), not
	// only those of runs with output watchers. Set before use.
	streamAll bool
}

// Subscription is one watcher's wake-up channel.
type Subscription struct {
	hub   *Hub
	runID string
	all   bool
	// C receives a value when the run may have new events. Capacity 1:
	// wake-ups coalesce.
	C chan struct{}
	// O, for a watcher of the run's model output (SubscribeOutput),
	// receives a value when the run's call in flight may have new text;
	// nil otherwise. Capacity 1.
	O chan struct{}
	// call is the model call whose text the watcher is sending, off how
	// much of it it sent, and told whether it sent a first piece of it
	// (and with what truncated); next, a call that began before it sent
	// the end of that one: guarded by the hub's lock (output.go).
	call                *liveCall
	next                *liveCall
	off                 int
	told, toldTruncated bool
}

// NewHub returns an empty hub.
func NewHub() *Hub {
	return &Hub{subs: map[string]map[*Subscription]struct{}{}, all: map[*Subscription]struct{}{}, tails: map[string][]*reinv1.Event{},
		calls: map[string]*liveCall{}}
}

// Published is the engine's hook for each durable append: it keeps the
// events in the run's tail (keepLocked) and wakes the run's watchers and
// the watchers of all runs. It never blocks. The events must not be
// modified afterwards.
func (h *Hub) Published(runID string, evs []*reinv1.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.keepLocked(runID, evs)
	h.notifyLocked(runID)
}

// Notify wakes every watcher of runID, and every watcher of all runs. It
// never blocks.
func (h *Hub) Notify(runID string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.notifyLocked(runID)
}

// Grew is told by another source of commits (the etcd store's watch of
// what every server commits) that runID's log now ends at version: a tail
// that ends before it lacks events this server did not publish, so it is
// dropped, and the run's watchers read them from the store. It wakes the
// watchers as Notify does and never blocks.
func (h *Hub) Grew(runID string, version uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t := h.tails[runID]; len(t) > 0 && t[len(t)-1].GetSequence() < version {
		delete(h.tails, runID)
	}
	h.notifyLocked(runID)
}

// NotifyAll drops every tail and wakes every watcher: commits may have
// been missed (the watch of another source restarted), so each reads the
// store from its cursor. It never blocks.
func (h *Hub) NotifyAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	clear(h.tails)
	for _, subs := range h.subs {
		for s := range subs {
			s.wake()
		}
	}
	for s := range h.all {
		s.wake()
	}
}

func (h *Hub) notifyLocked(runID string) {
	for s := range h.subs[runID] {
		s.wake()
	}
	for s := range h.all {
		s.wake()
	}
}

func (s *Subscription) wake() {
	select {
	case s.C <- struct{}{}:
	default:
	}
}

// SubscribeAll registers a watcher of every run. Call Close when done.
func (h *Hub) SubscribeAll() *Subscription {
	s := &Subscription{hub: h, all: true, C: make(chan struct{}, 1)}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.all[s] = struct{}{}
	return s
}

// Subscribe registers a watcher of runID. Call Close when done.
func (h *Hub) Subscribe(runID string) *Subscription {
	return h.subscribe(&Subscription{hub: h, runID: runID, C: make(chan struct{}, 1)})
}

// SubscribeOutput registers a watcher of runID and of the text of its
// model calls in flight (Output). Call Close when done.
func (h *Hub) SubscribeOutput(runID string) *Subscription {
	return h.subscribe(&Subscription{hub: h, runID: runID, C: make(chan struct{}, 1), O: make(chan struct{}, 1)})
}

func (h *Hub) subscribe(s *Subscription) *Subscription {
	runID := s.runID
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.subs[runID] == nil {
		h.subs[runID] = map[*Subscription]struct{}{}
	}
	h.subs[runID][s] = struct{}{}
	return s
}

// Close unregisters the watcher.
func (s *Subscription) Close() {
	h := s.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.all {
		delete(h.all, s)
		return
	}
	s.leaveLocked()
	delete(h.subs[s.runID], s)
	if len(h.subs[s.runID]) == 0 {
		delete(h.subs, s.runID)
		delete(h.tails, s.runID)
	}
}

// keepLocked records committed (durable) events of a run in its tail, if
// the run has watchers. Events that do not follow the tail start it anew;
// events older than it are ignored (two writers' appends may be published
// out of order).
func (h *Hub) keepLocked(runID string, evs []*reinv1.Event) {
	if len(evs) == 0 || len(h.subs[runID]) == 0 {
		return
	}
	t := h.tails[runID]
	switch {
	case len(t) > 0 && evs[0].GetSequence() <= t[len(t)-1].GetSequence():
		return
	case len(t) > 0 && evs[0].GetSequence() != t[len(t)-1].GetSequence()+1:
		t = nil
	}
	t = append(t, evs...)
	if len(t) > tailLen {
		t = append([]*reinv1.Event(nil), t[len(t)-tailLen/2:]...)
	}
	h.tails[runID] = t
}

// Tail returns the run's kept events after cursor. ok is false when the
// tail does not reach back to cursor+1: then the store must be read.
func (h *Hub) Tail(runID string, cursor uint64) (evs []*reinv1.Event, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.tails[runID]
	if len(t) == 0 {
		return nil, false
	}
	first, last := t[0].GetSequence(), t[len(t)-1].GetSequence()
	switch {
	case cursor+1 < first:
		return nil, false
	case cursor >= last:
		return nil, true
	}
	return t[cursor+1-first:], true
}
