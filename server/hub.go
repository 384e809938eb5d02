package server

import "sync"

// Hub wakes watchers when a run's log grows. It carries no events: the writer
// commits, then calls Notify, which never blocks; a watcher subscribes first,
// then reads the store from its cursor, and re-reads on each wake-up. A
// watcher that falls behind loses nothing, because the store has every event,
// and holds at most one pending wake-up, so its memory is bounded.
type Hub struct {
	// mu guards subs.
	mu   sync.Mutex
	subs map[string]map[*Subscription]struct{}
}

// Subscription is one watcher's wake-up channel.
type Subscription struct {
	hub   *Hub
	runID string
	// C receives a value when the run may have new events. Capacity 1:
	// wake-ups coalesce.
	C chan struct{}
}

// NewHub returns an empty hub.
func NewHub() *Hub {
	return &Hub{subs: map[string]map[*Subscription]struct{}{}}
}

// Notify wakes every watcher of runID. It never blocks.
func (h *Hub) Notify(runID string, _ uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs[runID] {
		select {
		case s.C <- struct{}{}:
		default:
		}
	}
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
	delete(h.subs[s.runID], s)
	if len(h.subs[s.runID]) == 0 {
		delete(h.subs, s.runID)
	}
}
