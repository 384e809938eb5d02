package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/reinhq/rein/internal/auth"
	"github.com/reinhq/rein/internal/metrics"
	"github.com/reinhq/rein/internal/ratelimit"
	"github.com/reinhq/rein/internal/replica"
	"github.com/reinhq/rein/internal/step"
	etcdstore "github.com/reinhq/rein/internal/store/etcd"
	"github.com/reinhq/rein/internal/storeformat"
	"github.com/reinhq/rein/internal/telemetry"
	"github.com/reinhq/rein/internal/tenants"
	"github.com/reinhq/rein/internal/version"
	"github.com/reinhq/rein/server"
)

type serveOptions struct {
	listen          string
	tlsCert, tlsKey string
	clientCA        string
	tokens          string
	host            hostFlags
	ledger          string
	reflection      bool
	rate            float64
	burst           int
	maxMsgBytes     int
	maxStreams      uint32
	shutdownTimeout time.Duration
	adminListen     string
	adminHosts      []string
	http            httpFlags
	tenants         tenantsFlags
	tasks           tasksFlags
	policy          policyFlags
	maxRunning      int
	modelLimits     []string
	pprof           bool
	logFormat       string
	logLevel        string
	otel            bool
	etcd            etcdFlags
	leaseTTL        time.Duration
	finalizeAfter   time.Duration
	maxRuns         int
	needTwo         bool
	onToolChange    string
	stream          bool
	name            string
	webhooks        webhookFlags
	lifecycle       lifecycleFlags
	flags           *pflag.FlagSet
}

func newServeCmd(e *env) *cobra.Command {
	o := &serveOptions{}
	cmd := &cobra.Command{
		Use: "serve",
		Example: `  rein serve --listen 127.0.0.1:7233 --db /var/lib/rein/rein.db --tokens tokens.json
  rein serve --tools fixture:examples/refund/tools.json --admin-listen 127.0.0.1:9090 --log-format json
  rein serve --listen 127.0.0.1:7301 --etcd 127.0.0.1:2379,127.0.0.1:2479,127.0.0.1:2579 --lease-ttl 5s`,
		Short: "Run rein as a gRPC server",
		Long: `Run rein as a gRPC server on --listen, storing runs in --db.

Callers authenticate with a bearer token listed (by its SHA-256) in --tokens,
or with a client certificate (--client-ca) mapped there by its common name.
Without --tokens the server accepts only local callers, as the local admin.
On SIGTERM or Ctrl+C it stops gracefully: no new calls, calls in flight and
each running run's current step finish, watch streams end with the sequence
to resume from, and the database closes cleanly. At start it carries on every
run the database holds as running.

With --etcd the runs live in an etcd cluster instead, and any number of
servers sharing its --etcd-prefix serve one set of runs: any of them takes
any call. Each server drives the runs it holds under its etcd lease; when a
server stops answering for --lease-ttl, the others take its runs over and
carry them on. A person's decision on a paused run may go to any server: the
one that receives it takes the run and carries it on.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd.Context(), e) },
	}
	hideClientFlags(cmd)
	f := cmd.Flags()
	o.flags = f
	f.StringVar(&o.listen, "listen", "127.0.0.1:7233", "address to listen on")
	f.StringVar(&o.tlsCert, "tls-cert", "", "server certificate (PEM); with --tls-key turns TLS on")
	f.StringVar(&o.tlsKey, "tls-key", "", "server key (PEM)")
	f.StringVar(&o.clientCA, "client-ca", "", "CA that signs client certificates; requires them (mTLS)")
	f.StringVar(&o.tokens, "tokens", "", "tokens file mapping credentials to principals, tenants and roles")
	o.host.registerServe(f)
	f.StringVar(&o.ledger, "fixture-ledger", "", "make fixture writes durable in this file (each commit is a line), so lookups survive a restart")
	f.BoolVar(&o.reflection, "reflection", true, "serve gRPC server reflection (for grpcurl)")
	f.Float64Var(&o.rate, "rate", server.DefaultRatePerSecond, "calls per second each principal may make, a watch stream counting as one call (0: no limit); sized for a service starting about a hundred runs a second, each with its watch and a few reads")
	f.IntVar(&o.burst, "burst", server.DefaultRateBurst, "calls a principal may make at once above --rate; a refused call is ResourceExhausted with a RetryInfo saying when to retry")
	f.IntVar(&o.maxMsgBytes, "max-msg-bytes", 4<<20, "largest request accepted, in bytes")
	f.Uint32Var(&o.maxStreams, "max-streams", 4096, "concurrent streams per connection")
	f.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 30*time.Second, "how long a graceful stop may take")
	f.StringVar(&o.adminListen, "admin-listen", "", "serve HTTP for operators on this address: /metrics (Prometheus), /healthz, /readyz; off by default; no authentication, so keep it on an address only operators reach")
	f.StringSliceVar(&o.adminHosts, "admin-host", nil, "with --admin-listen, a host name requests may carry in their Host header, besides IP addresses, localhost and the host of the --admin-listen address (the name Prometheus scrapes it by); repeatable or comma-separated")
	o.http.register(f)
	o.lifecycle.register(f)
	o.tenants.register(f)
	o.tasks.register(f)
	o.policy.register(f)
	f.StringArrayVar(&o.modelLimits, "model-limit", nil, "a model's rate limit that every run (and every replica, on etcd) shares: PROVIDER/MODEL=requests:N,tokens:N a minute (MODEL may be *); a call waits its turn instead of being refused; repeatable")
	f.IntVar(&o.maxRunning, "max-running", 0, "runs of all tenants that may be running at once (0: no limit); a run started over it, or over its tenant's max_running (--tenants), is queued and starts in its turn")
	f.BoolVar(&o.stream, "stream-model-calls", true, "stream every model call, so that a watcher sees the text as it is written, also one that joins mid-call; false streams a call only when its run has an output watcher here as it starts (for a model server that cannot stream)")
	f.BoolVar(&o.needTwo, "approvals-need-two", false, "a person who revised a proposal's arguments may not approve the revision: another approver must (default: the reviser may)")
	f.StringVar(&o.onToolChange, "on-tool-change", "pause", "what a run does when a granted tool's definition (tier, input schema, the server that serves it) differs from the one it started with, found before a call or a proposal's commit: pause (for a person to resume it on the new definition, or cancel it), adopt (move to the new definition, recorded), or fail; a pending proposal is never committed on its old hash (docs/upgrading.md, When a tool changes under a run)")
	f.BoolVar(&o.pprof, "pprof", false, "with --admin-listen, also serve Go's profiles at /debug/pprof/")
	f.StringVar(&o.logFormat, "log-format", "text", "log lines on stderr as text (key=value) or json (one object a line)")
	f.StringVar(&o.logLevel, "log-level", "info", "the least severe log lines written: debug, info, warn or error")
	o.etcd.register(f)
	o.etcd.registerUpkeep(f)
	f.DurationVar(&o.leaseTTL, "lease-ttl", 10*time.Second, "with --etcd, the TTL of this server's etcd lease: how soon after it stops answering the other servers take its runs (whole seconds)")
	f.DurationVar(&o.finalizeAfter, "finalize-after", 10*time.Minute, "with --etcd, how long every live server must run a build that writes a newer store format before a server finalizes it, after which an older build no longer starts on the store (0: only rein cluster finalize; docs/upgrading.md)")
	f.IntVar(&o.maxRuns, "max-runs", 0, "with --etcd, the most runs this server drives at once; past it, new and orphaned runs are left for other servers to take (0: no cap)")
	f.StringVar(&o.name, "name", "", "with --etcd, this server's name in the runs' owner keys and its logs, its own on the --etcd-prefix: a name another live server holds is refused, one a dead server held is taken once its lease ends (default: host name and process ID)")
	o.webhooks.register(f)
	f.BoolVar(&o.otel, "otel", false, "export the runs' traces over OTLP, configured by the standard OTEL_* environment (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL, OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER, …); off by default")
	return cmd
}

func (o *serveOptions) run(ctx context.Context, e *env) error {
	log, err := o.logger(e.stderr)
	if err != nil {
		return err
	}
	cfg := server.Config{
		Models: models, Reflection: o.reflection, Resume: true, Logger: log, ApprovalsNeedTwo: o.needTwo, StreamModelCalls: o.stream,
		RatePerSecond: o.rate, RateBurst: o.burst, MaxRecvBytes: o.maxMsgBytes, MaxStreams: o.maxStreams,
	}
	action, ok := step.ToolChangeActions[o.onToolChange]
	if !ok {
		return usageError("--on-tool-change %q: want pause, adopt or fail", o.onToolChange)
	}
	cfg.OnToolChange = action
	if o.tokens != "" {
		dir, err := auth.LoadDirectory(o.tokens)
		if err != nil {
			return usageError("--tokens: %v", err)
		}
		cfg.Directory = dir
	} else if o.clientCA != "" {
		return usageError("--client-ca needs --tokens, which maps each certificate's common name to a principal")
	}
	var stopTasks func()
	_, stopTenants, err := o.tenants.load(ctx, tenants.Lifecycle{}, log) // o.tenants.live from here on
	if err != nil {
		return err
	}
	defer stopTenants()
	if cfg.Tasks, stopTasks, err = o.tasks.load(ctx, log); err != nil {
		return err
	}
	defer stopTasks()
	if o.maxRunning < 0 {
		return usageError("--max-running %d: give 0 (no limit) or more", o.maxRunning)
	}
	modelLimits := map[string]ratelimit.ModelLimit{}
	for _, v := range o.modelLimits {
		k, m, err := ratelimit.ParseModelLimit(v)
		if err != nil {
			return usageError("--model-limit %v", err)
		}
		modelLimits[k] = m
	}
	checker, stopPolicy, err := o.policy.load(ctx, log)
	if err != nil {
		return err
	}
	defer stopPolicy()
	cfg.ToolPolicy = checker
	s, err := o.host.open(ctx, o.ledger)
	if err != nil {
		return err
	}
	defer s.close()
	log = s.configure(&cfg, log) // from here on no log line holds a secret's value
	var tlsCfg *tls.Config
	if o.tlsCert != "" || o.tlsKey != "" || o.clientCA != "" {
		if tlsCfg, err = o.tlsConfig(); err != nil {
			return usageError("%v", err)
		}
		cfg.ServerOptions = []grpc.ServerOption{grpc.Creds(credentials.NewTLS(tlsCfg))}
	}
	if o.pprof && o.adminListen == "" {
		return usageError("--pprof serves profiles on the --admin-listen address: give one too")
	}
	adminSite, err := o.adminSite()
	if err != nil {
		return err
	}
	var admin net.Listener
	if o.adminListen != "" {
		// Listening first: a taken port is refused before the store opens.
		if admin, err = net.Listen("tcp", o.adminListen); err != nil {
			return &exitErr{code: exitUnavailable, err: fmt.Errorf("--admin-listen %s: %w", o.adminListen, err)}
		}
		defer admin.Close()
		cfg.Metrics = metrics.New()
	}
	if err := o.http.check(o.flags, cfg.Directory != nil); err != nil {
		return err
	}
	var web net.Listener
	if o.http.listen != "" {
		if web, err = net.Listen("tcp", o.http.listen); err != nil {
			return &exitErr{code: exitUnavailable, err: fmt.Errorf("--http %s: %w", o.http.listen, err)}
		}
		defer web.Close()
	}
	if o.otel {
		tp, err := telemetry.Setup(ctx)
		if err != nil {
			return usageError("--otel: %v", err)
		}
		otel.SetTracerProvider(tp)
		cfg.Traces = tp
		cfg.Metrics.OfferGenAI() // on /metrics, with --admin-listen
		defer func() {
			// Flush what the batcher holds, bounded: a collector that is
			// gone must not hold the stop up.
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := tp.Shutdown(sctx); err != nil {
				log.Warn("flushing traces", "error", err)
			}
		}()
	}
	if err := o.checkReplica(); err != nil {
		return err
	}
	var rep *replica.Replica
	var opened atomic.Pointer[server.Node]         // for the runs it drives, once open
	var lock func(context.Context) (func(), error) // the replicas' admission lock
	var shared *etcdstore.Store                    // the replicas' store, for their rate buckets
	storeName := e.db
	if o.etcd.set() {
		matcher := o.webhooks.configure(&cfg, log)
		cli, st, err := o.etcd.open(ctx, etcdstore.Options{Outbox: matcher.Outbox()}, cfg.Metrics.EtcdDialOptions()...)
		if err != nil {
			return err
		}
		defer cli.Close()
		stopUpkeep, err := o.etcd.upkeep(ctx, st, cfg.Metrics, log)
		if err != nil {
			_ = st.Close()
			return err
		}
		defer stopUpkeep()
		if o.name == "" {
			host, _ := os.Hostname()
			o.name = fmt.Sprintf("%s-%d", host, os.Getpid())
		}
		if rep, err = replica.Join(ctx, replica.Config{Client: cli, Store: st, Name: o.name, TTL: o.leaseTTL, Logger: log, LostLease: cfg.Metrics.LostLease, LookedOver: cfg.Metrics.LookedOver,
			FinalizeAfter: o.finalizeAfter}); err != nil {
			_ = st.Close()
			code := exitUnavailable
			if errors.Is(err, replica.ErrNameTaken) || errors.Is(err, storeformat.ErrIncompatible) {
				code = exitUsage // the operator's --name clashes, or the build is too old: retrying will not help
			}
			return &exitErr{code: code, err: err}
		}
		cfg.Store, cfg.Replica, cfg.Owner, cfg.MaxDriven = st, true, o.name, o.maxRuns
		cfg.Commits, cfg.Leased, cfg.Relay = st, rep.Holding, st
		cfg.Cluster = rep
		// One replica sends the webhooks at a time: the one that leads
		// under a lease of --lease-ttl (docs/webhooks.md, "Guarantees").
		name, ttl := o.name, o.leaseTTL
		cfg.Webhooks.Lead = func(ctx context.Context) (<-chan struct{}, func(), error) {
			return st.Lead(ctx, "webhook-sender", name, ttl)
		}
		cfg.Webhooks.Follow = st.FollowOutbox
		cfg.Webhooks.NeedFormat, cfg.Webhooks.NeedFormatOn = etcdstore.WebhooksFormat, "etcd"
		storeName = "etcd " + o.etcd.Endpoints + " " + o.etcd.Prefix
		lock = func(ctx context.Context) (func(), error) { return st.Lock(ctx, "admission") }
		shared = st
	} else if cfg.Store, err = openStore(e.db, o.webhooks.configure(&cfg, log).Outbox()); err != nil {
		return err
	} else {
		cfg.Cluster = singleCluster(cfg.Store, log, func() int {
			if n := opened.Load(); n != nil {
				return n.Engine.Driving()
			}
			return 0
		})
	}
	db := e.db
	if o.etcd.set() {
		db = ""
	}
	if len(modelLimits) > 0 || o.tenants.path != "" {
		live := o.tenants.live
		var cells ratelimit.Cells = &ratelimit.Memory{}
		if shared != nil {
			cells = ratelimit.CellsFunc(shared.UpdateRateBucket)
		}
		cfg.Rates = ratelimit.New(cells, ratelimit.Limits{Models: modelLimits, Tenant: func(tenant string) ratelimit.ModelLimit {
			r, t := live.Current().RatesOf(tenant)
			return ratelimit.ModelLimit{RequestsPerMinute: r, TokensPerMinute: t}
		}}, nil)
	}
	if o.maxRunning > 0 || o.tenants.path != "" {
		live := o.tenants.live
		cfg.Admission = &server.AdmissionConfig{
			Tenant:     func(tenant string) (int, float64) { return live.Current().AdmissionOf(tenant) },
			Limited:    func() bool { return live.Current().Limited() },
			MaxRunning: o.maxRunning, Lock: lock,
		}
	}
	closeArchive, err := o.lifecycle.configure(ctx, &cfg, db, o.tenants.live, log)
	if err != nil {
		_ = cfg.Store.Close()
		if rep != nil {
			rep.Leave(context.Background())
		}
		return err
	}
	defer closeArchive()
	node, err := server.Open(ctx, cfg)
	if err != nil {
		if rep != nil {
			rep.Leave(context.Background())
		}
		return &exitErr{code: exitUnavailable, err: err}
	}
	opened.Store(node)
	if rep != nil {
		cfg.Metrics.TrackLeases(node.Engine.Driving, rep.Holding)
		rep.Serve(node.Engine)
		defer rep.Leave(context.Background())
	}
	lis, err := net.Listen("tcp", o.listen)
	if err != nil {
		node.Close()
		return &exitErr{code: exitUnavailable, err: fmt.Errorf("listen on %s: %w", o.listen, err)}
	}
	if cfg.Directory == nil {
		log.Warn("no --tokens: accepting only local callers (loopback), as the local admin")
	}
	b := version.Get()
	log.Info("rein serving", "addr", lis.Addr().String(), "store", storeName, "name", o.name, "tls", cfg.ServerOptions != nil, "reflection", o.reflection,
		"version", b.GetVersion(), "revision", b.GetRevision(), "modified", b.GetModified(), "go", b.GetGoVersion(),
		"store_format", int(cfg.Cluster.Gate().Active()), "build_formats", cfg.Cluster.Gate().Build().String())
	if admin != nil {
		hs := &http.Server{Handler: node.AdminHandler(cfg.Metrics, o.pprof, adminSite), ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := hs.Serve(admin); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("admin HTTP server stopped", "error", err)
			}
		}()
		defer hs.Close()
		log.Info("serving operators' HTTP", "admin_addr", admin.Addr().String(), "pprof", o.pprof)
	}
	if web != nil {
		stop, err := o.http.serve(web, node, cfg, tlsCfg, log)
		if err != nil {
			node.Close()
			return err
		}
		defer stop()
	}
	served := make(chan error, 1)
	go func() { served <- node.GRPC.Serve(lis) }()
	select {
	case <-ctx.Done():
	case <-node.StoreFailed():
		log.Error("the store stopped taking writes: draining, then exiting", "error", node.StoreErr())
	case err := <-served:
		node.Close()
		return fmt.Errorf("serve: %w", err)
	}
	log.Info("shutting down: finishing calls in flight and the current step of each run", "timeout", o.shutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), o.shutdownTimeout)
	defer cancel()
	if rep != nil {
		rep.StopTaking() // its lease stays while the runs finish their steps
	}
	node.Shutdown(sctx)
	<-served
	if err := node.StoreErr(); err != nil {
		// A failed sync or commit, or a last checkpoint that failed: the
		// log keeps every acknowledged commit, and the next start applies
		// it (docs/storage.md).
		return &exitErr{code: exitUnavailable, err: fmt.Errorf("stopped, but the store failed: %w", err)}
	}
	log.Info("stopped; the database is closed")
	return nil
}

func (o *serveOptions) tlsConfig() (*tls.Config, error) {
	if o.tlsCert == "" || o.tlsKey == "" {
		return nil, fmt.Errorf("TLS needs both --tls-cert and --tls-key")
	}
	cert, err := tls.LoadX509KeyPair(o.tlsCert, o.tlsKey)
	if err != nil {
		return nil, fmt.Errorf("load the server certificate: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if o.clientCA != "" {
		pem, err := os.ReadFile(o.clientCA)
		if err != nil {
			return nil, fmt.Errorf("read --client-ca: %w", err)
		}
		cfg.ClientCAs = x509.NewCertPool()
		if !cfg.ClientCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--client-ca %s: no PEM certificate found", o.clientCA)
		}
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// logger is the server's logger as --log-format and --log-level say.
func (o *serveOptions) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return nil, usageError("--log-level %q: want debug, info, warn or error", o.logLevel)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch o.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usageError("--log-format %q: want text or json", o.logFormat)
}

// checkReplica refuses the replica flags without --etcd, and values that
// do not fit.
func (o *serveOptions) checkReplica() error {
	if err := o.etcd.check(o.flags); err != nil {
		return err
	}
	if !o.etcd.set() {
		for _, name := range []string{"lease-ttl", "max-runs", "name", "finalize-after"} {
			if o.flags.Changed(name) {
				return usageError("--%s is for a server sharing an etcd store: give --etcd ENDPOINTS too", name)
			}
		}
		return nil
	}
	if o.leaseTTL < time.Second || o.leaseTTL%time.Second != 0 {
		return usageError("--lease-ttl %v: etcd counts a lease's TTL in whole seconds, at least 1s", o.leaseTTL)
	}
	if o.maxRuns < 0 {
		return usageError("--max-runs must be 0 (no cap) or more")
	}
	if o.finalizeAfter < 0 {
		return usageError("--finalize-after must be 0 (only rein cluster finalize) or more")
	}
	if o.flags.Changed("name") {
		if err := replica.CheckName(o.name); err != nil {
			return usageError("--name: %v", err)
		}
	}
	return nil
}
