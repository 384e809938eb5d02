package lifecycle

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
)

// maxHeld bounds the runs a walk holds behind its cursor: past it, the
// cursor stops, and the sweeps read the ended index from there (as many
// runs as are ended and not yet settled, a few bytes each in memory).
const maxHeld = 1 << 16

// changesPage is how many status changes resync reads at a time.
const changesPage = 1024

// walk is how far the keeper read the ended index, so that a sweep does
// not read again the runs no policy acts on (a stub whose tenant retains
// it forever walked each second would cost every sweep what is stored).
//
// Every run before cursor in the index is either settled (no policy acts
// on it while its tenant's is the one in policies) or held. A policy
// that changes for one of those tenants, or a run that ends with a time
// before the cursor's (an import, another server's slower clock), starts
// the walk over from the oldest: resync learns of the latter from the
// store's status changes after changes, in commit order.
type walk struct {
	cursor   string
	cursorAt time.Time
	policies map[string]Policy
	changes  uint64
	started  bool

	mu   sync.Mutex // guards held; taken by act's goroutines
	held map[string]store.Ended
}

// reset starts the walk over from the oldest run, at change head.
func (w *walk) reset(head uint64) {
	w.cursor, w.cursorAt, w.policies, w.changes, w.started = "", time.Time{}, map[string]Policy{}, head, true
	w.mu.Lock()
	w.held = map[string]store.Ended{}
	w.mu.Unlock()
}

// resync starts the walk over when what it passed may have changed: a
// policy of a tenant it passed runs of, or a run that ended behind its
// cursor since the last sweep. Otherwise it reads only the status changes
// committed since.
func (k *Keeper) resync(ctx context.Context) error {
	w := &k.walk
	if !w.started {
		_, head, err := k.Store.Changes(ctx, 0, 0)
		if err != nil {
			return err
		}
		w.reset(head)
		return nil
	}
	stale := false
	for tenant, p := range w.policies {
		if k.Policy(tenant) != p {
			stale = true
			break
		}
	}
	for {
		page, head, err := k.Store.Changes(ctx, w.changes, changesPage)
		if err != nil {
			return err
		}
		for _, c := range page {
			ch := c.Change
			if runstate.Terminal(ch.GetStatus()) && !runstate.Terminal(ch.GetPrevious()) && !ch.GetChangedAt().AsTime().After(w.cursorAt) && w.cursor != "" {
				stale = true // its entry sorts before the cursor
			}
			w.changes = c.Cursor
		}
		if len(page) < changesPage {
			if stale {
				w.reset(head)
			}
			return nil
		}
	}
}

// pass moves the cursor past e, which the sweep read in order after it:
// e is settled by p, its tenant's policy, or is held. It reports false
// when e can be neither (the held are maxHeld): the cursor stays before
// it, and the sweep passes no more.
func (w *walk) pass(e store.Ended, p Policy, settled func(store.Ended, Policy) bool) bool {
	if !settled(e, p) {
		w.mu.Lock()
		full := len(w.held) >= maxHeld
		if !full {
			w.held[e.RunID] = e
		}
		w.mu.Unlock()
		if full {
			return false
		}
	}
	w.cursor, w.cursorAt = e.Cursor, e.EndedAt
	w.policies[e.Tenant] = p
	return true
}

// due is the held runs acts finds due now, in the order of their end.
func (w *walk) due(now time.Time, acts func(store.Ended, Policy, time.Time) bool) []store.Ended {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []store.Ended
	for _, e := range w.held {
		if acts(e, w.policies[e.Tenant], now) {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b store.Ended) int {
		return cmp.Or(a.EndedAt.Compare(b.EndedAt), cmp.Compare(a.Cursor, b.Cursor))
	})
	return out
}

// gone forgets a run that was deleted.
func (w *walk) gone(runID string) {
	w.mu.Lock()
	delete(w.held, runID)
	w.mu.Unlock()
}

// archived notes that a run was archived: it is held no more once p, its
// tenant's policy, leaves it settled.
func (w *walk) archived(runID string, p Policy, settled func(store.Ended, Policy) bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.held[runID]
	if !ok {
		return
	}
	e.Archived = true
	if settled(e, p) {
		delete(w.held, runID)
	} else {
		w.held[runID] = e
	}
}
