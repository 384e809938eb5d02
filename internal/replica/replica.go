// Package replica makes a rein server one of several sharing one etcd
// store: it holds the server's etcd lease, under which the store keeps the
// owner keys of the runs the server drives (internal/store/etcd's
// owner.go), and takes over the runs of servers whose leases end.
//
// The lease has a TTL and is kept alive while the server runs. When its
// keepalives stop being answered for two thirds of the TTL (etcd is
// unreachable from here, or the process was paused), the server counts
// the lease lost before etcd ends it: it stops driving every run at once
// (harness.Engine.Abandon), without writing, and whatever a driver still
// tries to append is refused by the store (store.ErrFenced). It is then
// granted a new lease and takes runs again like any other replica.
//
// Every replica watches the owner keys: when one is deleted (its server's
// lease ended) the run is taken over, with the same code a server resumes
// its runs with at start (harness.Engine.Takeover, ResumeAll): a running
// run's driver takes its lease (the store lets one replica win), a model
// call that was in flight is sent again marked resumed, and a dispatched
// write is settled by its tool's lookup, never sent blindly again. Each
// replica also looks over every run once per TTL, so a run no lease was
// ever taken on (its server died right after creating it) is carried on
// too.
package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	etcdstore "github.com/reinhq/rein/internal/store/etcd"
)

// Engine is what a replica needs of the server's engine.
type Engine interface {
	// ResumeAll carries on every run that has not ended.
	ResumeAll(ctx context.Context) error
	// Takeover carries on one run whose owner's lease ended.
	Takeover(ctx context.Context, runID string) error
	// Abandon stops driving every run, writing nothing.
	Abandon(ctx context.Context)
}

// Config configures a Replica.
type Config struct {
	// Client talks to the etcd cluster the Store is on.
	Client *clientv3.Client
	Store  *etcdstore.Store
	// TTL is the lease's time to live: how long after this server stops
	// answering its runs are taken over. etcd counts it in whole seconds.
	TTL time.Duration
	// Logger receives the lease's losses and the takeovers.
	Logger *slog.Logger
	// LostLease, when set, is called each time the lease is lost.
	LostLease func()
	// LookedOver, when set, is called after each look over every run (at
	// the start, after a new lease, and once per TTL).
	LookedOver func()
}

// Replica holds a server's etcd lease. Join starts it; Serve attaches the
// engine; Leave ends it.
type Replica struct {
	cfg Config

	// held says the lease is held (readiness).
	held atomic.Bool
	// engine is set by Serve.
	mu     sync.Mutex
	engine Engine

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// taking ends the takeover loops (StopTaking).
	taking     context.Context
	stopTaking context.CancelFunc
	takers     sync.WaitGroup
	// lookNow asks the takeover loop to look over every run now: after a
	// new lease, a watch that may have missed owner keys, or more orphans
	// at once than it queues.
	lookNow chan struct{}
}

// Join is granted a lease, ties the store's runs to it and keeps it alive.
// It fails when etcd does not grant one within the store's timeout.
func Join(ctx context.Context, cfg Config) (*Replica, error) {
	if cfg.TTL < time.Second {
		return nil, fmt.Errorf("replica: lease TTL %v is under etcd's least, 1s", cfg.TTL)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Replica{cfg: cfg, lookNow: make(chan struct{}, 1)}
	id, err := r.grant(ctx)
	if err != nil {
		return nil, err
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.taking, r.stopTaking = context.WithCancel(r.ctx)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.hold(id)
	}()
	return r, nil
}

// grant asks etcd for a lease and ties the store to it.
func (r *Replica) grant(ctx context.Context) (clientv3.LeaseID, error) {
	gctx, cancel := context.WithTimeout(ctx, r.cfg.TTL)
	defer cancel()
	g, err := r.cfg.Client.Grant(gctx, int64((r.cfg.TTL+time.Second-1)/time.Second))
	if err != nil {
		return 0, fmt.Errorf("be granted an etcd lease (TTL %v) at %v: %w; check that etcd is running and has a leader", r.cfg.TTL, r.cfg.Client.Endpoints(), err)
	}
	r.cfg.Store.SetLease(g.ID)
	r.held.Store(true)
	return g.ID, nil
}

// Holding reports whether the server holds its lease now.
func (r *Replica) Holding() bool { return r.held.Load() }

// hold keeps lease id alive; when it is lost, it abandons the runs,
// revokes it (if etcd still has it, the runs are taken over at once) and
// is granted a new one, until Leave.
func (r *Replica) hold(id clientv3.LeaseID) {
	for r.ctx.Err() == nil {
		r.keepAlive(id)
		if r.ctx.Err() != nil {
			return
		}
		r.held.Store(false)
		r.cfg.Logger.Warn("this server lost its etcd lease: it stops driving its runs, which other servers take over, and asks for a new lease",
			"lease", fmt.Sprintf("%x", int64(id)), "ttl", r.cfg.TTL)
		if r.cfg.LostLease != nil {
			r.cfg.LostLease()
		}
		if e := r.attached(); e != nil {
			actx, cancel := context.WithTimeout(r.ctx, r.cfg.TTL)
			e.Abandon(actx)
			cancel()
		}
		rctx, cancel := context.WithTimeout(r.ctx, time.Second)
		_, _ = r.cfg.Client.Revoke(rctx, id)
		cancel()
	regrant:
		for r.ctx.Err() == nil {
			next, err := r.grant(r.ctx)
			if err == nil {
				id = next
				r.cfg.Logger.Info("this server holds a new etcd lease", "lease", fmt.Sprintf("%x", int64(id)))
				select {
				case r.lookNow <- struct{}{}: // the takeover loop looks over every run
				default:
				}
				break regrant
			}
			r.cfg.Logger.Warn("no etcd lease yet; asking again", "error", err)
			pause(r.ctx, r.cfg.TTL/4)
		}
	}
}

// keepAlive returns when lease id is lost or Leave is called: its
// keepalive stream ended (etcd ended the lease), or no keepalive was
// answered for two thirds of the TTL, before etcd ends it.
func (r *Replica) keepAlive(id clientv3.LeaseID) {
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	ch, err := r.cfg.Client.KeepAlive(ctx, id)
	if err != nil {
		return
	}
	last := time.Now()
	margin := r.cfg.TTL * 2 / 3
	tick := time.NewTicker(max(r.cfg.TTL/20, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case resp, ok := <-ch:
			if !ok || resp == nil || resp.TTL <= 0 {
				return
			}
			last = time.Now()
		case now := <-tick.C:
			if now.Sub(last) > margin {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

func (r *Replica) attached() Engine {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.engine
}

// Serve attaches the server's engine: from now on the replica takes over
// the runs of servers whose leases end, and looks over every run once per
// TTL.
func (r *Replica) Serve(e Engine) {
	r.mu.Lock()
	r.engine = e
	r.mu.Unlock()
	orphans := make(chan string, 1024)
	r.takers.Add(2)
	go func() {
		defer r.takers.Done()
		r.cfg.Store.WatchOrphans(r.taking, func(runID string) {
			select {
			case orphans <- runID:
			default:
				// Too many at once: the next look over every run finds it.
				select {
				case r.lookNow <- struct{}{}:
				default:
				}
			}
		}, func() {
			select {
			case r.lookNow <- struct{}{}:
			default:
			}
		})
	}()
	go func() {
		defer r.takers.Done()
		every := time.NewTicker(r.cfg.TTL)
		defer every.Stop()
		for {
			select {
			case <-r.taking.Done():
				return
			case runID := <-orphans:
				if !r.Holding() {
					continue
				}
				if err := e.Takeover(r.taking, runID); err != nil && !errors.Is(err, context.Canceled) {
					r.cfg.Logger.Warn("take over a run whose server's lease ended", "run_id", runID, "error", err)
				}
			case <-r.lookNow:
				r.lookOver(e)
			case <-every.C:
				r.lookOver(e)
			}
		}
	}()
}

// lookOver carries on every run no live server drives.
func (r *Replica) lookOver(e Engine) {
	if !r.Holding() {
		return
	}
	if err := e.ResumeAll(r.taking); err != nil && !errors.Is(err, context.Canceled) {
		r.cfg.Logger.Warn("look over the runs to take", "error", err)
	}
	if r.cfg.LookedOver != nil {
		r.cfg.LookedOver()
	}
}

// StopTaking stops taking over runs, as a server that is shutting down
// does first; it still holds its lease while its runs finish their steps.
func (r *Replica) StopTaking() {
	r.stopTaking()
	r.takers.Wait()
}

// Leave stops taking runs and ends the lease, so that the other servers
// take this one's runs at once. Call it after the engine stopped.
func (r *Replica) Leave(ctx context.Context) {
	r.StopTaking()
	r.cancel()
	r.wg.Wait()
	if id := r.cfg.Store.Lease(); id != 0 {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		_, _ = r.cfg.Client.Revoke(rctx, id)
		cancel()
	}
	r.held.Store(false)
}

func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
