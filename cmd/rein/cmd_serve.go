package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/reinhq/rein/internal/replica"
	"github.com/reinhq/rein/server"
	"github.com/reinhq/rein/server/assembly"
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

func newServeCmd(e *env) *cobra.Command { return serveCmd(e, &serveOptions{}) }

// serveCmd is rein serve with its flags parsed into o.
func serveCmd(e *env, o *serveOptions) *cobra.Command {
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
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd.Context(), e.db, e.stderr) },
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

func (o *serveOptions) run(ctx context.Context, db string, stderr io.Writer) error {
	cfg, release, err := o.config(ctx, db, stderr)
	if err != nil {
		return err
	}
	defer release()
	r, err := assembly.Start(ctx, cfg)
	if err != nil {
		return startError(err)
	}
	log := r.Config.Logger
	select {
	case <-ctx.Done():
	case <-r.Node.StoreFailed():
		log.Error("the store stopped taking writes: draining, then exiting", "error", r.Node.StoreErr())
	case <-r.Served():
		r.Close()
		return fmt.Errorf("serve: %w", r.ServeErr())
	}
	log.Info("shutting down: finishing calls in flight and the current step of each run", "timeout", o.shutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), o.shutdownTimeout)
	defer cancel()
	if err := r.Shutdown(sctx); err != nil {
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
