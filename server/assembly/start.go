package assembly

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"google.golang.org/grpc/test/bufconn"

	"github.com/reinhq/rein/internal/ratelimit"
	"github.com/reinhq/rein/internal/replica"
	etcdstore "github.com/reinhq/rein/internal/store/etcd"
	"github.com/reinhq/rein/internal/telemetry"
	"github.com/reinhq/rein/internal/version"
	"github.com/reinhq/rein/internal/webhook"
	"github.com/reinhq/rein/server"
)

// Running is a server Start assembled, serving until Shutdown or Close.
type Running struct {
	// Node is the server's node; Config the node's configuration as
	// Start completed it.
	Node   *server.Node
	Config server.Config
	// Replica is the server's place among the replicas sharing its etcd
	// cluster; nil alone on a bbolt file. Owner is its name there.
	Replica *replica.Replica
	Owner   string
	// StoreName names the store in logs: the bbolt file, or "etcd
	// ENDPOINTS PREFIX".
	StoreName string

	lis     net.Listener
	mem     *bufconn.Listener
	serving bool
	served  chan struct{}
	// serveErr is what the gRPC server's Serve returned, set before
	// served is closed.
	serveErr error
	// undo are what Start opened, released last first once the node has
	// stopped (or when Start fails).
	undo []func()
	// lock and shared are the replicas' admission lock and store, for
	// their rate buckets (openEtcd); nil alone.
	lock   func(context.Context) (func(), error)
	shared *etcdstore.Store
}

// atStop adds f to what is released, last first, once the node stopped.
func (r *Running) atStop(f func()) { r.undo = append(r.undo, f) }

func (r *Running) release() {
	for i := len(r.undo) - 1; i >= 0; i-- {
		r.undo[i]()
	}
	r.undo = nil
}

// Start assembles the server cfg describes and serves it: on cfg.Listen,
// or in memory. What it opened is released, last first, when a step fails
// (its error's Kind, KindOf, says what that means to the caller), or by
// Shutdown or Close.
func Start(ctx context.Context, cfg Config) (_ *Running, err error) {
	r := &Running{served: make(chan struct{})}
	defer func() {
		if err != nil {
			r.stop(nil) // the one cleanup: what opened, last first
		}
	}()
	log := cfg.logger()
	var admin net.Listener
	if cfg.AdminListen != "" {
		// Listening first: a taken port is refused before the store opens.
		if admin, err = net.Listen("tcp", cfg.AdminListen); err != nil {
			return nil, unavailable(fmt.Errorf("--admin-listen %s: %w", cfg.AdminListen, err))
		}
		r.atStop(func() { _ = admin.Close() })
	}
	var web net.Listener
	if cfg.HTTPListen != "" {
		if web, err = net.Listen("tcp", cfg.HTTPListen); err != nil {
			return nil, unavailable(fmt.Errorf("--http %s: %w", cfg.HTTPListen, err))
		}
		r.atStop(func() { _ = web.Close() })
	}
	if cfg.OTel {
		tp, err := telemetry.Setup(ctx)
		if err != nil {
			return nil, refused(fmt.Errorf("--otel: %v", err))
		}
		otel.SetTracerProvider(tp)
		cfg.Node.Traces = tp
		cfg.Node.Metrics.OfferGenAI() // on /metrics, with AdminListen
		r.atStop(func() {
			// Flush what the batcher holds, bounded: a collector that is
			// gone must not hold the stop up.
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := tp.Shutdown(sctx); err != nil {
				log.Warn("flushing traces", "error", err)
			}
		})
	}
	outbox := (&webhook.Matcher{PublicURL: cfg.PublicURL, Secrets: cfg.Node.Secrets}).Outbox()
	var opened atomic.Pointer[server.Node] // for the runs it drives, once open
	if cfg.Etcd != nil {
		err = r.openEtcd(ctx, &cfg, outbox)
	} else {
		err = r.openBolt(&cfg, outbox, drivingOf(&opened))
	}
	if err != nil {
		return nil, err
	}
	r.limit(&cfg)
	if err := r.openLifecycle(ctx, &cfg); err != nil {
		return nil, err
	}
	node, err := server.Open(ctx, cfg.Node)
	if err != nil {
		return nil, unavailable(err)
	}
	r.Node, r.Config = node, cfg.Node
	opened.Store(node)
	if r.Replica != nil {
		cfg.Node.Metrics.TrackLeases(node.Engine.Driving, r.Replica.Holding)
		r.Replica.Serve(node.Engine)
	}
	if err := r.listen(&cfg); err != nil {
		return nil, err
	}
	if admin != nil {
		hs := &http.Server{Handler: node.AdminHandler(cfg.Node.Metrics, cfg.Pprof, cfg.AdminSite), ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := hs.Serve(admin); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("admin HTTP server stopped", "error", err)
			}
		}()
		r.atStop(func() { _ = hs.Close() })
		log.Info("serving operators' HTTP", "admin_addr", admin.Addr().String(), "pprof", cfg.Pprof)
	}
	if web != nil {
		stop, err := cfg.HTTP(web, node, r.Config)
		if err != nil {
			return nil, err
		}
		r.atStop(stop)
	}
	lis := r.lis
	if lis == nil {
		lis = r.mem
	}
	r.serving = true
	go func() {
		defer close(r.served)
		r.serveErr = node.GRPC.Serve(lis)
	}()
	return r, nil
}

// Served is closed once the gRPC server stopped serving: after Shutdown or
// Close, or early, on a failure its ServeErr says.
func (r *Running) Served() <-chan struct{} { return r.served }

// ServeErr is what stopped the gRPC server, once Served is closed.
func (r *Running) ServeErr() error { return r.serveErr }

// Addr is the address the gRPC services are served on.
func (r *Running) Addr() net.Addr {
	if r.lis != nil {
		return r.lis.Addr()
	}
	return r.mem.Addr()
}

// DialContext connects to the gRPC services served in memory (Config.Listen
// ""), for a client in this process.
func (r *Running) DialContext(ctx context.Context, _ string) (net.Conn, error) {
	if r.mem == nil {
		return nil, errors.New("assembly: the server listens on " + r.lis.Addr().String() + ", not in memory: dial that")
	}
	return r.mem.DialContext(ctx)
}

// Shutdown stops the server gracefully (server.Node.Shutdown): a replica
// takes no more runs, but keeps its lease while the runs finish their
// current steps, until ctx ends. Then it releases what Start opened, and
// returns the store's failure, if any (server.Node.StoreErr).
func (r *Running) Shutdown(ctx context.Context) error {
	r.stop(ctx)
	return r.Node.StoreErr()
}

// Close stops the server at once (server.Node.Close) and releases what
// Start opened.
func (r *Running) Close() { r.stop(nil) }

// stop stops the node, gracefully until ctx ends (nil: at once), waits
// for the gRPC server, and releases the rest, last first.
func (r *Running) stop(ctx context.Context) {
	if r.Node != nil {
		if ctx == nil {
			r.Node.Close()
		} else {
			if r.Replica != nil {
				r.Replica.StopTaking()
			}
			r.Node.Shutdown(ctx)
		}
		if r.serving {
			<-r.served
		}
	}
	r.release()
}

// limit sets the node's model-rate limits and admission from cfg: on etcd
// the buckets and the admission lock are the replicas' own, shared.
func (r *Running) limit(cfg *Config) {
	live := cfg.Tenants
	file := live != nil && live.Path() != ""
	if len(cfg.ModelLimits) > 0 || file {
		var cells ratelimit.Cells = &ratelimit.Memory{}
		if r.shared != nil {
			cells = ratelimit.CellsFunc(r.shared.UpdateRateBucket)
		}
		tenant := func(string) ratelimit.ModelLimit { return ratelimit.ModelLimit{} }
		if live != nil {
			tenant = func(tenant string) ratelimit.ModelLimit {
				rq, tk := live.Current().RatesOf(tenant)
				return ratelimit.ModelLimit{RequestsPerMinute: rq, TokensPerMinute: tk}
			}
		}
		cfg.Node.Rates = ratelimit.New(cells, ratelimit.Limits{Models: cfg.ModelLimits, Tenant: tenant}, nil)
	}
	if cfg.MaxRunning > 0 || file {
		a := &server.AdmissionConfig{MaxRunning: cfg.MaxRunning, Lock: r.lock,
			Tenant: func(string) (int, float64) { return 0, 1 }, Limited: func() bool { return false }}
		if live != nil {
			a.Tenant = func(tenant string) (int, float64) { return live.Current().AdmissionOf(tenant) }
			a.Limited = func() bool { return live.Current().Limited() }
		}
		cfg.Node.Admission = a
	}
}

// listen listens on cfg.Listen and logs that the server serves there, or
// makes the in-memory listener.
func (r *Running) listen(cfg *Config) error {
	if cfg.Listen == "" {
		r.mem = bufconn.Listen(1 << 20)
		r.atStop(func() { _ = r.mem.Close() })
		return nil
	}
	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return unavailable(fmt.Errorf("listen on %s: %w", cfg.Listen, err))
	}
	r.lis = lis
	r.atStop(func() { _ = lis.Close() })
	log, n := cfg.logger(), &r.Config
	if n.Directory == nil {
		log.Warn("no --tokens: accepting only local callers (loopback), as the local admin")
	}
	b := version.Get()
	log.Info("rein serving", "addr", lis.Addr().String(), "store", r.StoreName, "name", r.Owner, "tls", n.ServerOptions != nil, "reflection", n.Reflection,
		"version", b.GetVersion(), "revision", b.GetRevision(), "modified", b.GetModified(), "go", b.GetGoVersion(),
		"store_format", int(n.Cluster.Gate().Active()), "build_formats", n.Cluster.Gate().Build().String())
	return nil
}
