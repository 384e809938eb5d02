package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"time"

	"github.com/spf13/pflag"

	"github.com/reinhq/rein/internal/console"
	"github.com/reinhq/rein/server"
)

// httpFlags are rein serve's flags for its HTTP face (--http): the web
// console and RunService for browsers.
type httpFlags struct {
	listen            string
	hosts             []string
	origins           []string
	readHeaderTimeout time.Duration
	readTimeout       time.Duration
	idleTimeout       time.Duration
	maxConnsPerClient int
	mcp               bool
	agui              bool
	a2a               bool
	slack             slackFlags
}

func (h *httpFlags) register(f *pflag.FlagSet) {
	f.StringVar(&h.listen, "http", "", "serve the web console and RunService to browsers (Connect, gRPC-Web) on this address, with the same authentication and roles as gRPC, and TLS when --tls-cert is given; off by default")
	f.StringSliceVar(&h.hosts, "http-host", nil, "with --http, a host name requests may carry in their Host header, besides IP addresses, localhost and the host of the --http address (the name the console is reached by); repeatable or comma-separated")
	f.StringSliceVar(&h.origins, "http-allowed-origins", nil, "with --http, origins (scheme://host[:port]) besides the console's own that browsers may call RunService from; repeatable or comma-separated")
	f.DurationVar(&h.readHeaderTimeout, "http-read-header-timeout", 10*time.Second, "with --http, how long a request's headers may take to arrive")
	f.DurationVar(&h.readTimeout, "http-read-timeout", 30*time.Second, "with --http, how long a request's body may take to arrive (a watch stream's response is not bounded by it)")
	f.DurationVar(&h.idleTimeout, "http-idle-timeout", 2*time.Minute, "with --http, how long an idle connection stays open")
	f.BoolVar(&h.mcp, "http-mcp", false, "with --http, serve the MCP face (Streamable HTTP) at /mcp, with the same tokens, tenants and roles: a tool per task of --tasks, and tools that read and decide runs (see docs/mcp.md)")
	f.BoolVar(&h.agui, "http-agui", false, "with --http, serve the AG-UI face at /agui/: a run streamed as AG-UI events over SSE (GET /agui/runs/ID, resumable with Last-Event-ID) and a task of --tasks started from a RunAgentInput (POST /agui/tasks/NAME), with the same tokens, tenants and roles (see docs/agui.md)")
	f.BoolVar(&h.a2a, "http-a2a", false, "with --http, serve the A2A face: the agent card at /.well-known/agent-card.json (a skill per task of --tasks) and the JSON-RPC binding at /a2a (HTTP+JSON under /a2a/rest/), with the same tokens, tenants and roles (see docs/a2a.md)")
	h.slack.register(f)
	f.IntVar(&h.maxConnsPerClient, "http-max-conns-per-client", 256, "with --http, the most connections one client (an IPv4 address, an IPv6 /64) may hold open; past it new ones are closed (0: no cap)")
}

// check refuses the --http-… flags without --http, and values that do not
// fit.
func (h *httpFlags) check(f *pflag.FlagSet, tokens bool) error {
	if h.listen == "" {
		for _, name := range append([]string{"http-host", "http-allowed-origins", "http-read-header-timeout", "http-read-timeout", "http-idle-timeout", "http-max-conns-per-client", "http-mcp", "http-agui", "http-a2a"}, h.slack.names()...) {
			if f.Changed(name) {
				return usageError("--%s is for the HTTP face: give --http ADDR too", name)
			}
		}
		return nil
	}
	for name, d := range map[string]time.Duration{"http-read-header-timeout": h.readHeaderTimeout, "http-read-timeout": h.readTimeout, "http-idle-timeout": h.idleTimeout} {
		if d <= 0 {
			return usageError("--%s must be more than 0", name)
		}
	}
	if h.maxConnsPerClient < 0 {
		return usageError("--http-max-conns-per-client must be 0 (no cap) or more")
	}
	if err := (console.Options{Hosts: h.hosts, AllowedOrigins: h.origins}).Check(); err != nil {
		return usageError("%v", err)
	}
	return h.slack.check(f, tokens)
}

// serve serves the web console and RunService for browsers on lis, over
// TLS when tlsCfg is set (its client certificates name principals as on
// the gRPC port). Calls go through node's gRPC server, so its
// interceptors judge them; a caller's credentials are checked before its
// body is read. stop closes the listener and every connection; watch
// streams end, and the console resumes them when the server is back.
func (h *httpFlags) serve(lis net.Listener, node *server.Node, cfg server.Config, tlsCfg *tls.Config, log *slog.Logger) (stop func(), err error) {
	var mounts map[string]http.Handler
	stopMCP := func() {}
	if h.mcp {
		if mounts, stopMCP, err = mcpMounts(node, cfg, log); err != nil {
			return nil, err
		}
	}
	stopAGUI := func() {}
	if h.agui {
		var agui map[string]http.Handler
		if agui, stopAGUI, err = aguiMounts(node, log); err != nil {
			stopMCP()
			return nil, err
		}
		if mounts == nil {
			mounts = map[string]http.Handler{}
		}
		maps.Copy(mounts, agui)
	}
	stopA2A := func() {}
	if h.a2a {
		var a2a map[string]http.Handler
		if a2a, stopA2A, err = a2aMounts(node, cfg, log); err != nil {
			stopMCP()
			stopAGUI()
			return nil, err
		}
		if mounts == nil {
			mounts = map[string]http.Handler{}
		}
		maps.Copy(mounts, a2a)
	}
	stopSlack := func() {}
	if h.slack.secretFile != "" {
		var slack map[string]http.Handler
		if slack, stopSlack, err = h.slack.mounts(node, cfg, log); err != nil {
			stopMCP()
			stopAGUI()
			stopA2A()
			return nil, err
		}
		if mounts == nil {
			mounts = map[string]http.Handler{}
		}
		maps.Copy(mounts, slack)
	}
	handler, err := console.Handler(node.GRPC, console.Options{
		Authenticate:   node.AuthenticateHTTP,
		MaxBodyBytes:   cfg.MaxRecvBytes,
		ReadTimeout:    h.readTimeout,
		Listen:         h.listen,
		Hosts:          h.hosts,
		AllowedOrigins: h.origins,
		Mounts:         mounts,
	})
	if err != nil {
		stopMCP()
		stopAGUI()
		stopA2A()
		stopSlack()
		return nil, usageError("%v", err)
	}
	if cfg.Directory == nil && len(h.hosts) > 0 {
		log.Warn("--http-host without --tokens: behind a proxy on this machine every caller is loopback, the local admin; give --tokens", "http_host", h.hosts)
	}
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	hs := &http.Server{
		Handler: handler, Protocols: &p,
		ReadHeaderTimeout: h.readHeaderTimeout, IdleTimeout: h.idleTimeout,
		MaxHeaderBytes: 64 << 10,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	scheme := "http"
	if tlsCfg != nil {
		hs.TLSConfig = tlsCfg.Clone()
		scheme = "https"
	} else {
		p.SetUnencryptedHTTP2(true)
	}
	lis = console.LimitPerClient(lis, h.maxConnsPerClient)
	go func() {
		var err error
		if tlsCfg != nil {
			err = hs.ServeTLS(lis, "", "")
		} else {
			err = hs.Serve(lis)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("web console HTTP server stopped", "error", err)
		}
	}()
	log.Info("serving the web console", "http_addr", lis.Addr().String(), "url", fmt.Sprintf("%s://%s/", scheme, lis.Addr()))
	return func() { hs.Close(); stopMCP(); stopAGUI(); stopA2A(); stopSlack() }, nil
}
