package server

import (
	"context"
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
// watchers and dropped when the last one leaves. On a store shared by
// several servers (commits), what the others commit reaches the hub only
// for the runs watched here, and the change feed only while a watcher of
// every run is here: the first watcher starts the follow, the last one
// ends it.
type Hub struct {
	// mu guards subs, all, tails, calls and the follows.
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
	// commits, when set, is where other servers' commits are followed
	// from: a run's while it has watchers here (follows), the change feed
	// while a watcher of every run is here (followAll). Set before use.
	commits   Commits
	follows   map[string]context.CancelFunc
	followAll context.CancelFunc
	following sync.WaitGroup
	// stopped: the node stopped following (stopFollowing); no follow
	// starts again.
	stopped bool
}

// Commits follows what the servers sharing a store commit (the etcd
// store). Each call runs until its ctx ends, calling missed at the start
// and whenever it may have lost commits (its watch restarted), and never
// blocks the store on its callbacks.
type Commits interface {
	// FollowRun calls grew as the run's log grows.
	FollowRun(ctx context.Context, runID string, grew func(version uint64), missed func())
	// FollowChanges calls changed as the change feed grows.
	FollowChanges(ctx context.Context, changed func(), missed func())
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
		calls: map[string]*liveCall{}, follows: map[string]context.CancelFunc{}}
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

// grew is told by the follow of runID's commits (Commits.FollowRun) that
// its log now ends at version: a tail that ends before it lacks events
// this server did not publish, so it is dropped, and the run's watchers
// read them from the store. It wakes the watchers as Notify does.
func (h *Hub) grew(runID string, version uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t := h.tails[runID]; len(t) > 0 && t[len(t)-1].GetSequence() < version {
		delete(h.tails, runID)
	}
	h.notifyLocked(runID)
}

// missedRun drops runID's tail and wakes its watchers: the follow of its
// commits (re)started and may have missed some, so each reads the store
// from its cursor.
func (h *Hub) missedRun(runID string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.tails, runID)
	h.notifyLocked(runID)
}

// changed wakes the watchers of every run: the change feed grew (or may
// have, when its follow restarted), and they read it from their cursors.
func (h *Hub) changed() {
	h.mu.Lock()
	defer h.mu.Unlock()
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
	if len(h.all) == 0 && h.commits != nil && !h.stopped {
		ctx, cancel := context.WithCancel(context.Background())
		h.followAll = cancel
		h.following.Go(func() { h.commits.FollowChanges(ctx, h.changed, h.changed) })
	}
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
		if h.commits != nil && !h.stopped {
			ctx, cancel := context.WithCancel(context.Background())
			h.follows[runID] = cancel
			h.following.Go(func() {
				h.commits.FollowRun(ctx, runID, func(v uint64) { h.grew(runID, v) }, func() { h.missedRun(runID) })
			})
		}
	}
	h.subs[runID][s] = struct{}{}
	return s
}

// stopFollowing ends every follow of other servers' commits and waits for
// them: the node's streams ended, and the store is about to close.
func (h *Hub) stopFollowing() {
	h.mu.Lock()
	h.stopped = true
	for runID, stop := range h.follows {
		stop()
		delete(h.follows, runID)
	}
	if h.followAll != nil {
		h.followAll()
		h.followAll = nil
	}
	h.mu.Unlock()
	h.following.Wait()
}

// Close unregisters the watcher.
func (s *Subscription) Close() {
	h := s.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.all {
		delete(h.all, s)
		if len(h.all) == 0 && h.followAll != nil {
			h.followAll()
			h.followAll = nil
		}
		return
	}
	s.leaveLocked()
	delete(h.subs[s.runID], s)
	if len(h.subs[s.runID]) == 0 {
		delete(h.subs, s.runID)
		delete(h.tails, s.runID)
		if stop := h.follows[s.runID]; stop != nil {
			stop()
			delete(h.follows, s.runID)
		}
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
