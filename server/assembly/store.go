package assembly

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/reinhq/rein/internal/metrics"
	"github.com/reinhq/rein/internal/replica"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/store/bolt"
	etcdstore "github.com/reinhq/rein/internal/store/etcd"
	"github.com/reinhq/rein/internal/storeformat"
	"github.com/reinhq/rein/internal/version"
	"github.com/reinhq/rein/server"
)

// openBolt opens the bbolt file at cfg.DB into cfg.Node: the store, with
// the webhook deliveries of each append made in its transaction (every
// server on the file sets the outbox, embedded ones included, so that what
// a subscription must send is stored whichever process commits the event),
// and the file's format, with driving counting the runs the node drives.
func (r *Running) openBolt(cfg *Config, outbox store.Outbox, driving func() int) error {
	var st *bolt.Store
	var err error
	if cfg.ReadOnly {
		st, err = bolt.Open(cfg.DB, bolt.Options{ReadOnly: true})
	} else {
		if err := os.MkdirAll(filepath.Dir(cfg.DB), 0o700); err != nil {
			return &Error{Kind: Failed, Err: fmt.Errorf("create the directory for --db %s: %w", cfg.DB, err)}
		}
		st, err = bolt.Open(cfg.DB, bolt.Options{Outbox: outbox})
	}
	if err != nil {
		return unavailable(err) // KindOf: Refused for a format this build cannot serve
	}
	r.closeStoreLater(st)
	cfg.Node.Store, cfg.Node.Cluster = st, SingleCluster(st, cfg.Node.Logger, driving)
	r.StoreName = cfg.DB
	return nil
}

// SingleCluster is the store format of a server alone on its bbolt file
// (rein cluster status, rein version --server), with driving counting the
// runs it drives (nil: unknown); nil for any other store.
func SingleCluster(st store.Store, log *slog.Logger, driving func() int) server.Cluster {
	b, ok := st.(*bolt.Store)
	if !ok {
		return nil
	}
	f, err := b.StoreFormat()
	if err != nil {
		f = storeformat.Base // Open read it already; a read that fails now leaves the gate at the base
	}
	return storeformat.NewSingle(version.String(version.Get()), storeformat.NewGate(storeformat.This(), f, log), driving)
}

// closeStoreLater closes st when Start fails before the node took it over.
func (r *Running) closeStoreLater(st store.Store) {
	r.atStop(func() {
		if r.Node == nil {
			_ = st.Close()
		}
	})
}

// openEtcd connects to the etcd cluster, opens the store under its prefix,
// keeps it up (etcdUpkeep) and joins the replicas sharing it, into
// cfg.Node.
func (r *Running) openEtcd(ctx context.Context, cfg *Config, outbox store.Outbox) error {
	e, m, log := cfg.Etcd, cfg.Node.Metrics, cfg.logger()
	cli, err := e.Cluster.Client(m.EtcdDialOptions()...)
	if err != nil {
		return err // KindOf: Refused for a wrong flag, else Unavailable
	}
	r.atStop(func() { _ = cli.Close() })
	st, err := etcdstore.Open(ctx, cli, e.Cluster.Prefix, etcdstore.Options{Outbox: outbox, Timeout: e.Cluster.Timeout})
	if err != nil {
		return unavailable(err)
	}
	r.closeStoreLater(st)
	stopUpkeep, err := etcdUpkeep(ctx, st, e, m, log)
	if err != nil {
		return err
	}
	r.atStop(stopUpkeep)
	if e.Name == "" {
		host, _ := os.Hostname()
		e.Name = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	rep, err := replica.Join(ctx, replica.Config{Client: cli, Store: st, Name: e.Name, TTL: e.LeaseTTL, Logger: log,
		LostLease: m.LostLease, LookedOver: m.LookedOver, FinalizeAfter: e.FinalizeAfter})
	if err != nil {
		return err // KindOf: Refused for a name taken or a build too old
	}
	r.Replica = rep
	r.atStop(func() { rep.Leave(context.Background()) })
	n := &cfg.Node
	n.Store, n.Replica, n.Owner, n.MaxDriven = st, true, e.Name, e.MaxRuns
	n.Commits, n.Leased, n.Relay = st, rep.Holding, st
	n.Cluster = rep
	if n.Webhooks != nil {
		// One replica sends the webhooks at a time: the one that leads
		// under a lease of LeaseTTL (docs/webhooks.md, "Guarantees").
		name, ttl := e.Name, e.LeaseTTL
		n.Webhooks.Lead = func(ctx context.Context) (<-chan struct{}, func(), error) {
			return st.Lead(ctx, "webhook-sender", name, ttl)
		}
		n.Webhooks.Follow = st.FollowOutbox
		n.Webhooks.NeedFormat, n.Webhooks.NeedFormatOn = etcdstore.WebhooksFormat, "etcd"
	}
	r.StoreName = "etcd " + e.Cluster.Endpoints + " " + e.Cluster.Prefix
	r.Owner = e.Name
	r.lock = func(ctx context.Context) (func(), error) { return st.Lock(ctx, "admission") }
	r.shared = st
	return nil
}

// etcdUpkeep is what a server does for the etcd cluster its runs are in,
// beside storing them. At start it refuses a cluster whose NOSPACE alarm
// is raised, saying what frees it (etcd would grant the server no lease),
// and warns of one whose history was never compacted when the server will
// not compact it either. Then it compacts the history every CompactEvery
// (etcdstore.Store.CompactHistory), and reports the alarm on /metrics
// (rein_store_no_space). stop ends the compaction and waits for it.
func etcdUpkeep(ctx context.Context, st *etcdstore.Store, e *Etcd, m *metrics.Metrics, log *slog.Logger) (stop func(), err error) {
	if err := st.SpaceAlarm(ctx); errors.Is(err, store.ErrNoSpace) {
		return nil, unavailable(fmt.Errorf("etcd takes no writes, so this server cannot start: %w", err))
	}
	m.TrackStoreSpace(st.SpaceAlarm)
	if e.CompactEvery <= 0 {
		if compacted, rev, err := st.Compacted(ctx); err == nil && !compacted {
			log.Warn("etcd's history was never compacted, and with --etcd-compact-every 0 rein will not compact it: unless etcd runs with --auto-compaction-retention, it keeps every revision until its --quota-backend-bytes is full and it refuses every write",
				"revision", rev)
		}
		return func() {}, nil
	}
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		st.CompactHistory(cctx, e.CompactEvery, func(rev int64, err error) {
			if err != nil {
				log.Warn("compact etcd's history; trying again later", "revision", rev, "error", err)
				return
			}
			log.Debug("compacted etcd's history", "revision", rev)
		})
	}()
	log.Info("compacting etcd's history", "every", e.CompactEvery)
	return func() {
		cancel()
		<-done
	}, nil
}

// drivingOf counts the runs the node in opened drives, 0 before it opens.
func drivingOf(opened *atomic.Pointer[server.Node]) func() int {
	return func() int {
		if n := opened.Load(); n != nil {
			return n.Engine.Driving()
		}
		return 0
	}
}
