package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/archive"
	"github.com/reinhq/rein/internal/export"
	"github.com/reinhq/rein/internal/metrics"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
)

// Policy is how long a tenant's runs stay once they ended. A duration is in
// force only when its On is set; 0 then means at once.
type Policy struct {
	ArchiveAfter time.Duration
	ArchiveOn    bool
	Retain       time.Duration
	RetainOn     bool
}

// Scrubber is a backend that can rewrite its files so that what was deleted
// from it is no longer in them (bolt: a compaction into a new file).
type Scrubber interface {
	Scrub(ctx context.Context) error
}

// ByPolicy is the deleted_by of a deletion retention made.
const ByPolicy = "policy:retain"

// Keeper archives and deletes runs by their tenant's Policy, and deletes on
// request (Erase).
type Keeper struct {
	// Store is the backend wrapped (the runs are read through it).
	Store *Store
	// Policy is a tenant's policy; read at each sweep, so that settings
	// reloaded take effect at the next.
	Policy func(tenant string) Policy
	// Soonest, when set, is the least time after a run's end at which any
	// tenant's policy archives or deletes it, and false when no policy
	// does; read at each sweep. A sweep then reads nothing when no policy
	// acts, and stops at the first run that ended too lately for any;
	// with the runs read before kept (walk.go), the runs that ended cost a
	// sweep what is due and what ended since, not what is stored. Nil
	// reads every run that ended once, then what ended since.
	Soonest func() (time.Duration, bool)
	// Every is the time between sweeps; 0 means a second.
	Every   time.Duration
	Clock   func() time.Time
	Log     *slog.Logger
	Metrics *metrics.Lifecycle

	mu sync.Mutex
	// retry is when a run whose archiving failed is tried again, and
	// backoff how long it waits after the next failure.
	retry   map[string]time.Time
	backoff map[string]time.Duration
	// eraseMu orders scrubs after the deletions they follow.
	eraseMu sync.Mutex
	// walkMu is held across a sweep: one at a time reads and moves walk.
	walkMu sync.Mutex
	walk   walk
}

// Parallel is how many trees a sweep archives or deletes at once.
const Parallel = 8

const (
	sweepBatch = 256
	minBackoff = time.Second
	maxBackoff = 5 * time.Minute
)

func (k *Keeper) now() time.Time {
	if k.Clock != nil {
		return k.Clock()
	}
	return time.Now()
}

func (k *Keeper) log() *slog.Logger {
	if k.Log != nil {
		return k.Log
	}
	return slog.New(slog.DiscardHandler)
}

// Run sweeps until ctx ends.
func (k *Keeper) Run(ctx context.Context) {
	every := k.Every
	if every <= 0 {
		every = time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if _, err := k.Sweep(ctx); err != nil && ctx.Err() == nil {
			k.log().Warn("lifecycle sweep failed; trying again at the next", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Swept counts what a sweep did.
type Swept struct {
	Archived, Deleted, Failed int
}

// Sweep archives the trees whose archive_after passed and deletes those
// whose retention did, oldest first. A tree goes with its root: a child is
// never archived or deleted before its root ended.
//
// The keeper reads the ended index only once through: it keeps where it
// read to (walk.go), and the runs behind that point some policy still acts
// on, so that a sweep costs what is due and what ended since, never the
// stubs that no policy will touch again.
func (k *Keeper) Sweep(ctx context.Context) (Swept, error) {
	var done Swept
	now := k.now()
	var last time.Time // no run that ended after it is due; zero: no bound
	if k.Soonest != nil {
		least, ok := k.Soonest()
		if !ok {
			return done, nil
		}
		last = now.Add(-least)
	}
	k.walkMu.Lock()
	defer k.walkMu.Unlock()
	if err := k.resync(ctx); err != nil {
		return done, err
	}
	// First the runs read before that some policy still acts on...
	held := k.walk.due(now, k.acts)
	for len(held) > 0 {
		n := min(len(held), sweepBatch)
		k.act(ctx, held[:n], now, &done)
		held = held[n:]
		if err := ctx.Err(); err != nil {
			return done, err
		}
	}
	// ...then what ended since, up to what any policy may find due.
	after, passing := k.walk.cursor, true
	for {
		batch, err := k.Store.Ended(ctx, after, sweepBatch)
		if err != nil {
			return done, err
		}
		full := len(batch) == sweepBatch
		if !last.IsZero() {
			// In the order of their end: those past last, and all after
			// them, are due for no policy yet.
			if i := slices.IndexFunc(batch, func(e store.Ended) bool { return e.EndedAt.After(last) }); i >= 0 {
				batch, full = batch[:i], false
			}
		}
		for _, e := range batch {
			if passing {
				passing = k.walk.pass(e, k.Policy(e.Tenant), k.settled)
			}
		}
		k.act(ctx, batch, now, &done)
		if err := ctx.Err(); err != nil {
			return done, err
		}
		if !full {
			break
		}
		after = batch[len(batch)-1].Cursor
	}
	if done.Deleted > 0 {
		if err := k.scrub(ctx); err != nil {
			return done, err
		}
	}
	return done, nil
}

// settled reports whether no policy acts on e while p is its tenant's: a
// child (it goes with its root), a run whose tenant retains it forever
// that is archived already or that no archiving awaits.
func (k *Keeper) settled(e store.Ended, p Policy) bool {
	return e.Parent != "" || !p.RetainOn && (e.Archived || !p.ArchiveOn || k.Store.arch == nil)
}

// acts reports whether p archives or deletes e now.
func (k *Keeper) acts(e store.Ended, p Policy, now time.Time) bool {
	if e.Parent != "" {
		return false // goes with its root
	}
	age := now.Sub(e.EndedAt)
	return p.RetainOn && age >= p.Retain ||
		!e.Archived && p.ArchiveOn && age >= p.ArchiveAfter && k.Store.arch != nil && k.due(e.RunID, now)
}

// act archives or deletes the trees of batch whose policy says so now, and
// tells the walk what became of them.
//
// The trees go Parallel at a time: their objects are written side by side,
// and their stubs are committed once every object of the batch is written,
// all at once, so that the store commits them in a few group commits
// instead of one for each tree, and its syncs do not queue behind the
// objects' (nor theirs behind its).
func (k *Keeper) act(ctx context.Context, batch []store.Ended, now time.Time, done *Swept) {
	var mu sync.Mutex // guards done
	count := func(f func(*Swept)) {
		mu.Lock()
		f(done)
		mu.Unlock()
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(Parallel)
	var pmu sync.Mutex
	var pending []func()
	for _, e := range batch {
		p := k.Policy(e.Tenant)
		if !k.acts(e, p, now) {
			continue
		}
		if p.RetainOn && now.Sub(e.EndedAt) >= p.Retain {
			g.Go(func() error {
				recs, err := k.erase(gctx, e.RunID, ByPolicy, fmt.Sprintf("retention of %s ended", p.Retain), true)
				count(func(d *Swept) { d.Deleted += len(recs) })
				if err != nil {
					count(func(d *Swept) { d.Failed++ })
					k.log().Warn("delete a run whose retention ended: it stays and is tried again", "run", e.RunID, "err", err)
					return nil
				}
				k.walk.gone(e.RunID)
				return nil
			})
			continue
		}
		g.Go(func() error {
			commit, err := k.archiveTree(gctx, e.RunID)
			if errors.Is(err, store.ErrNotFound) {
				k.walk.gone(e.RunID) // deleted on request since it was read
				return nil
			}
			if err != nil {
				count(func(d *Swept) { d.Failed++ })
				k.failed(e.RunID, now, err)
				return nil
			}
			pmu.Lock()
			pending = append(pending, func() {
				n, err := commit(ctx)
				count(func(d *Swept) { d.Archived += n })
				if err != nil {
					count(func(d *Swept) { d.Failed++ })
					k.failed(e.RunID, now, err)
					return
				}
				k.forget(e.RunID)
				k.walk.archived(e.RunID, p, k.settled)
			})
			pmu.Unlock()
			return nil
		})
	}
	_ = g.Wait() // each run's failure is counted and logged, never the sweep's
	var commits sync.WaitGroup
	for _, commit := range pending {
		commits.Go(commit)
	}
	commits.Wait()
}

// due reports whether a run whose archiving failed may be tried again.
func (k *Keeper) due(runID string, now time.Time) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	t, ok := k.retry[runID]
	return !ok || !now.Before(t)
}

func (k *Keeper) failed(runID string, now time.Time, err error) {
	k.Metrics.Failed()
	k.mu.Lock()
	if k.retry == nil {
		k.retry, k.backoff = map[string]time.Time{}, map[string]time.Duration{}
	}
	b := k.backoff[runID]
	b = min(max(2*b, minBackoff), maxBackoff)
	k.backoff[runID], k.retry[runID] = b, now.Add(b)
	k.mu.Unlock()
	k.log().Warn("archive a run: it stays in the live store and is tried again", "run", runID, "retry_in", b, "err", err)
}

func (k *Keeper) forget(runID string) {
	k.mu.Lock()
	delete(k.retry, runID)
	delete(k.backoff, runID)
	k.mu.Unlock()
}

// tree returns a run's tree, children before their parents (the root
// last), or an error naming a run of it that has not ended.
func (k *Keeper) tree(ctx context.Context, root runstate.State) ([]runstate.State, error) {
	var out []runstate.State
	var walk func(st runstate.State) error
	walk = func(st runstate.State) error {
		if !runstate.Terminal(st.Status) {
			return fmt.Errorf("run %s of the tree of %s is %s: %w", st.RunID, root.RunID, runstate.StatusName(st.Status), store.ErrLive)
		}
		after := ""
		for st.ChildrenStarted > 0 { // else no run names it as its parent
			page, err := k.Store.Backend.List(ctx, store.Filter{Parent: st.RunID, Limit: 256, After: after})
			if err != nil {
				return err
			}
			for _, child := range page.Runs {
				if err := walk(child); err != nil {
					return err
				}
			}
			if page.Next == "" {
				break
			}
			after = page.Next
		}
		out = append(out, st)
		return nil
	}
	return out, walk(root)
}

// archiveTree writes the export of a root and of every run under it to the
// archive, and returns the commit that replaces them by their stubs, the
// children first, to be run once the objects are written: a sweep runs the
// commits of a batch's trees together, once all their objects are written.
func (k *Keeper) archiveTree(ctx context.Context, rootID string) (commit func(context.Context) (int, error), err error) {
	root, err := k.Store.Backend.Load(ctx, rootID)
	if err != nil {
		return nil, err
	}
	runs, err := k.tree(ctx, root)
	if err != nil {
		return nil, err
	}
	type put struct {
		st   runstate.State
		rec  *reinv1.RunArchive
		size int
	}
	var puts []put
	for _, st := range runs {
		if st.Archive != nil {
			continue
		}
		rec, size, err := k.putRun(ctx, st)
		if err != nil {
			return nil, err
		}
		puts = append(puts, put{st, rec, size})
	}
	return func(ctx context.Context) (int, error) {
		for i, p := range puts {
			if err := k.commitStub(ctx, p.st, p.rec, p.size); err != nil {
				return i, err
			}
		}
		return len(puts), nil
	}, nil
}

// putRun writes a run's export to the archive, reads it back and checks it.
// Only then may commitStub replace the run by its stub: a crash between
// leaves the run whole in the live store, and at worst an object that the
// next attempt writes again, byte for byte: the export of a run that ended
// is always the same bytes (exported_at is its end, exported_by "rein"), so
// two servers that archive it at once write the same object.
func (k *Keeper) putRun(ctx context.Context, st runstate.State) (*reinv1.RunArchive, int, error) {
	var evs []*reinv1.Event
	for after := uint64(0); after < st.Version; {
		page, err := k.Store.Backend.Events(ctx, st.RunID, after, 1024)
		if err != nil {
			return nil, 0, err
		}
		if len(page) == 0 {
			return nil, 0, fmt.Errorf("run %s: its log ends at %d, its state is at version %d: %w", st.RunID, after, st.Version, store.ErrDataLoss)
		}
		evs = append(evs, page...)
		after = page[len(page)-1].GetSequence()
	}
	x, err := export.New(ctx, st.RunID, evs, k.Store.Backend)
	if err != nil {
		return nil, 0, err
	}
	x.ExportedAt = timestamppb.New(st.UpdatedAt)
	x.ExportedBy = "rein"
	data, err := export.Encode(x)
	if err != nil {
		return nil, 0, err
	}
	rec, err := k.Store.arch.Put(ctx, archive.Key(st.Tenant, st.UpdatedAt, st.RunID), data, k.now())
	if err != nil {
		return nil, 0, err
	}
	return rec, len(data), nil
}

// commitStub replaces a run whose export putRun wrote by its stub.
func (k *Keeper) commitStub(ctx context.Context, st runstate.State, rec *reinv1.RunArchive, size int) error {
	_, err := k.Store.Backend.Archive(ctx, st.RunID, st.Version, rec)
	if errors.Is(err, store.ErrArchived) {
		return nil // another server archived it first, the same object
	}
	if err != nil {
		return err
	}
	k.Metrics.Archived(size)
	k.log().Debug("archived a run", "run", st.RunID, "key", rec.GetKey(), "bytes", size)
	return nil
}

// Erase deletes a run on request: its tree when tree is set, else the run
// alone, which must not have delegated and whose parent, if any, must have
// ended. It returns the deletion records, the run's first. A run deleted
// before returns its record and changes nothing.
func (k *Keeper) Erase(ctx context.Context, runID, by, reason string, tree bool) ([]*reinv1.RunDeletion, error) {
	recs, err := k.erase(ctx, runID, by, reason, tree)
	if err != nil {
		return recs, err
	}
	return recs, k.scrub(ctx)
}

func (k *Keeper) erase(ctx context.Context, runID, by, reason string, tree bool) ([]*reinv1.RunDeletion, error) {
	st, err := k.Store.Backend.Load(ctx, runID)
	if errors.Is(err, store.ErrNotFound) {
		rec, derr := k.Store.Deletion(ctx, runID)
		if derr != nil {
			return nil, err
		}
		return []*reinv1.RunDeletion{rec}, nil
	}
	if err != nil {
		return nil, err
	}
	if !runstate.Terminal(st.Status) {
		return nil, fmt.Errorf("run %s is %s: %w; cancel it first (rein cancel %s)", runID, runstate.StatusName(st.Status), store.ErrLive, runID)
	}
	if parent := st.DelegatedBy.GetParentRunId(); parent != "" && !tree {
		p, err := k.Store.Backend.Load(ctx, parent)
		if err == nil && !runstate.Terminal(p.Status) {
			return nil, fmt.Errorf("run %s was delegated by run %s, which is %s: %w; a child goes with its tree once its root ended (--tree on the root)",
				runID, parent, runstate.StatusName(p.Status), store.ErrLive)
		}
	}
	runs := []runstate.State{st}
	if tree {
		root := st
		for root.DelegatedBy.GetParentRunId() != "" {
			p, err := k.Store.Backend.Load(ctx, root.DelegatedBy.GetParentRunId())
			if err != nil {
				break // the parent was deleted before: this is the tree's top
			}
			root = p
		}
		if runs, err = k.tree(ctx, root); err != nil {
			return nil, err
		}
	} else if st.ChildrenStarted > 0 {
		return nil, fmt.Errorf("run %s delegated to %d runs: %w; delete its whole tree (--tree)", runID, st.ChildrenStarted, store.ErrLive)
	}
	var recs []*reinv1.RunDeletion
	first := 0
	for _, r := range runs {
		rec, err := k.eraseRun(ctx, r, by, reason)
		if err != nil {
			return recs, err
		}
		if r.RunID == runID {
			first = len(recs)
		}
		recs = append(recs, rec)
	}
	recs[0], recs[first] = recs[first], recs[0]
	return recs, nil
}

// eraseRun deletes one run: its archived object first (a crash after it
// leaves a stub whose deletion is retried), then everything the live store
// holds of it, with its record.
func (k *Keeper) eraseRun(ctx context.Context, st runstate.State, by, reason string) (*reinv1.RunDeletion, error) {
	if st.Archive != nil {
		if k.Store.arch == nil {
			return nil, fmt.Errorf("run %s is archived under %s, and no archive is open to delete it from (rein serve --archive URL; the commands without --server use the directory DB.archive beside --db): %w",
				st.RunID, st.Archive.GetKey(), store.ErrUnavailable)
		}
		if err := k.Store.arch.Delete(ctx, st.Archive.GetKey()); err != nil {
			k.Metrics.Failed()
			return nil, fmt.Errorf("run %s: %w: %w", st.RunID, err, store.ErrUnavailable)
		}
	}
	rec, deleted, err := k.Store.Delete(ctx, &reinv1.RunDeletion{
		RunId: st.RunID, DeletedBy: by, Reason: reason, DeletedAt: timestamppb.New(k.now()),
	})
	if err != nil {
		return nil, err
	}
	if deleted {
		label := "request"
		if by == ByPolicy {
			label = "policy"
		}
		k.Metrics.Deleted(label)
		k.log().Info("deleted a run", "run", st.RunID, "tenant", st.Tenant, "by", by, "reason", reason)
	}
	return rec, nil
}

// scrub has the backend rewrite its files without what was deleted, when it
// can.
func (k *Keeper) scrub(ctx context.Context) error {
	s, ok := k.Store.Backend.(Scrubber)
	if !ok {
		return nil
	}
	k.eraseMu.Lock()
	defer k.eraseMu.Unlock()
	if err := s.Scrub(ctx); err != nil {
		return fmt.Errorf("rewrite the store without the deleted runs: %w", err)
	}
	return nil
}
