// Package admission decides when queued runs start (docs/design.md §17).
// Where a limit is set (a tenant's max_running in rein serve --tenants, or
// the server's --max-running), a new root run is created queued, and the
// Controller starts queued runs while slots are free: within a tenant by
// the contract's priority, then by arrival; across tenants by weighted fair
// share. The queue is the runs themselves, durable in the store: a restart
// or another replica finds it where it was. A Controller keeps it in
// memory between passes, in order, read once from the store and then kept
// in step by the store's status changes, which every replica's commits
// add to (queue.go).
package admission

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
)

// Starter starts queued runs: the engine.
type Starter interface {
	// Admit starts the queued run; an error Config.Gone knows when it is
	// no longer queued (another server started it, or it was cancelled).
	Admit(ctx context.Context, runID, by string) (runstate.State, error)
	// ExpireQueued ends a queued run whose deadline passed.
	ExpireQueued(ctx context.Context, runID string) (runstate.State, error)
}

// Config is what a Controller needs.
type Config struct {
	Store   store.Store
	Starter Starter
	// Gone reports whether an error of Starter means the run was no
	// longer queued (engine.ErrNotWaiting, store.ErrConflict).
	Gone func(error) bool
	// Tenant is a tenant's limit on running runs (0: none) and its
	// weight (above 0), read at each pass, so a reload takes effect.
	Tenant func(tenant string) (maxRunning int, weight float64)
	// Limited reports whether any tenant has a limit, read at each start.
	Limited func() bool
	// MaxRunning limits the running runs of all tenants; 0 for none.
	MaxRunning int
	// Owner names this server in run_admitted.
	Owner string
	// Lock, when set, is held across a pass: a lock every replica
	// shares (the store's), so two replicas never give out one slot twice.
	// Nil holds only this process's.
	Lock func(ctx context.Context) (unlock func(), err error)
	// Every is how often a pass runs when nothing asks for one: it finds
	// slots freed on other replicas, and deadlines passed. 0 means a
	// second.
	Every  time.Duration
	Clock  func() time.Time
	Logger *slog.Logger
}

// Controller starts queued runs as slots free.
type Controller struct {
	cfg  Config
	kick chan struct{}

	mu sync.Mutex // one pass at a time in this process; guards the rest
	// shares are the queues and the running runs as of the store's status
	// change changes; nil until the first pass reads them.
	shares  *shares
	changes uint64
}

// New returns a Controller; Run starts its passes.
func New(cfg Config) *Controller {
	if cfg.Every <= 0 {
		cfg.Every = time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Controller{cfg: cfg, kick: make(chan struct{}, 1)}
}

// Queues reports whether a new root run of tenant is created queued:
// whenever a limit applies to it, so that it waits its turn behind the
// runs queued before it. Nil (no Controller) queues nothing.
func (c *Controller) Queues(tenant string) bool {
	if c == nil {
		return false
	}
	if c.cfg.MaxRunning > 0 {
		return true
	}
	if max, _ := c.cfg.Tenant(tenant); max > 0 {
		return true
	}
	return c.cfg.Limited != nil && c.cfg.Limited()
}

// Kick asks for a pass soon: a run was queued, or a slot freed.
func (c *Controller) Kick() {
	if c == nil {
		return
	}
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// Run makes passes until ctx ends: on each Kick, and every Config.Every.
func (c *Controller) Run(ctx context.Context) {
	t := time.NewTicker(c.cfg.Every)
	defer t.Stop()
	for {
		if _, err := c.Pass(ctx); err != nil && ctx.Err() == nil {
			c.cfg.Logger.Error("admission pass failed; queued runs start at the next", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-c.kick:
		case <-t.C:
		}
	}
}

// listPage is the page size a rebuild lists runs with, and a catch-up
// reads status changes with.
const listPage = 1000

// Pass starts as many queued runs as the limits allow now, in their
// order, and ends those whose deadline passed in the queue. It returns how
// many it started.
//
// The queues and the running runs are kept between passes (queue.go): the
// first pass reads them from the store, and each pass after reads only the
// status changes committed since, by any server, so that a pass costs what
// changed, not what is queued.
func (c *Controller) Pass(ctx context.Context) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cfg.Lock != nil {
		unlock, err := c.cfg.Lock(ctx)
		if err != nil {
			return 0, err
		}
		defer unlock()
	}
	if err := c.catchUp(ctx); err != nil {
		return 0, err
	}
	s := c.shares
	if len(s.queued) == 0 {
		return 0, nil
	}
	s.reload()
	for _, w := range s.expired(c.cfg.Clock()) {
		if _, err := c.cfg.Starter.ExpireQueued(ctx, w.id); err != nil && !c.gone(err) {
			s.expireAt(w.deadline) // tried again at the next pass
			return 0, err
		}
		s.leave(w.id) // its status change, read at the next pass, says so again
	}
	started := 0
	for {
		if c.cfg.MaxRunning > 0 && s.total >= c.cfg.MaxRunning {
			return started, nil
		}
		t := s.next()
		if t == nil {
			return started, nil
		}
		w := t.queued[0]
		if _, err := c.cfg.Starter.Admit(ctx, w.id, c.cfg.Owner); err != nil {
			if c.gone(err) {
				s.leave(w.id) // started elsewhere, or cancelled: its change says which
				continue
			}
			return started, err
		}
		s.run(w.id, w.tenant)
		started++
	}
}

// catchUp brings the queues up to the store's last status change: read
// whole at the first pass (and after a change that could not be applied,
// or a store whose changes end before the last one read: one reopened
// behind what it served), then each change since applied in commit order.
func (c *Controller) catchUp(ctx context.Context) error {
	if c.shares == nil {
		// The changes' head first: a change committed while the runs are
		// listed is applied again after, which leaves the run where its
		// last change puts it.
		_, head, err := c.cfg.Store.Changes(ctx, 0, 0)
		if err != nil {
			return err
		}
		queued, err := c.list(ctx, reinv1.RunStatus_RUN_STATUS_QUEUED, "")
		if err != nil {
			return err
		}
		running, err := c.list(ctx, reinv1.RunStatus_RUN_STATUS_RUNNING, "")
		if err != nil {
			return err
		}
		s := newShares(c.cfg.Tenant, running)
		s.queueAll(queued)
		c.shares, c.changes = s, head
	}
	for {
		page, head, err := c.cfg.Store.Changes(ctx, c.changes, listPage)
		if err != nil {
			return err
		}
		if head < c.changes {
			c.shares = nil
			return c.catchUp(ctx)
		}
		for _, ch := range page {
			if err := c.apply(ctx, ch); err != nil {
				c.shares = nil // read whole at the next pass
				return err
			}
			c.changes = ch.Cursor
		}
		if len(page) < listPage {
			return nil
		}
	}
}

// apply puts the run of one status change where the change leaves it: in
// its tenant's queue, among the running, or in neither. A child runs in
// its parent's slot and is never queued: it is in neither.
func (c *Controller) apply(ctx context.Context, ch store.Change) error {
	s, id := c.shares, ch.Change.GetRunId()
	_, wasQueued := s.queued[id]
	_, wasRunning := s.running[id]
	s.leave(id)
	switch ch.Change.GetStatus() {
	case reinv1.RunStatus_RUN_STATUS_QUEUED:
		st, err := c.root(ctx, id)
		if err != nil || st == nil {
			return err
		}
		s.queue(waitingOf(*st))
	case reinv1.RunStatus_RUN_STATUS_RUNNING:
		if !wasQueued && !wasRunning { // else a root known
			st, err := c.root(ctx, id)
			if err != nil || st == nil {
				return err
			}
		}
		s.run(id, ch.Tenant)
	}
	return nil
}

// root loads a run, nil when it is a child or no longer stored.
func (c *Controller) root(ctx context.Context, id string) (*runstate.State, error) {
	st, err := c.cfg.Store.Load(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil || st.DelegatedBy != nil {
		return nil, err
	}
	return &st, nil
}

func (c *Controller) gone(err error) bool { return c.cfg.Gone != nil && c.cfg.Gone(err) }

// list is every root run in status, of tenant ("" for every tenant).
func (c *Controller) list(ctx context.Context, status reinv1.RunStatus, tenant string) ([]runstate.State, error) {
	var out []runstate.State
	f := store.Filter{Statuses: []reinv1.RunStatus{status}, Tenant: tenant, Limit: listPage}
	for {
		page, err := c.cfg.Store.List(ctx, f)
		if err != nil {
			return nil, err
		}
		for _, st := range page.Runs {
			if st.DelegatedBy == nil { // a child runs in its parent's slot
				out = append(out, st)
			}
		}
		if page.Next == "" {
			return out, nil
		}
		f.After = page.Next
	}
}

// Position is a queued run's place in its tenant's queue, 1 for the next
// to start; 0 when it is not queued.
func (c *Controller) Position(ctx context.Context, st runstate.State) (uint32, error) {
	if st.Status != reinv1.RunStatus_RUN_STATUS_QUEUED {
		return 0, nil
	}
	places, err := c.Positions(ctx, st.Tenant)
	return places[st.RunID], err
}

// Positions are the places of tenant's queued runs in its queue, by run
// ID, from one reading of the queue: for a page of runs.
func (c *Controller) Positions(ctx context.Context, tenant string) (map[string]uint32, error) {
	queue, err := c.list(ctx, reinv1.RunStatus_RUN_STATUS_QUEUED, tenant)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(queue, func(a, b runstate.State) int { return before(waitingOf(a), waitingOf(b)) })
	out := make(map[string]uint32, len(queue))
	for i, st := range queue {
		out[st.RunID] = uint32(i + 1)
	}
	return out, nil
}
