package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/status"

	"github.com/reinhq/rein/internal/auth"
	"github.com/reinhq/rein/internal/catalog"
	"github.com/reinhq/rein/internal/mcpface"
	"github.com/reinhq/rein/server"
)

// mcpMounts is the MCP face of rein serve --http --mcp: its handlers by
// path, for the console's mux, and how to let its connection go. Its
// calls reach node's gRPC server over an in-memory connection, so the
// node's interceptors (authentication, tenants, roles, validation, rate
// limits) judge each one, with the caller's bearer token.
func mcpMounts(node *server.Node, cfg server.Config, log *slog.Logger) (map[string]http.Handler, func(), error) {
	runs, stop, err := inProcessRuns(node, "MCP", log)
	if err != nil {
		return nil, nil, err
	}
	face := mcpface.New(mcpface.Options{Runs: runs, Logger: log})
	opts := mcpface.HTTPOptions{MaxBodyBytes: int64(cfg.MaxRecvBytes), Logger: log}
	var h http.Handler
	if cfg.Directory != nil {
		opts.Token = func(token string) (auth.Principal, bool) { return cfg.Directory.Token(token) }
		h = face.Handler(opts)
	} else {
		// Without tokens the caller is the local admin, so it must be
		// local: the rule of the rest of the HTTP face.
		inner := face.Handler(opts)
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if err := node.AuthenticateHTTP(r); err != nil {
				http.Error(w, status.Convert(err).Message(), http.StatusForbidden)
				return
			}
			inner.ServeHTTP(w, r)
		})
	}
	stopRefresh := refreshOnReload(face, cfg.Tasks)
	log.Info("serving the MCP face", "path", mcpface.Path)
	return map[string]http.Handler{mcpface.Path: h, mcpface.MetadataPath: h}, func() { stopRefresh(); stop() }, nil
}

// refreshOnReload refreshes the face's open sessions at each reload of
// tasks (SIGHUP), until stop, which waits for the refresh in progress.
func refreshOnReload(face *mcpface.Face, tasks *catalog.Holder) (stop func()) {
	if tasks == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		changed := tasks.Changed()
		for {
			select {
			case <-changed:
				changed = tasks.Changed()
				face.Refresh(ctx)
			case <-ctx.Done():
				return
			}
		}
	}()
	return func() { cancel(); <-done }
}

// mcpOptions are rein mcp's flags.
type mcpOptions struct {
	host  hostFlags
	tasks tasksFlags
}

// newMCPCmd is `rein mcp`: the MCP face over stdio, for a host that
// launches local servers.
func newMCPCmd(e *env) *cobra.Command {
	o := &mcpOptions{}
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve rein's MCP face over stdio, for Claude Desktop, Claude Code, Cursor and other MCP hosts",
		Long: `Serve rein to an MCP host over stdin and stdout (see docs/mcp.md): a tool per
task of the catalog, tools that read, approve, deny, answer and steer runs,
run resources and progress. With --server the calls go to that server as the
principal of --token (its catalog and roles); without, to an embedded server
on --db as the local admin, with the catalog of --tasks DIR and the tool
flags' tools. Logs go to stderr; stdout carries only the protocol.`,
		Example: `  rein mcp --server rein.internal:7233 --token "$REIN_TOKEN"
  rein mcp --db ~/.local/state/rein/rein.db --tasks ./tasks --tools fixture:tools.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			var s *setup
			if e.server == "" {
				var err error
				if s, err = o.host.open(ctx, ""); err != nil {
					return err
				}
				defer s.close()
				if s.tasks, _, err = o.tasks.load(ctx, slog.New(slog.NewTextHandler(e.stderr, nil))); err != nil {
					return err
				}
			} else if o.tasks.dir != "" {
				return usageError("--tasks is for the embedded server; with --server, the server's catalog (rein serve --tasks) applies")
			}
			cn, err := connect(ctx, &e.target, e.stderr, s)
			if err != nil {
				return err
			}
			defer cn.close()
			face := mcpface.New(mcpface.Options{Runs: cn.runs, Logger: slog.New(slog.NewTextHandler(e.stderr, nil))})
			if s != nil {
				defer refreshOnReload(face, s.tasks)()
			}
			srv, err := face.Session(ctx, "")
			if err != nil {
				return err
			}
			err = srv.Run(ctx, &mcp.IOTransport{Reader: nopCloser{e.stdin}, Writer: nopWriteCloser{e.stdout}})
			if err != nil && !errors.Is(err, context.Canceled) && ctx.Err() == nil {
				return fmt.Errorf("mcp: %w", err)
			}
			return nil
		},
	}
	o.host.register(cmd.Flags())
	o.tasks.register(cmd.Flags())
	return cmd
}

// nopCloser and nopWriteCloser are the command's stdin and stdout as the
// transport takes them: closing the session does not close the process's
// streams.
type nopCloser struct{ io.Reader }

func (nopCloser) Close() error { return nil }

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
