// Package admission decides when queued runs start (docs/design.md §17).
// Where a limit is set (a tenant's max_running in rein serve --tenants, or
// the server's --max-running), a new root run is created queued, and the
// Controller starts queued runs while slots are free: within a tenant by
// the contract's priority, then by arrival; across tenants by weighted fair
// share. The queue is the runs themselves, durable in the store: a restart
// or another replica finds it where it was.
package admission

import (
	"cmp"
	"context"
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
	mu   sync.Mutex // one pass at a time in this process
	kick chan struct{}
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

// listPage is the page size a pass lists runs with.
const listPage = 1000

// Pass starts as many queued runs as the limits allow now, in their
// order, and ends those whose deadline passed in the queue. It returns how
// many it started.
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
	queued, err := c.list(ctx, reinv1.RunStatus_RUN_STATUS_QUEUED, "")
	if err != nil || len(queued) == 0 {
		return 0, err
	}
	running, err := c.list(ctx, reinv1.RunStatus_RUN_STATUS_RUNNING, "")
	if err != nil {
		return 0, err
	}
	s := newShares(c.cfg.Tenant, running)
	now := c.cfg.Clock()
	for _, st := range queued {
		if !st.Deadline.IsZero() && !now.Before(st.Deadline) {
			if _, err := c.cfg.Starter.ExpireQueued(ctx, st.RunID); err != nil && !c.gone(err) {
				return 0, err
			}
			continue
		}
		s.queue(st)
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
		st := t.queued[0]
		t.queued = t.queued[1:]
		if _, err := c.cfg.Starter.Admit(ctx, st.RunID, c.cfg.Owner); err != nil {
			if c.gone(err) {
				continue
			}
			return started, err
		}
		t.running++
		s.total++
		started++
	}
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
	slices.SortFunc(queue, order)
	out := make(map[string]uint32, len(queue))
	for i, st := range queue {
		out[st.RunID] = uint32(i + 1)
	}
	return out, nil
}

// order is the order of queued runs in their tenant's queue: higher
// priority first, then earlier submitted.
func order(a, b runstate.State) int {
	if c := cmp.Compare(b.Contract.GetPriority(), a.Contract.GetPriority()); c != 0 {
		return c
	}
	if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
		return c
	}
	return cmp.Compare(a.RunID, b.RunID)
}

// tenantShare is one tenant's running count and queue in a pass.
type tenantShare struct {
	name       string
	max        int
	weight     float64
	running    int
	queued     []runstate.State
	sortedOnce bool
}

// shares are the tenants of a pass.
type shares struct {
	by     map[string]*tenantShare
	limits func(string) (int, float64)
	total  int
}

func newShares(limits func(string) (int, float64), running []runstate.State) *shares {
	s := &shares{by: map[string]*tenantShare{}, limits: limits, total: len(running)}
	for _, st := range running {
		s.of(st.Tenant).running++
	}
	return s
}

func (s *shares) of(tenant string) *tenantShare {
	t := s.by[tenant]
	if t == nil {
		max, w := s.limits(tenant)
		if !(w > 0) {
			w = 1
		}
		t = &tenantShare{name: tenant, max: max, weight: w}
		s.by[tenant] = t
	}
	return t
}

func (s *shares) queue(st runstate.State) {
	t := s.of(st.Tenant)
	t.queued = append(t.queued, st)
	t.sortedOnce = false
}

// next is the tenant whose queued run starts next: of the tenants with a
// queued run and a free slot of their own, the one with the fewest running
// runs for its weight (running/weight), so that each gets slots in
// proportion to its weight; of equals, the one whose next run was
// submitted first. Nil when none may start one.
func (s *shares) next() *tenantShare {
	var best *tenantShare
	for _, t := range s.by {
		if len(t.queued) == 0 || t.max > 0 && t.running >= t.max {
			continue
		}
		if !t.sortedOnce {
			slices.SortFunc(t.queued, order)
			t.sortedOnce = true
		}
		if best == nil || fairer(t, best) {
			best = t
		}
	}
	return best
}

// fairer reports whether t should get the next slot before u.
func fairer(t, u *tenantShare) bool {
	a, b := float64(t.running)/t.weight, float64(u.running)/u.weight
	if a != b {
		return a < b
	}
	return order(t.queued[0], u.queued[0]) < 0
}
