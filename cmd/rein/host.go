package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/spf13/pflag"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/catalog"
	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/pricing"
	"github.com/reinhq/rein/internal/secret"
	"github.com/reinhq/rein/internal/tools"
	"github.com/reinhq/rein/internal/tools/a2a"
	"github.com/reinhq/rein/internal/tools/mcp"
	"github.com/reinhq/rein/internal/tools/remote"
	"github.com/reinhq/rein/server"
)

// hostFlags holds the flags that set up the server runs are carried on: its
// tools (fixtures, the workspace, remote tool services, MCP servers), its
// price table and where its model keys come from. rein serve and every
// command that carries a run on the embedded server (run, approve, deny,
// input, fork) take the same flags, so one command can run an agent over a
// local folder.
type hostFlags struct {
	tools       string
	workspace   string
	toolServers []string
	mcps        []string
	a2as        []string
	prices      string
	secrets     string
	// baseURLs are the model base URLs a server sends its keys to (serve's
	// --allow-base-url); nil for the embedded server, whose user is its
	// operator and may name any.
	baseURLs []string
	serve    bool
}

func (h *hostFlags) register(f *pflag.FlagSet) {
	f.StringVar(&h.tools, "tools", "", "fixture tools, as fixture:FILE (a JSON object: tool name → results)")
	f.StringVar(&h.workspace, "workspace", "", "the workspace root for the file tools (fs.read, fs.list, fs.search, fs.write, fs.patch) and completion checks")
	f.StringArrayVar(&h.toolServers, "tool-server", nil, "a remote tool service, as NAME=ADDR (gRPC rein.v1.ToolService), re-dialed if it goes away; repeatable")
	f.StringArrayVar(&h.mcps, "mcp", nil, "an MCP server, as NAME=COMMAND (stdio) or NAME=URL (streamable HTTP), restarted or reconnected at the next call if it goes away; its tools are granted as NAME.TOOL; repeatable")
	f.StringArrayVar(&h.a2as, "a2a", nil, "a remote A2A agent, as NAME=URL[?token_env=VAR|?token_file=FILE] (its bearer token read from there); its skills are granted as NAME.SKILL, its tasks followed with NAME.task; repeatable")
	f.StringVar(&h.prices, "prices", "", "a price file (JSON: \"provider/model\" → input_per_mtok, output_per_mtok) over the default prices")
	f.StringVar(&h.secrets, "secrets", "", "a file of KEY=VALUE lines with the model providers' API keys (mode 0600); the environment is used for keys it lacks")
}

// registerServe adds serve's own host flags.
func (h *hostFlags) registerServe(f *pflag.FlagSet) {
	h.register(f)
	h.serve = true
	f.StringArrayVar(&h.baseURLs, "allow-base-url", nil, "a model base URL runs may name (model.base_url) and that gets this server's API keys; repeatable; the providers' own URLs need none")
}

// given says whether a flag that sets up the embedded server was set: with
// --server they do not apply and are refused.
func (h *hostFlags) given() bool {
	return h.tools != "" || h.workspace != "" || len(h.toolServers) > 0 || len(h.mcps) > 0 || len(h.a2as) > 0 || h.prices != "" || h.secrets != ""
}

// errServerFlags refuses the host flags with --server.
var errServerFlags = usageError("--tools, --workspace, --tool-server, --mcp, --a2a, --prices and --secrets set up the embedded server; with --server, the server's own apply")

// setup is an opened host: what the server is configured with, and what to
// release when it stops.
type setup struct {
	executor  tools.Executor
	workspace string
	prices    *pricing.Table
	models    func(*reinv1.ModelSpec) (model.Model, error)
	// secrets redacts every secret the server holds (serverSecrets) from
	// what its runs record and what it logs.
	secrets *secret.Redactor
	// tasks is the catalog of named tasks (rein mcp --tasks); nil: none.
	tasks   *catalog.Holder
	closers []func()
}

// configure gives cfg what the host set up: its tools, workspace, prices,
// models and secrets, and as cfg.Logger log redacted by the secrets, which
// it returns too (nil stays nil), so that no line the server logs holds a
// secret's value.
func (s *setup) configure(cfg *server.Config, log *slog.Logger) *slog.Logger {
	cfg.Tools, cfg.Workspace, cfg.Prices, cfg.Models, cfg.Secrets = s.executor, s.workspace, s.prices, s.models, s.secrets
	if s.tasks != nil {
		cfg.Tasks = s.tasks
	}
	if log != nil {
		log = slog.New(secret.Handler(log.Handler(), s.secrets))
	}
	cfg.Logger = log
	return log
}

func (s *setup) close() {
	if s == nil {
		return
	}
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
}

// open opens the host's tools and reads its files. ledger, for rein serve,
// makes fixture writes durable.
func (h *hostFlags) open(ctx context.Context, ledger string) (*setup, error) {
	// The files first: a bad one is refused before any tool server is
	// started or dialled.
	var prices *pricing.Table
	if h.prices != "" {
		var err error
		if prices, err = pricing.Load(h.prices); err != nil {
			return nil, usageError("--prices: %v", err)
		}
	}
	var secrets map[string]string
	if h.secrets != "" {
		var err error
		if secrets, err = loadSecrets(h.secrets); err != nil {
			return nil, usageError("--secrets: %v", err)
		}
	}
	allowed := []string(nil)
	if h.serve {
		allowed = []string{}
		for _, u := range h.baseURLs {
			allowed = append(allowed, strings.TrimRight(u, "/"))
		}
	}
	s := &setup{workspace: h.workspace, prices: prices, models: modelsWith(secrets, allowed), secrets: serverSecrets(secrets)}
	if err := h.openTools(ctx, ledger, s); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// openTools opens the host's tools into s; what it opened is in s.closers
// even when it fails.
func (h *hostFlags) openTools(ctx context.Context, ledger string, s *setup) error {
	var executors []tools.Executor
	if h.tools != "" {
		file, err := flagFile("tools", h.tools, "fixture")
		if err != nil {
			return err
		}
		f, err := loadFixtures(file)
		if err != nil {
			return err
		}
		if ledger != "" {
			if f, err = f.WithLedger(ledger); err != nil {
				return usageError("--fixture-ledger: %v", err)
			}
			s.closers = append(s.closers, func() { _ = f.Close() })
		}
		executors = append(executors, f)
	}
	ws, err := workspaceFlag(h.workspace, s.secrets)
	if err != nil {
		return err
	}
	executors = append(executors, ws)
	for _, v := range h.toolServers {
		name, addr, err := namedFlag("tool-server", v, "ADDR")
		if err != nil {
			return err
		}
		c, err := remote.Dial(name, addr)
		if err != nil {
			return usageError("--tool-server %s: %v", v, err)
		}
		s.closers = append(s.closers, func() { _ = c.Close() })
		executors = append(executors, c)
	}
	for _, v := range h.mcps {
		name, target, err := namedFlag("mcp", v, "COMMAND|URL")
		if err != nil {
			return err
		}
		c, err := mcp.Open(ctx, name, target)
		if err != nil {
			return &exitErr{code: exitUnavailable, err: fmt.Errorf("--mcp %s: %w", v, err)}
		}
		s.closers = append(s.closers, func() { _ = c.Close() })
		executors = append(executors, c)
	}
	for _, v := range h.a2as {
		name, target, err := namedFlag("a2a", v, "URL")
		if err != nil {
			return err
		}
		src, err := a2a.ParseSource(target)
		if err != nil {
			return usageError("--a2a %s: %v", name, err)
		}
		token, err := src.Token()
		if err != nil {
			return usageError("--a2a %s: %v", name, err)
		}
		c, err := a2a.Open(ctx, name, src.URL, a2a.Options{Token: token})
		if err != nil {
			return &exitErr{code: exitUnavailable, err: fmt.Errorf("--a2a %s: %w", name, err)}
		}
		s.closers = append(s.closers, func() { _ = c.Close() })
		executors = append(executors, c)
	}
	s.executor = tools.Join(executors...)
	return nil
}

// namedFlag splits a NAME=VALUE flag value. NAME registers a tool server,
// by the API's tool-name rule (tools.CheckServerName).
func namedFlag(flag, value, what string) (name, rest string, err error) {
	name, rest, ok := strings.Cut(value, "=")
	if !ok || name == "" || rest == "" {
		return "", "", usageError("--%s %q: expected NAME=%s", flag, value, what)
	}
	if err := tools.CheckServerName(name); err != nil {
		return "", "", usageError("--%s %q: NAME must be a tool server's name: %v", flag, value, err)
	}
	return name, rest, nil
}
