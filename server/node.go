package server

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/admission"
	"github.com/reinhq/rein/internal/archive"
	"github.com/reinhq/rein/internal/auth"
	"github.com/reinhq/rein/internal/catalog"
	"github.com/reinhq/rein/internal/engine"
	"github.com/reinhq/rein/internal/lifecycle"
	"github.com/reinhq/rein/internal/metrics"
	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/policy"
	"github.com/reinhq/rein/internal/pricing"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/schedule"
	"github.com/reinhq/rein/internal/secret"
	"github.com/reinhq/rein/internal/slackapp"
	"github.com/reinhq/rein/internal/step"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/storeformat"
	"github.com/reinhq/rein/internal/telemetry"
	"github.com/reinhq/rein/internal/tools"
	"github.com/reinhq/rein/internal/webhook"
)

// Config configures a Node.
type Config struct {
	// Store holds the runs; required. The caller chooses and opens the
	// backend; Open takes it over: the node closes it when it shuts down
	// (after its runs stopped), or when Open fails.
	Store store.Store
	// Tools runs the tools runs are granted; nil means none.
	Tools tools.Executor
	// Workspace is the root the runs' completion checks run in; "" means
	// none, and a contract with checks is refused.
	Workspace string
	// Models builds a run's model; nil means model.New.
	Models func(*reinv1.ModelSpec) (model.Model, error)
	// Prices prices the runs' model calls; nil means pricing.Default().
	Prices *pricing.Table
	// Secrets are the server's secrets, redacted from everything its runs
	// record (engine.Config.Secrets); nil redacts nothing. The caller
	// redacts its Logger with the same (secret.Handler).
	Secrets *secret.Redactor
	// Directory maps credentials to principals. Nil means no credentials:
	// the server accepts only local callers, as the local admin.
	Directory *auth.Directory
	// RatePerSecond and RateBurst bound each principal's calls; 0 means no
	// limit.
	RatePerSecond float64
	RateBurst     int
	// MaxRecvBytes bounds a request's size; 0 means 4 MiB.
	MaxRecvBytes int
	// MaxStreams bounds concurrent streams per connection; 0 means 4096.
	MaxStreams uint32
	// Reflection registers the server reflection service (for grpcurl).
	Reflection bool
	// Resume carries on, at open, every run the store holds that has not
	// ended (engine.Engine.ResumeAll). A server resumes; the CLI's
	// read-only commands must not.
	Resume bool
	// Clock is the engine's clock; nil means time.Now.
	Clock  func() time.Time
	Logger *slog.Logger
	// ServerOptions are added to grpc.NewServer's (credentials, say).
	ServerOptions []grpc.ServerOption
	// Traces, when set, gets the runs' spans (telemetry.Tracer) and every
	// gRPC call's (otelgrpc). Nil traces nothing.
	Traces trace.TracerProvider
	// Commits, when set, follows what the servers sharing the store commit
	// (the etcd store): the watch hub follows a run's commits while it has
	// watchers here, and the change feed while a watcher of every run is
	// here, so that a run driven by another server streams here live, and
	// the runs nobody here watches cost this server nothing.
	Commits Commits
	// StreamModelCalls streams every model call (rein serve), so that a
	// watcher that joins mid-call gets the text so far; false streams a
	// call only when its run has a watcher of its output as it starts.
	StreamModelCalls bool
	// Relay, when set, carries the model output of runs between the
	// servers sharing the store (relay.go): a watcher here sees the output
	// of a run another server drives. Owner names this server in it.
	Relay OutputRelay
	// Replica says the store is shared with other servers that hold their
	// runs under live leases (engine.Config.Replica).
	Replica bool
	// Owner names this server in the runs' leases; "" means a random name.
	Owner string
	// MaxDriven caps the runs the engine drives at once (engine.Config);
	// 0 means no cap.
	MaxDriven int
	// ApprovalsNeedTwo has another approver approve a proposal its reviser
	// revised (engine.Config).
	ApprovalsNeedTwo bool
	// OnToolChange is what a run does when a granted tool's definition
	// differs from the one it holds (engine.Config).
	OnToolChange step.ToolChangeAction
	// Admission, when set, limits the runs running at once: a new root run
	// whose tenant (or the server) has a limit is created queued, and
	// started in its turn as slots free (internal/admission).
	Admission *AdmissionConfig
	// Rates are the model-rate limits every run shares (internal/
	// ratelimit); nil for none.
	Rates step.Rates
	// ToolPolicy decides tool calls by the server's rules and policy
	// services (engine.Config.Policy); nil has only each contract's rules.
	ToolPolicy *policy.Checker
	// Leased, when set, says whether the server holds its etcd lease (a
	// replica): /readyz needs it.
	Leased func() bool
	// Archive, when set, is where runs that ended are archived by Policy,
	// and archived runs are read from. Nil archives nothing (a run
	// archived before reads as its stub until it is given again).
	Archive *archive.Archive
	// Policy, when set, is each tenant's lifecycle: the node sweeps the
	// runs that ended every SweepEvery (0: a second), archiving and
	// deleting them by it. Nil sweeps nothing; DeleteRun works either way.
	Policy func(tenant string) lifecycle.Policy
	// PolicySoonest, when set, is the least age at which any tenant's
	// Policy archives or deletes a run, false when none does: a sweep
	// reads only the runs due (lifecycle.Keeper.Soonest).
	PolicySoonest func() (time.Duration, bool)
	SweepEvery    time.Duration
	// Metrics, when set, is told what the node does: the runs' events as
	// they are published, the store's appends, the watch streams, and every
	// gRPC call (go-grpc-middleware's Prometheus provider, registered on
	// Metrics.Registry). Nil records nothing.
	Metrics *metrics.Metrics
	// Tasks is the catalog of named tasks (rein serve --tasks) that
	// StartRun's task, ListTasks and GetTask read; nil is an empty one.
	Tasks *catalog.Holder
	// Cluster is the store's format and the servers sharing it
	// (ClusterService, GetServerInfo, rein_store_format); its gate says
	// which formats the engine writes now. Nil reports none, and the
	// engine writes every format this build knows.
	Cluster Cluster
	// Webhooks, when set and the store keeps webhooks (store.Webhooks),
	// serves WebhookService and runs its sender (server/webhooks.go).
	Webhooks *Webhooks
}

// Node is one rein server: its store, engine, watch hub and gRPC server with
// the services registered. Serve it on any listener.
type Node struct {
	Store  store.Store
	Engine *engine.Engine
	Hub    *Hub
	GRPC   *grpc.Server
	health *health.Server
	log    *slog.Logger
	auth   *authenticator
	// faces judges and makes the calls of principals a face named (DecideApprovalAs).
	faces faceCalls

	done      chan struct{}
	closeOnce sync.Once
	// closed is the store's Close error, set by Shutdown (StoreErr).
	closed error
	leased func() bool
	// Keeper archives and deletes runs (nil for a store without a
	// lifecycle); sweep ends its loop, and swept is closed once it did.
	Keeper *lifecycle.Keeper
	sweep  context.CancelFunc
	swept  chan struct{}
	// Admission starts queued runs (nil without Config.Admission); admit
	// ends its loop, and admitted is closed once it did.
	Admission *admission.Controller
	admit     context.CancelFunc
	admitted  chan struct{}
	// scheduled ends the scheduler's loop (a store that keeps schedules);
	// schedulerDone is closed once it did.
	scheduled     context.CancelFunc
	schedulerDone chan struct{}
	// sending ends the webhook sender; sent is closed once it did.
	sending context.CancelFunc
	sent    chan struct{}
}

// Open starts the engine on the store, registers the services with the
// interceptor chain, and (with Resume) carries on every run that has not
// ended.
func Open(ctx context.Context, cfg Config) (*Node, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxRecvBytes == 0 {
		cfg.MaxRecvBytes = 4 << 20
	}
	if cfg.MaxStreams == 0 {
		cfg.MaxStreams = 4096
	}
	if cfg.Store == nil {
		return nil, errors.New("server: Config.Store is required: open a store (internal/store/bolt, say) and pass it")
	}
	// The schedules are the store's own, read past the wrappers below.
	schedules, _ := cfg.Store.(store.Schedules)
	backups, _ := cfg.Store.(backuper)
	hooks, _ := cfg.Store.(store.Webhooks)
	var sender *webhook.Sender
	if cfg.Webhooks != nil && cfg.Webhooks.Send != nil && hooks != nil {
		send := *cfg.Webhooks.Send
		send.Store = hooks
		if send.Slack == nil {
			send.Slack = slackapp.Delivery
		}
		sender = webhook.NewSender(send)
	}
	var keeper *lifecycle.Keeper
	if b, ok := cfg.Store.(lifecycle.Backend); ok {
		ls := lifecycle.NewStore(b, cfg.Archive)
		keeper = &lifecycle.Keeper{Store: ls, Policy: cfg.Policy, Soonest: cfg.PolicySoonest, Every: cfg.SweepEvery, Clock: cfg.Clock,
			Log: cfg.Logger, Metrics: cfg.Metrics.NewLifecycle()}
		cfg.Store = ls
	} else if cfg.Archive != nil || cfg.Policy != nil {
		return nil, errors.New("server: Config.Archive and Config.Policy need a store with a lifecycle (store.Lifecycle)")
	}
	st := cfg.Metrics.Store(cfg.Store)
	hub := NewHub()
	hub.streamAll, hub.commits = cfg.StreamModelCalls, cfg.Commits
	var tracer *telemetry.Tracer
	var opts []grpc.ServerOption
	if cfg.Traces != nil {
		tracer = telemetry.NewTracer(cfg.Traces)
		// A caller's trace context, in the call's metadata, continues into
		// the call's span, which a new run's trace hangs from.
		opts = append(opts, grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(cfg.Traces),
			otelgrpc.WithPropagators(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})))))
	}
	// The one publish hook, read by the watch hub, the metrics, the traces
	// and the lifecycle log.
	var adm *admission.Controller // set before anything is published
	published := func(st runstate.State, evs []*reinv1.Event) {
		if adm != nil && frees(evs) {
			adm.Kick()
		}
		hub.Published(st.RunID, evs)
		if sender != nil {
			sender.Wake() // the events are committed, and so is what they send
		}
		cfg.Metrics.Observe(st.RunID, evs)
		tracer.Observe(st, evs)
		logLifecycle(cfg.Logger, st, evs)
	}
	var calls *grpcprom.ServerMetrics
	if m := cfg.Metrics; m != nil {
		if err := m.Seed(ctx, st); err != nil {
			_ = cfg.Store.Close()
			return nil, err
		}
		// Outermost, so that every call is counted with the code it ended
		// with, refusals by the interceptors below included.
		calls = grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram())
		m.Registry.MustRegister(calls)
		opts = append(opts, grpc.ChainUnaryInterceptor(calls.UnaryServerInterceptor()), grpc.ChainStreamInterceptor(calls.StreamServerInterceptor()))
	}
	var output step.Output = hub
	var follows *relayFollows
	if cfg.Relay != nil {
		output = newRelayOutput(hub, cfg.Relay, cfg.Owner, cfg.Logger)
		follows = newRelayFollows(hub, cfg.Relay, cfg.Owner, cfg.Logger)
	}
	var formats *storeformat.Gate
	if cfg.Cluster != nil {
		formats = cfg.Cluster.Gate()
	}
	eng := engine.New(engine.Config{
		Store: st, Models: cfg.Models, Tools: cfg.Tools, Workspace: cfg.Workspace, Prices: cfg.Prices, Clock: cfg.Clock,
		Published: published, Output: output, Logger: cfg.Logger, Replica: cfg.Replica, Owner: cfg.Owner, MaxDriven: cfg.MaxDriven,
		ApprovalsNeedTwo: cfg.ApprovalsNeedTwo, TookOver: func(runstate.State, uint64) { cfg.Metrics.TookOver() }, Secrets: cfg.Secrets,
		Policy: cfg.ToolPolicy, Rates: cfg.Rates, OnToolChange: cfg.OnToolChange, Formats: formats,
	})
	authn := &authenticator{dir: cfg.Directory}
	validator, limit := newValidator(), newLimiter(cfg.RatePerSecond, cfg.RateBurst)
	opts = append(append(opts, chain(cfg.Logger, authn, validator, limit, newRequestCodec(cfg.MaxRecvBytes))...),
		grpc.MaxRecvMsgSize(cfg.MaxRecvBytes),
		grpc.MaxConcurrentStreams(cfg.MaxStreams),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 2 * time.Minute, Timeout: 20 * time.Second}),
	)
	if a := cfg.Admission; a != nil {
		adm = admission.New(admission.Config{
			Store: st, Starter: eng, Gone: admissionGone, Tenant: a.Tenant, Limited: a.Limited, MaxRunning: a.MaxRunning,
			Owner: cfg.Owner, Lock: a.Lock, Every: a.Every, Clock: cfg.Clock, Logger: cfg.Logger,
		})
	}
	n := &Node{
		Store: st, Engine: eng, Hub: hub, Admission: adm,
		GRPC:   grpc.NewServer(append(opts, cfg.ServerOptions...)...),
		health: health.NewServer(),
		log:    cfg.Logger,
		auth:   authn,
		faces:  faceCalls{validator: validator, limit: limit},
		done:   make(chan struct{}),
		leased: cfg.Leased,
		Keeper: keeper,
	}
	// Every loop Shutdown stops starts out stopped, so that a failure
	// below can close the node before the loops start.
	n.sweep, n.swept = stoppedLoop()
	n.admit, n.admitted = stoppedLoop()
	n.scheduled, n.schedulerDone = stoppedLoop()
	n.sending, n.sent = stoppedLoop()
	rs := &runService{engine: eng, store: st, hub: hub, admission: adm, schedules: schedules, log: cfg.Logger, done: n.done, resume: cfg.Resume, metrics: cfg.Metrics, keeper: keeper, follows: follows, tasks: cfg.Tasks, cluster: cfg.Cluster}
	n.faces.runs = rs
	reinv1.RegisterRunServiceServer(n.GRPC, rs)
	reinv1.RegisterStorageServiceServer(n.GRPC, &storageService{backups: backups, log: cfg.Logger})
	if cfg.Cluster != nil {
		reinv1.RegisterClusterServiceServer(n.GRPC, &clusterService{cluster: cfg.Cluster, log: cfg.Logger})
		g := cfg.Cluster.Gate()
		cfg.Metrics.TrackStoreFormat(func() int { return int(g.Active()) }, int(g.Build().Writes.Max))
	} else {
		reinv1.RegisterClusterServiceServer(n.GRPC, unclustered{})
	}
	healthpb.RegisterHealthServer(n.GRPC, n.health)
	if hooks != nil && cfg.Webhooks != nil {
		clock := cfg.Clock
		if clock == nil {
			clock = time.Now
		}
		var gate *storeformat.Gate
		if cfg.Cluster != nil {
			gate = cfg.Cluster.Gate()
		}
		reinv1.RegisterWebhookServiceServer(n.GRPC, &webhookService{store: hooks, cfg: cfg.Webhooks, sender: sender, gate: gate, log: cfg.Logger, clock: clock, tenant: rs.identity})
		if sender != nil {
			wctx, cancel := context.WithCancel(context.Background())
			n.sending, n.sent = cancel, make(chan struct{})
			go func() {
				defer close(n.sent)
				if cfg.Webhooks.Lead != nil {
					sendWhileLeading(wctx, sender, cfg.Webhooks.Lead, cfg.Webhooks.Follow, cfg.Logger)
					return
				}
				sender.Run(wctx)
			}()
		}
	}
	n.health.SetServingStatus(reinv1.RunService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	if cfg.Reflection {
		reflection.Register(n.GRPC)
	}
	if calls != nil {
		calls.InitializeMetrics(n.GRPC)
	}
	if keeper != nil && cfg.Policy != nil {
		sctx, cancel := context.WithCancel(context.Background())
		n.sweep, n.swept = cancel, make(chan struct{})
		go func() {
			defer close(n.swept)
			keeper.Run(sctx)
		}()
	}
	if cfg.Resume {
		if err := eng.ResumeAll(ctx); err != nil {
			n.Close()
			return nil, err
		}
	}
	if schedules != nil && cfg.Resume {
		// Only a server that carries runs on (rein serve) runs the
		// schedules: a command's embedded server stops when it ends.
		sch := schedule.New(schedule.Config{
			Store: schedules, Runs: st, Clock: cfg.Clock, Logger: cfg.Logger, Ticked: cfg.Metrics.ScheduleTicked, Refused: scheduleRefused,
			Start: func(ctx context.Context, sc *reinv1.Schedule, requestID string, tick time.Time) (string, error) {
				run, _, err := rs.startScheduled(ctx, sc, requestID, tick)
				return run.RunID, err
			},
		})
		sctx, cancel := context.WithCancel(context.Background())
		n.scheduled, n.schedulerDone = cancel, make(chan struct{})
		go func() {
			defer close(n.schedulerDone)
			sch.Run(sctx)
		}()
	}
	if adm != nil {
		actx, cancel := context.WithCancel(context.Background())
		n.admit, n.admitted = cancel, make(chan struct{})
		go func() {
			defer close(n.admitted)
			adm.Run(actx)
		}()
	}
	return n, nil
}

// Shutdown stops the node gracefully: the health check turns NOT_SERVING,
// no new call is accepted, watch streams end with Unavailable and the
// sequence to resume from, calls in flight finish, each running run stops
// after its current step commits, and the store closes cleanly. What is
// still running when ctx ends is stopped at once.
func (n *Node) Shutdown(ctx context.Context) {
	n.closeOnce.Do(func() {
		n.health.Shutdown()
		close(n.done)
		// No queued run starts once the node stops: another server, or
		// this one restarted, starts it.
		n.admit()
		<-n.admitted
		n.scheduled()
		<-n.schedulerDone
		// A delivery cut here is sent again: it leaves the outbox only
		// once the receiver took it.
		n.sending()
		<-n.sent
		// Runs finish their current step while calls drain: a client that
		// stopped reading must not cost them their graceful stop.
		drained := make(chan struct{})
		go func() {
			n.Engine.Shutdown(ctx)
			close(drained)
		}()
		stopped := make(chan struct{})
		go func() {
			n.GRPC.GracefulStop()
			close(stopped)
		}()
		select {
		case <-stopped:
		case <-ctx.Done():
			n.GRPC.Stop()
			<-stopped
		}
		<-drained
		n.sweep()
		<-n.swept
		n.Hub.stopFollowing()
		if err := n.Store.Close(); err != nil && !errors.Is(err, store.ErrClosed) {
			n.log.Error("close store", "error", err)
			n.closed = err
		}
	})
}

// stoppedLoop is the stop function and done channel of a loop that never
// started: stopping it does nothing, and it is done already.
func stoppedLoop() (context.CancelFunc, chan struct{}) {
	done := make(chan struct{})
	close(done)
	return func() {}, done
}

// Close stops the node at once: calls and streams are cut, running runs
// stop where they are (their logs stay consistent; Resume carries them on).
func (n *Node) Close() {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	n.Shutdown(ctx)
}
