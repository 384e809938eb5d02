package replica

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Taking over runs: what a replica looks at to find the runs no live
// server drives, and how it spreads them with the other replicas.

// Serve attaches the server's engine: from now on the replica takes over
// the runs of servers whose leases end (WatchLeft, Held), and once per
// TTL the runs no server took (Unowned, twice); it looks over every live run at
// the start, after a new lease, and when a watch may have missed a
// replica's end.
func (r *Replica) Serve(e Engine) {
	r.mu.Lock()
	r.engine = e
	r.mu.Unlock()
	left := make(chan string, 64)
	r.takers.Add(2)
	go func() {
		defer r.takers.Done()
		r.cfg.Store.WatchLeft(r.taking, func(name string) {
			if name == r.cfg.Name {
				return // this one's lease ended: hold asks for a new one, then looks over every run
			}
			select {
			case left <- name:
			default:
				r.lookAll() // too many at once: look over every run
			}
		}, r.lookAll)
	}()
	go func() {
		defer r.takers.Done()
		every := time.NewTicker(r.cfg.TTL)
		defer every.Stop()
		// The runs no server took are looked for twice a TTL, so that one
		// is taken within a TTL of its creation (takeUnowned).
		unowned := time.NewTicker(r.cfg.TTL / 2)
		defer unowned.Stop()
		var since int64
		pending := map[string]bool{} // replicas that left runs no one could take yet
		for {
			select {
			case <-r.taking.Done():
				return
			case name := <-left:
				pending[name] = true
				r.takeHeld(e, pending)
			case <-r.lookNow:
				r.lookOver(e)
			case <-unowned.C:
				r.takeUnowned(e, &since)
			case <-every.C:
				r.tendOwn(e)
				r.takeHeld(e, pending)
			}
		}
	}()
}

// lookAll asks the takeover loop to look over every live run.
func (r *Replica) lookAll() {
	select {
	case r.lookNow <- struct{}{}:
	default:
	}
}

// lookOver carries on every run no live server drives, looking at every
// live run.
func (r *Replica) lookOver(e Engine) {
	if !r.Holding() {
		return
	}
	start := time.Now()
	if err := e.ResumeAll(r.taking); err != nil && !errors.Is(err, context.Canceled) {
		r.cfg.Logger.Warn("look over the runs to take", "error", err)
	}
	r.lookedOver(LookEveryLiveRun, start)
}

// tendOwn carries on the runs this replica holds that it neither drives
// nor keeps the deadlines of: a driver that stopped on an error (etcd
// full, say) is started again. It reads only this replica's own index,
// and loads only the runs it does not tend.
func (r *Replica) tendOwn(e Engine) {
	if !r.Holding() {
		return
	}
	start := time.Now()
	for after := ""; ; {
		page, err := r.cfg.Store.Held(r.taking, r.cfg.Name, after, listPage)
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				r.cfg.Logger.Warn("list the runs this server holds", "error", err)
			}
			return
		}
		for _, runID := range page {
			if e.Tending(runID) {
				continue
			}
			if err := e.Takeover(r.taking, runID); err != nil && !errors.Is(err, context.Canceled) {
				r.cfg.Logger.Warn("carry on a run this server holds", "run_id", runID, "error", err)
			}
		}
		if len(page) < listPage {
			break
		}
		after = page[len(page)-1]
	}
	r.lookedOver(LookOwn, start)
}

// takeUnowned carries on the runs no server took: their server died right
// after creating them, or drives as many runs as its cap allows. The
// index holds only those, so a look costs what is orphaned, not what is
// live. A look takes only the runs already in the index at the look
// before it (since, the revision that one read at, half a TTL ago): a
// run just created is in the index until its server takes it, a moment
// later, and is left to it. The first look only reads the revision (the
// look over every live run at the start covers what came before).
func (r *Replica) takeUnowned(e Engine, since *int64) {
	if !r.Holding() {
		return
	}
	start := time.Now()
	defer r.lookedOver(LookUnowned, start)
	var next int64
	ids, ok := r.listAll("runs no server took", func(after string) ([]string, error) {
		page, rev, err := r.cfg.Store.Unowned(r.taking, max(*since, 1), after, listPage)
		if next == 0 {
			next = rev
		}
		return page, err
	})
	if !ok {
		return
	}
	first := *since == 0
	*since = next
	if !first {
		r.takeIDs(e, "runs no server took", ids)
	}
}

// takeHeld carries on the runs the replicas in pending drove when their
// leases ended, and forgets each replica whose runs are all taken (by
// this replica or others). A replica's runs none could take (every server
// at its cap) are tried again at the next look.
func (r *Replica) takeHeld(e Engine, pending map[string]bool) {
	if !r.Holding() {
		return
	}
	for name := range pending {
		start := time.Now()
		left := r.takeAll(e, fmt.Sprintf("runs of server %q, whose lease ended", name), func(after string) ([]string, error) {
			return r.cfg.Store.Held(r.taking, name, after, listPage)
		})
		if left == 0 {
			delete(pending, name)
		}
		r.lookedOver(LookLeft, start)
	}
}

// takeAll takes over, in a random order, each run list pages, pausing
// before each take by this replica's load (spread); it returns how many
// runs the index still held after the walk (-1 when it could not be read).
func (r *Replica) takeAll(e Engine, what string, list func(after string) ([]string, error)) int {
	ids, ok := r.listAll(what, list)
	if !ok {
		return -1
	}
	if !r.takeIDs(e, what, ids) {
		return -1
	}
	rest, err := list("")
	if err != nil {
		return -1
	}
	return len(rest)
}

// listAll reads every page of list; false when one could not be read
// (logged).
func (r *Replica) listAll(what string, list func(after string) ([]string, error)) ([]string, bool) {
	var ids []string
	for after := ""; ; {
		page, err := list(after)
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				r.cfg.Logger.Warn("list the "+what, "error", err)
			}
			return nil, false
		}
		ids = append(ids, page...)
		if len(page) < listPage {
			return ids, true
		}
		after = page[len(page)-1]
	}
}

// takeIDs takes over the runs ids in a random order, pausing before each
// take by this replica's load (spread); false when it stopped taking (the
// lease lost, or Leave).
func (r *Replica) takeIDs(e Engine, what string, ids []string) bool {
	rand.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	for _, runID := range ids {
		pause(r.taking, r.spread(e))
		if r.taking.Err() != nil || !r.Holding() {
			return false
		}
		if err := e.Takeover(r.taking, runID); err != nil && !errors.Is(err, context.Canceled) {
			r.cfg.Logger.Warn("take over a run", "of", what, "run_id", runID, "error", err)
		}
	}
	return true
}

// listPage is how many run IDs one read of an ownership index returns.
const listPage = 1000

// spreadHalf is how many runs a replica without a cap (--max-runs 0)
// drives when it counts as half loaded.
const spreadHalf = 64

// spread is how long this replica waits before it takes an orphaned run:
// nothing when it drives no run, up to a quarter of the TTL at its cap, in
// proportion to its load (runs driven against its cap, or against
// spreadHalf without one). Every replica looks at the same orphans, so
// the least loaded take them first: a replica that starts cold takes its
// share at once.
func (r *Replica) spread(e Engine) time.Duration {
	driving, limit := e.Occupancy()
	var load float64
	if limit > 0 {
		load = min(float64(driving)/float64(limit), 1)
	} else {
		load = float64(driving) / float64(driving+spreadHalf)
	}
	return time.Duration(load * float64(r.cfg.TTL/4))
}

// The kinds of look for runs to carry on (Config.LookedOver).
const (
	// LookEveryLiveRun: every live run, at the start, after a new lease,
	// and when a watch may have missed a replica's end.
	LookEveryLiveRun = "every_live_run"
	// LookUnowned: the runs no server took, twice per TTL.
	LookUnowned = "unowned"
	// LookLeft: the runs of a replica whose lease ended.
	LookLeft = "left"
	// LookOwn: this replica's own runs it neither drives nor keeps the
	// deadlines of, once per TTL.
	LookOwn = "own"
)

// lookedOver tells Config.LookedOver of a look that began at start.
func (r *Replica) lookedOver(what string, start time.Time) {
	if r.cfg.LookedOver != nil {
		r.cfg.LookedOver(what, time.Since(start))
	}
}
