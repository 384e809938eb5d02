package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/reinhq/rein/internal/etcdflags"
	"github.com/reinhq/rein/internal/metrics"
	"github.com/reinhq/rein/internal/store"
	etcdstore "github.com/reinhq/rein/internal/store/etcd"
)

// etcdFlags are rein serve's etcd flags: the cluster's (etcdflags.Flags)
// and what the server does for it (registerUpkeep).
type etcdFlags struct {
	etcdflags.Flags
	// compactEvery is rein serve's --etcd-compact-every (registerUpkeep).
	compactEvery time.Duration
}

func (f *etcdFlags) register(fs *pflag.FlagSet) { f.Flags.Register(fs) }

// registerUpkeep registers the flags of what a server does for the cluster
// its runs are in.
func (f *etcdFlags) registerUpkeep(fs *pflag.FlagSet) {
	fs.DurationVar(&f.compactEvery, "etcd-compact-every", etcdstore.DefaultCompactEvery, "with --etcd, compact etcd's history this often, keeping this much of it, so that old revisions do not fill etcd's --quota-backend-bytes; it compacts the whole cluster, as etcd's --auto-compaction-retention would, and every server may do it (0: never, when etcd compacts its history itself)")
}

// set reports whether --etcd was given.
func (f *etcdFlags) set() bool { return f.Set() }

// check refuses etcd flags without --etcd, and TLS flags that do not fit.
func (f *etcdFlags) check(fs *pflag.FlagSet) error {
	if err := f.Check(fs, "etcd-compact-every"); err != nil {
		return etcdFlagsError(err)
	}
	if f.compactEvery < 0 {
		return usageError("--etcd-compact-every must be 0 (never) or more")
	}
	return nil
}

// client connects to the cluster (etcdflags.Flags.Client), with dial
// added to the client's dial options.
func (f *etcdFlags) client(dial ...grpc.DialOption) (*clientv3.Client, error) {
	cli, err := f.Client(dial...)
	if err != nil {
		return nil, etcdFlagsError(err)
	}
	return cli, nil
}

// etcdFlagsError is err with its exit code: a usage error for a flag that
// is wrong, else unavailable.
func etcdFlagsError(err error) error {
	var ue *etcdflags.UsageError
	if errors.As(err, &ue) {
		return &exitErr{code: exitUsage, err: err}
	}
	return &exitErr{code: exitUnavailable, err: err}
}

// open connects, with dial added to the client's dial options (rein
// serve's count the bytes received, metrics.Metrics.EtcdDialOptions), and
// opens the store under the prefix. The caller closes the store, then the
// client.
func (f *etcdFlags) open(ctx context.Context, opts etcdstore.Options, dial ...grpc.DialOption) (*clientv3.Client, *etcdstore.Store, error) {
	cli, err := f.client(dial...)
	if err != nil {
		return nil, nil, err
	}
	opts.Timeout = f.Timeout
	st, err := etcdstore.Open(ctx, cli, f.Prefix, opts)
	if err != nil {
		_ = cli.Close()
		return nil, nil, &exitErr{code: exitUnavailable, err: err}
	}
	return cli, st, nil
}

// upkeep is what a server does for the etcd cluster its runs are in,
// beside storing them. At start it refuses a cluster whose NOSPACE alarm
// is raised, saying what frees it (etcd would grant the server no lease),
// and warns of one whose history was never compacted when the server will
// not compact it either. Then it compacts the history every
// --etcd-compact-every (etcdstore.Store.CompactHistory), and reports the
// alarm on /metrics (rein_store_no_space). stop ends the compaction and
// waits for it.
func (f *etcdFlags) upkeep(ctx context.Context, st *etcdstore.Store, m *metrics.Metrics, log *slog.Logger) (stop func(), err error) {
	if err := st.SpaceAlarm(ctx); errors.Is(err, store.ErrNoSpace) {
		return nil, &exitErr{code: exitUnavailable, err: fmt.Errorf("etcd takes no writes, so this server cannot start: %w", err)}
	}
	m.TrackStoreSpace(st.SpaceAlarm)
	if f.compactEvery <= 0 {
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
		st.CompactHistory(cctx, f.compactEvery, func(rev int64, err error) {
			if err != nil {
				log.Warn("compact etcd's history; trying again later", "revision", rev, "error", err)
				return
			}
			log.Debug("compacted etcd's history", "revision", rev)
		})
	}()
	log.Info("compacting etcd's history", "every", f.compactEvery)
	return func() {
		cancel()
		<-done
	}, nil
}
