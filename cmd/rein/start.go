package main

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/reinhq/rein/internal/auth"
	"github.com/reinhq/rein/internal/metrics"
	"github.com/reinhq/rein/internal/ratelimit"
	"github.com/reinhq/rein/internal/step"
	"github.com/reinhq/rein/internal/tenants"
	"github.com/reinhq/rein/server"
	"github.com/reinhq/rein/server/assembly"
)

// This file is the one place the CLI's flags become a server's
// configuration (assembly.Config): rein serve's, in serveOptions.config,
// and the embedded server's, in embeddedConfig. Both servers start through
// assembly.Start; TestAssemblyFields checks that a field of the Config is
// set by both, or is listed there with the reason one leaves it.

// config maps rein serve's flags to the server's configuration, loading
// the files they name (tokens, tenants, tasks, policy, the host's tools).
// release lets go of what it loaded (the tools, the SIGHUP reloads), after
// the server stopped. db is the bbolt file (unused with --etcd); the log
// goes to stderr.
func (o *serveOptions) config(ctx context.Context, db string, stderr io.Writer) (cfg assembly.Config, release func(), err error) {
	var undo []func()
	releaseAll := func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
		undo = nil
	}
	defer func() {
		if err != nil {
			releaseAll()
		}
	}()
	log, err := o.logger(stderr)
	if err != nil {
		return cfg, nil, err
	}
	n := &cfg.Node
	*n = server.Config{
		Models: models, Reflection: o.reflection, Resume: true, Logger: log, ApprovalsNeedTwo: o.needTwo, StreamModelCalls: o.stream,
		RatePerSecond: o.rate, RateBurst: o.burst, MaxRecvBytes: o.maxMsgBytes, MaxStreams: o.maxStreams,
	}
	action, ok := step.ToolChangeActions[o.onToolChange]
	if !ok {
		return cfg, nil, usageError("--on-tool-change %q: want pause, adopt or fail", o.onToolChange)
	}
	n.OnToolChange = action
	if o.tokens != "" {
		dir, err := auth.LoadDirectory(o.tokens)
		if err != nil {
			return cfg, nil, usageError("--tokens: %v", err)
		}
		n.Directory = dir
	} else if o.clientCA != "" {
		return cfg, nil, usageError("--client-ca needs --tokens, which maps each certificate's common name to a principal")
	}
	live, stopTenants, err := o.tenants.load(ctx, tenants.Lifecycle{}, log)
	if err != nil {
		return cfg, nil, err
	}
	undo = append(undo, stopTenants)
	cfg.Tenants = live
	tasks, stopTasks, err := o.tasks.load(ctx, log)
	if err != nil {
		return cfg, nil, err
	}
	undo = append(undo, stopTasks)
	n.Tasks = tasks
	if o.maxRunning < 0 {
		return cfg, nil, usageError("--max-running %d: give 0 (no limit) or more", o.maxRunning)
	}
	cfg.MaxRunning = o.maxRunning
	cfg.ModelLimits = map[string]ratelimit.ModelLimit{}
	for _, v := range o.modelLimits {
		k, m, err := ratelimit.ParseModelLimit(v)
		if err != nil {
			return cfg, nil, usageError("--model-limit %v", err)
		}
		cfg.ModelLimits[k] = m
	}
	checker, stopPolicy, err := o.policy.load(ctx, log)
	if err != nil {
		return cfg, nil, err
	}
	undo = append(undo, stopPolicy)
	n.ToolPolicy = checker
	s, err := o.host.open(ctx, o.ledger)
	if err != nil {
		return cfg, nil, err
	}
	undo = append(undo, s.close)
	log = s.configure(n, log) // from here on no log line holds a secret's value
	var tlsCfg *tls.Config
	if o.tlsCert != "" || o.tlsKey != "" || o.clientCA != "" {
		if tlsCfg, err = o.tlsConfig(); err != nil {
			return cfg, nil, usageError("%v", err)
		}
		n.ServerOptions = []grpc.ServerOption{grpc.Creds(credentials.NewTLS(tlsCfg))}
	}
	if o.pprof && o.adminListen == "" {
		return cfg, nil, usageError("--pprof serves profiles on the --admin-listen address: give one too")
	}
	if cfg.AdminSite, err = o.adminSite(); err != nil {
		return cfg, nil, err
	}
	cfg.AdminListen, cfg.Pprof = o.adminListen, o.pprof
	if o.adminListen != "" {
		n.Metrics = metrics.New()
	}
	if err := o.http.check(o.flags, n.Directory != nil); err != nil {
		return cfg, nil, err
	}
	if o.http.listen != "" {
		cfg.HTTPListen = o.http.listen
		cfg.HTTP = func(lis net.Listener, node *server.Node, ncfg server.Config) (func(), error) {
			return o.http.serve(lis, node, ncfg, tlsCfg, log)
		}
	}
	cfg.OTel = o.otel
	if err := o.checkReplica(); err != nil {
		return cfg, nil, err
	}
	o.webhooks.configure(n, log)
	cfg.PublicURL = o.webhooks.publicURL
	cfg.DB = db
	if o.etcd.set() {
		db = ""
		cfg.Etcd = &assembly.Etcd{Cluster: o.etcd.Flags, CompactEvery: o.etcd.compactEvery, LeaseTTL: o.leaseTTL,
			FinalizeAfter: o.finalizeAfter, MaxRuns: o.maxRuns, Name: o.name}
	}
	if cfg.Lifecycle, err = o.lifecycle.config(db); err != nil {
		return cfg, nil, err
	}
	cfg.Listen = o.listen
	return cfg, releaseAll, nil
}

// embeddedConfig is the configuration of the server a command runs in this
// process on the bbolt file at db (read-only for the commands that only
// read), set up as s says (nil: no tools; the provider keys of the
// environment are still the server's secrets). It serves in memory, keeps
// no runs going once the command ends, sends no webhooks (rein serve
// sends them; the URL is checked as it dials) and sweeps nothing, but
// reads the runs archived beside db.
func embeddedConfig(db string, readOnly bool, s *setup) assembly.Config {
	cfg := assembly.Config{DB: db, ReadOnly: readOnly, Node: server.Config{
		Models: models, MaxRecvBytes: embeddedMaxRecv, Secrets: serverSecrets(nil),
		Webhooks: &server.Webhooks{AllowPrivate: true},
	}}
	if info, err := os.Stat(defaultArchiveDir(db)); err == nil && info.IsDir() {
		cfg.Lifecycle.Archive = fileURL(defaultArchiveDir(db))
	}
	if s != nil {
		s.configure(&cfg.Node, nil)
	}
	return cfg
}

// startError is an error of assembly.Start with its exit code: 2 for a
// configuration that cannot be served, 5 for something unavailable, 1 for
// anything else. An error the CLI made (the HTTP face's) keeps its own.
func startError(err error) error {
	var ee *exitErr
	if errors.As(err, &ee) {
		return err
	}
	switch assembly.KindOf(err) {
	case assembly.Refused:
		return &exitErr{code: exitUsage, err: err}
	case assembly.Failed:
		return &exitErr{code: exitError, err: err}
	}
	return &exitErr{code: exitUnavailable, err: err}
}
