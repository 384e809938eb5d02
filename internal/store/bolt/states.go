package bolt

import (
	"sync"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store/seal"
)

// states caches each run's state as the writer last left it, so that an
// append need not decode the stored snapshot, and a request of a batch
// folds onto what the batch's earlier requests of its run left. Only the
// writer puts and drops; Append's callers read it to fold ahead
// (foldAhead). A cached state is never changed once put: the writer puts a
// new one for each append, so a state's pointer names the version it is
// of, and an entry the writer dropped (its commit failed, or the cache was
// cleared) is loaded again from the store as a new pointer. A cached state
// holds the run's contract (shared, never changed), because the state an
// append returns holds it; a run that ended is kept without it.
type states struct {
	mu sync.Mutex
	m  map[string]*runstate.State // guarded by mu
}

func (c *states) get(runID string) *runstate.State {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[runID]
}

// put caches st. A run that ended is cached without its contract, so the
// cache keeps no contract alive that no driver holds: the fold refuses
// every append to it, so no state is made from it again.
func (c *states) put(runID string, st *runstate.State) {
	if st.Contract != nil && runstate.Terminal(st.Status) {
		ended := *st
		ended.Contract = nil
		st = &ended
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxCachedStates {
		c.m = map[string]*runstate.State{}
	}
	c.m[runID] = st
}

// clear drops every run's state.
func (c *states) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m = nil
}

func (c *states) drop(runID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, runID)
}

// folded is an append folded by its caller's goroutine onto the cached
// state base, with the snapshot of the state it makes. The writer takes it
// when base is still the run's state as stored; otherwise (another append
// came first, the cache was dropped) it folds the events again itself.
type folded struct {
	base     *runstate.State
	next     runstate.State
	snapshot []byte
}

// foldAhead folds events onto the cached state of runID when that state is
// at version expected, in the caller's goroutine, so that the one writer
// only confirms and puts: at 16 runs at once, the fold and the snapshot's
// encoding were a third of the writer's work between two commits, which
// every run waits on. It returns nil when nothing is cached at that
// version or the fold fails: the writer then folds in its transaction, and
// refuses the append with the fold's error.
func (s *Store) foldAhead(runID string, expected uint64, events []*reinv1.Event) *folded {
	base := s.states.get(runID)
	if base == nil || base.Version != expected {
		return nil
	}
	next, err := runstate.ApplyAll(*base, events)
	if err != nil {
		return nil
	}
	snap, err := seal.Seal(next.Proto(false))
	if err != nil {
		return nil
	}
	return &folded{base: base, next: next, snapshot: snap}
}
