// Package replica makes a rein server one of several sharing one etcd
// store: it holds the server's etcd lease, under which the store keeps the
// owner keys of the runs the server drives (internal/store/etcd's
// owner.go), and takes over the runs of servers whose leases end.
//
// The lease has a TTL and is kept alive while the server runs. When its
// keepalives stop being answered for two thirds of the TTL (etcd is
// unreachable from here, or the process was paused), the server counts
// the lease lost before etcd ends it: it stops driving every run at once
// (engine.Engine.Abandon), without writing, and whatever a driver still
// tries to append is refused by the store (store.ErrFenced). It is then
// granted a new lease and takes runs again like any other replica.
//
// A replica learns of other replicas' runs only when one of them leaves:
// every replica watches the replicas' name keys, and when one is deleted
// (its server's lease ended) it takes over the runs that server held (the
// store's held index), with the same code a server resumes its runs with
// at start (engine.Engine.Takeover, ResumeAll): a running run's driver
// takes its lease (the store lets one replica win), a paused run is taken
// by one replica, which keeps its deadlines, a model call that was in
// flight is sent again marked resumed, and a dispatched write is settled
// by its tool's lookup, never sent blindly again. Twice per TTL a replica
// looks for runs no server took (the store's unowned index: their server
// died right after creating them, or it drives as many runs as its cap
// allows), so such a look costs what is orphaned, not what is live; it
// looks over every live run only at its start, after a new lease, and
// when its watch may have missed a replica's end.
//
// Orphans are spread by load: every replica sees the same ones, and each
// waits before each take in proportion to how loaded it is (spread), so
// the least loaded take them first and a replica that starts cold takes
// its share at once. A replica that leaves ends its lease at once, and
// the others take its runs without waiting for the TTL.
//
// A replica's name (the owner in its runs' owner keys, run_taken events,
// logs and metrics) is its own on the prefix: with each lease it is
// granted, it claims the name under that lease (etcdstore.Store.ClaimName)
// before it drives anything. The name's key ends with the lease, so the
// name of a replica that left is free at once. When another lease holds
// the name, Join waits to tell a dead holder from a live one: the lease of
// one that died ends within its TTL, and Join takes the name then (a
// server restarted after a crash, under its old name, starts once its old
// lease ended); the lease of one that runs is renewed, and Join fails with
// ErrNameTaken, naming that lease. A replica that lost its lease and finds
// its name taken meanwhile drives nothing until the name is free again.
package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	clientv3 "go.etcd.io/etcd/client/v3"

	etcdstore "github.com/reinhq/rein/internal/store/etcd"
	"github.com/reinhq/rein/internal/storeformat"
	"github.com/reinhq/rein/internal/version"
)

// Engine is what a replica needs of the server's engine.
type Engine interface {
	// ResumeAll carries on every run that has not ended.
	ResumeAll(ctx context.Context) error
	// Takeover carries on one run whose owner's lease ended.
	Takeover(ctx context.Context, runID string) error
	// Occupancy is how many runs the engine drives now, and its cap (0:
	// none).
	Occupancy() (driving, limit int)
	// Tending reports whether the engine drives the run now, or keeps its
	// deadlines.
	Tending(runID string) bool
	// Abandon stops driving every run, writing nothing.
	Abandon(ctx context.Context)
}

// Config configures a Replica.
type Config struct {
	// Client talks to the etcd cluster the Store is on.
	Client *clientv3.Client
	Store  *etcdstore.Store
	// Name is this replica's name on the store's prefix, the owner of the
	// runs it takes; no two live replicas on a prefix share one.
	Name string
	// TTL is the lease's time to live: how long after this server stops
	// answering its runs are taken over. etcd counts it in whole seconds.
	TTL time.Duration
	// Logger receives the lease's losses and the takeovers.
	Logger *slog.Logger
	// LostLease, when set, is called each time the lease is lost.
	LostLease func()
	// LookedOver, when set, is told of each look for runs to carry on:
	// what it looked at (one of the Look kinds) and how long it took.
	LookedOver func(kind string, took time.Duration)
	// Formats are the store formats this build reads and writes, which
	// the replica advertises in its name key (format.go); zero means
	// storeformat.This(). Tests give another to play an older or newer
	// build.
	Formats storeformat.Build
	// Build is the version line it advertises; "" means this binary's.
	Build string
	// FinalizeAfter is how long every live replica must write a newer
	// format before this replica finalizes it; 0 finalizes only on
	// request (Finalize).
	FinalizeAfter time.Duration
}

// Replica holds a server's etcd lease. Join starts it; Serve attaches the
// engine; Leave ends it.
type Replica struct {
	cfg Config
	// card says where the replica runs; its name key holds it in its
	// advertisement (format.go).
	card string
	// gate holds the store's active format (format.go).
	gate *storeformat.Gate
	// pending is the finalization the format loop waits to make, if any.
	pmu     sync.Mutex
	pending pendingFormat
	// warned are the complaints logged about replicas' name keys, by name.
	warned map[string]string

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

// ErrNameTaken is the error of a Join whose name a live replica on the
// prefix holds.
var ErrNameTaken = errors.New("replica name taken")

// maxNameBytes bounds a replica's name, which every owner key of its runs
// and every log line of its server carries.
const maxNameBytes = 128

// CheckName refuses a replica name that two operators could read as one
// while etcd holds two ("r1 " and "r1"), or that does not fit in a key
// and a log line: empty, longer than 128 bytes, or holding a space, a
// control character, a "/" or bytes that are not UTF-8.
func CheckName(name string) error {
	switch {
	case name == "":
		return errors.New("the name is empty: each replica on a prefix needs a name of its own")
	case len(name) > maxNameBytes:
		return fmt.Errorf("the name is %d bytes long, over %d: choose a shorter one", len(name), maxNameBytes)
	case !utf8.ValidString(name):
		return fmt.Errorf("the name %q is not valid UTF-8", name)
	}
	for _, r := range name {
		if unicode.IsSpace(r) || unicode.IsControl(r) || r == '/' {
			return fmt.Errorf("the name %q holds %q: a name is letters, digits and punctuation other than \"/\", with no space (r1, eu-west-1a.rein-2)", name, r)
		}
	}
	return nil
}

// Join is granted a lease, claims the replica's name under it, ties the
// store's runs to it and keeps it alive. It fails when etcd does not grant
// one within the store's timeout, and with ErrNameTaken when another live
// replica holds the name; while a replica that died holds it, Join waits
// for its lease to end (waitFree).
func Join(ctx context.Context, cfg Config) (*Replica, error) {
	if cfg.TTL < time.Second {
		return nil, fmt.Errorf("replica: lease TTL %v is under etcd's least, 1s", cfg.TTL)
	}
	if err := CheckName(cfg.Name); err != nil {
		return nil, fmt.Errorf("replica: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Formats == (storeformat.Build{}) {
		cfg.Formats = storeformat.This()
	}
	if err := cfg.Formats.Check(); err != nil {
		return nil, fmt.Errorf("replica: the build's store formats: %w", err)
	}
	if cfg.Build == "" {
		cfg.Build = version.String(version.Get())
	}
	host, _ := os.Hostname()
	card := fmt.Sprintf("host %s, pid %d, joined %s", host, os.Getpid(), time.Now().UTC().Format(time.RFC3339))
	r := &Replica{cfg: cfg, card: card, lookNow: make(chan struct{}, 1)}
	r.gate = storeformat.NewGate(cfg.Formats, storeformat.Base, cfg.Logger)
	// Checked before anything is written (a build too old is refused
	// without claiming its name), and again once the name is claimed.
	if err := r.checkFormat(ctx); err != nil {
		return nil, fmt.Errorf("replica: %w", err)
	}
	id, err := r.grant(ctx)
	if err != nil {
		return nil, err
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.taking, r.stopTaking = context.WithCancel(r.ctx)
	r.wg.Add(2)
	go func() {
		defer r.wg.Done()
		r.hold(id)
	}()
	go func() {
		defer r.wg.Done()
		r.followFormat()
	}()
	return r, nil
}

// grant asks etcd for a lease, claims the name under it and ties the store
// to it. While another server's lease holds the name, it revokes its own
// and waits (waitFree): for that lease to end, and it asks again, or to be
// renewed, and it fails with ErrNameTaken.
func (r *Replica) grant(ctx context.Context) (clientv3.LeaseID, error) {
	for range 5 {
		id, holder, err := r.grantClaimed(ctx)
		if err != nil || holder == nil {
			return id, err
		}
		if err := r.waitFree(ctx, *holder); err != nil {
			return 0, err
		}
	}
	return 0, fmt.Errorf("%w: the name %q was held, then freed, five times while this server claimed it; start it again", ErrNameTaken, r.cfg.Name)
}

// grantClaimed is granted a lease and claims the name under it. When
// another lease holds the name, it revokes its own and returns the holder.
func (r *Replica) grantClaimed(ctx context.Context) (clientv3.LeaseID, *etcdstore.NameHolder, error) {
	gctx, cancel := context.WithTimeout(ctx, r.cfg.TTL)
	defer cancel()
	g, err := r.cfg.Client.Grant(gctx, int64((r.cfg.TTL+time.Second-1)/time.Second))
	if err != nil {
		return 0, nil, fmt.Errorf("be granted an etcd lease (TTL %v) at %v: %w; check that etcd is running and has a leader", r.cfg.TTL, r.cfg.Client.Endpoints(), err)
	}
	h, ok, err := r.cfg.Store.ClaimName(gctx, r.cfg.Name, r.advert(), g.ID)
	if err == nil && ok {
		// Checked once the name is claimed: a finalization from now on
		// counts this replica (etcdstore.Store.FinalizeFormat), and one
		// before it is seen here.
		if err := r.checkFormat(gctx); err != nil {
			r.revoke(ctx, g.ID)
			return 0, nil, err
		}
	}
	if err != nil || !ok {
		r.revoke(ctx, g.ID)
		if err != nil {
			return 0, nil, err
		}
		if prev := r.cfg.Store.Lease(); prev != 0 && h.Lease == prev {
			// This replica's lease before, lost and not yet ended.
			r.revoke(ctx, prev)
		}
		return 0, &h, nil
	}
	r.cfg.Store.SetLease(g.ID)
	r.held.Store(true)
	return g.ID, nil, nil
}

// waitFree waits until the server holding the name shows itself gone or
// alive. It returns nil once the name's key is deleted (its lease ended:
// the server left, or died and its TTL ran out), and ErrNameTaken once the
// lease is renewed: its remaining TTL grows, or it outlives what it had
// left when first read (etcd counts it in whole seconds) by a second.
func (r *Replica) waitFree(ctx context.Context, h etcdstore.NameHolder) error {
	if h.Lease == 0 {
		return fmt.Errorf("%w: the key %s holds the name %q (%s) under no etcd lease, so it never ends: if no server runs as %q, delete the key (etcdctl del %s); else give this server another name (rein serve --name)",
			ErrNameTaken, h.Key, r.cfg.Name, h.Value, r.cfg.Name, h.Key)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	deleted := r.cfg.Client.Watch(wctx, h.Key, clientv3.WithRev(h.Revision+1), clientv3.WithFilterPut())
	left, err := r.leaseLeft(ctx, h.Lease)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(time.Duration(left+2) * time.Second)
	r.cfg.Logger.Info("another server holds this server's name: waiting for its etcd lease to end (it died) or be renewed (it runs)",
		"name", r.cfg.Name, "lease", fmt.Sprintf("%x", int64(h.Lease)), "holder", h.Value, "lease_left", fmt.Sprintf("%ds", left))
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for the server holding the name %q to end its lease: %w", r.cfg.Name, ctx.Err())
		case resp, ok := <-deleted:
			if !ok || resp.Err() != nil || len(resp.Events) > 0 {
				return nil // deleted, or the watch ended: claim again
			}
		case <-tick.C:
			now, err := r.leaseLeft(ctx, h.Lease)
			if err != nil {
				return err
			}
			if now > left || (now > 0 && time.Now().After(deadline)) {
				return fmt.Errorf("%w: another server already runs as %q on this etcd prefix: its etcd lease %x (%s; key %s) was renewed while this server waited for it to end; "+
					"give this server another name (rein serve --name), or stop the other server first",
					ErrNameTaken, r.cfg.Name, int64(h.Lease), h.Value, h.Key)
			}
			left = now
		}
	}
}

// leaseLeft is the remaining TTL of lease id in whole seconds, 0 or less
// once it ended.
func (r *Replica) leaseLeft(ctx context.Context, id clientv3.LeaseID) (int64, error) {
	rctx, cancel := context.WithTimeout(ctx, r.cfg.TTL)
	defer cancel()
	resp, err := r.cfg.Client.TimeToLive(rctx, id)
	if err != nil {
		return 0, fmt.Errorf("read etcd lease %x, which holds the name %q, at %v: %w; check that etcd is running and has a leader", int64(id), r.cfg.Name, r.cfg.Client.Endpoints(), err)
	}
	return resp.TTL, nil
}

// revoke ends lease id, bounded by a second; an error is left to the
// lease's TTL.
func (r *Replica) revoke(ctx context.Context, id clientv3.LeaseID) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_, _ = r.cfg.Client.Revoke(rctx, id)
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
			if errors.Is(err, ErrNameTaken) {
				r.cfg.Logger.Error("while this server had no etcd lease, another server took its name: this one drives no runs until that one stops", "name", r.cfg.Name, "error", err)
			} else if errors.Is(err, storeformat.ErrIncompatible) {
				r.cfg.Logger.Error("while this server had no etcd lease, the store was finalized to a format this build cannot serve: it drives no runs; replace it with a newer build", "error", err)
			} else {
				r.cfg.Logger.Warn("no etcd lease yet; asking again", "error", err)
			}
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

// StopTaking stops taking over runs, as a server that is shutting down
// does first; it still holds its lease while its runs finish their steps.
func (r *Replica) StopTaking() {
	r.stopTaking()
	r.takers.Wait()
}

// Leave stops taking runs and ends the lease, so that the other servers
// take this one's runs at once (its name key goes with the lease, and
// they take what it held: WatchLeft, Held), and logs how many it hands
// over. Call it after the engine stopped.
func (r *Replica) Leave(ctx context.Context) {
	r.StopTaking()
	r.cancel()
	r.wg.Wait()
	if id := r.cfg.Store.Lease(); id != 0 {
		held, err := r.cfg.Store.HeldCount(ctx, r.cfg.Name)
		if err != nil {
			held = -1
		}
		r.cfg.Logger.Info("this server leaves: it ends its etcd lease, so the other servers take its runs at once",
			"name", r.cfg.Name, "runs_handed_over", held)
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
