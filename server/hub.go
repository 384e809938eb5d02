package server

import "sync"

// Hub wakes watchers when a run's log grows. It carries no events: the writer
// commits, then calls Notify, which never blocks; a watcher subscribes first,
// then reads the store from its cursor, and re-reads on each wake-up. A
// watcher that falls behind loses nothing, because the store has every event,
// and holds at most one pending wake-up, so its memory is bounded.
type Hub struct {
	// mu guards subs and all.
	mu   sync.Mutex
	subs map[string]map[*Subscription]struct{}
	// all are the watchers of every run (WatchRuns).
	all map[*Subscription]struct{}
}

// Subscription is one watcher's wake-up channel.
type Subscription struct {
	hub   *Hub
	runID string
	all   bool
	// C receives a value when the run may have new events. Capacity 1:
	// wake-ups coalesce.
	C chan struct{}
}

// NewHub returns an empty hub.
func NewHub() *Hub {
	return &Hub{subs: map[string]map[*Subscription]struct{}{}, all: map[*Subscription]struct{}{}}
}

// Notify wakes every watcher of runID, and every watcher of all runs. It
// never blocks.
func (h *Hub) Notify(runID string, _ uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
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
	s := &Subscription{hub: h, runID: runID, C: make(chan struct{}, 1)}
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
	delete(h.subs[s.runID], s)
	if len(h.subs[s.runID]) == 0 {
		delete(h.subs, s.runID)
	}
}
