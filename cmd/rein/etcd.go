package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/reinhq/rein/internal/metrics"
	"github.com/reinhq/rein/internal/store"
	etcdstore "github.com/reinhq/rein/internal/store/etcd"
)

// etcdFlags name an etcd cluster and the prefix a rein store lives under:
// rein serve --etcd and rein bench --store etcd read them. The TLS flags are
// the client's (--tls-ca, --tls-cert, --tls-key) with an etcd- prefix.
type etcdFlags struct {
	endpoints string
	prefix    string
	tlsCA     string
	tlsCert   string
	tlsKey    string
	timeout   time.Duration
	// compactEvery is rein serve's --etcd-compact-every (registerUpkeep).
	compactEvery time.Duration
}

func (f *etcdFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.endpoints, "etcd", "", "keep the runs in the etcd cluster at these comma-separated endpoints (host:port) instead of the --db file")
	fs.StringVar(&f.prefix, "etcd-prefix", "/rein/", "with --etcd, the key prefix rein's runs live under (it must end in /); servers sharing a prefix share their runs")
	fs.StringVar(&f.tlsCA, "etcd-tls-ca", "", "with --etcd, the CA that signs the etcd members' certificates (PEM); turns TLS to etcd on")
	fs.StringVar(&f.tlsCert, "etcd-tls-cert", "", "with --etcd, the client certificate rein shows etcd (PEM)")
	fs.StringVar(&f.tlsKey, "etcd-tls-key", "", "with --etcd, the key of --etcd-tls-cert (PEM)")
	fs.DurationVar(&f.timeout, "etcd-timeout", etcdstore.DefaultTimeout, "with --etcd, how long one request to etcd may take before it fails as unavailable")
}

// registerUpkeep registers the flags of what a server does for the cluster
// its runs are in (rein serve's; rein bench's runs are its own).
func (f *etcdFlags) registerUpkeep(fs *pflag.FlagSet) {
	fs.DurationVar(&f.compactEvery, "etcd-compact-every", etcdstore.DefaultCompactEvery, "with --etcd, compact etcd's history this often, keeping this much of it, so that old revisions do not fill etcd's --quota-backend-bytes; it compacts the whole cluster, as etcd's --auto-compaction-retention would, and every server may do it (0: never, when etcd compacts its history itself)")
}

// set reports whether --etcd was given.
func (f *etcdFlags) set() bool { return f.endpoints != "" }

// check refuses etcd flags without --etcd, and TLS flags that do not fit.
func (f *etcdFlags) check(fs *pflag.FlagSet) error {
	if !f.set() {
		for _, name := range []string{"etcd-prefix", "etcd-tls-ca", "etcd-tls-cert", "etcd-tls-key", "etcd-timeout", "etcd-compact-every"} {
			if fs.Changed(name) {
				return usageError("--%s needs --etcd ENDPOINTS", name)
			}
		}
		return nil
	}
	if (f.tlsCert == "") != (f.tlsKey == "") {
		return usageError("--etcd-tls-cert and --etcd-tls-key go together: give both or neither")
	}
	if !strings.HasSuffix(f.prefix, "/") {
		return usageError("--etcd-prefix %q must end in /, for example /rein/", f.prefix)
	}
	if f.timeout <= 0 {
		return usageError("--etcd-timeout must be positive")
	}
	if f.compactEvery < 0 {
		return usageError("--etcd-compact-every must be 0 (never) or more")
	}
	return nil
}

// list is the endpoints, trimmed, without empty ones.
func (f *etcdFlags) list() []string {
	var out []string
	for _, ep := range strings.Split(f.endpoints, ",") {
		if ep = strings.TrimSpace(ep); ep != "" {
			out = append(out, ep)
		}
	}
	return out
}

// client connects to the cluster. etcd's client dials lazily; the first
// request (the store's open) tells whether the cluster answers.
func (f *etcdFlags) client() (*clientv3.Client, error) {
	cfg := clientv3.Config{
		Endpoints:   f.list(),
		DialTimeout: f.timeout,
		// The client's own logs would be a second, differently formatted
		// stream on stderr; rein reports what fails through its errors.
		Logger: zap.NewNop(),
		// A member that stops answering is noticed and left for another.
		DialKeepAliveTime:    2 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
	}
	if len(cfg.Endpoints) == 0 {
		return nil, usageError("--etcd %q names no endpoint: give host:port[,host:port…]", f.endpoints)
	}
	if f.tlsCA != "" || f.tlsCert != "" {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if f.tlsCA != "" {
			pem, err := os.ReadFile(f.tlsCA)
			if err != nil {
				return nil, usageError("--etcd-tls-ca: %v", err)
			}
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				return nil, usageError("--etcd-tls-ca %s holds no PEM certificate", f.tlsCA)
			}
		}
		if f.tlsCert != "" {
			cert, err := tls.LoadX509KeyPair(f.tlsCert, f.tlsKey)
			if err != nil {
				return nil, usageError("--etcd-tls-cert/--etcd-tls-key: %v", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		cfg.TLS = tc
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, &exitErr{code: exitUnavailable, err: fmt.Errorf("connect to etcd at %s: %w", f.endpoints, err)}
	}
	return cli, nil
}

// open connects and opens the store under the prefix. The caller closes
// the store, then the client.
func (f *etcdFlags) open(ctx context.Context, opts etcdstore.Options) (*clientv3.Client, *etcdstore.Store, error) {
	cli, err := f.client()
	if err != nil {
		return nil, nil, err
	}
	opts.Timeout = f.timeout
	st, err := etcdstore.Open(ctx, cli, f.prefix, opts)
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
