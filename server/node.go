package server

import (
	"context"
	"log/slog"
	"time"

	"google.golang.org/grpc"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/harness"
	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/store/bolt"
	"github.com/reinhq/rein/internal/tools"
)

// Config configures a Node.
type Config struct {
	// DBPath is the bbolt file; required.
	DBPath string
	// Tools runs the tools runs are granted; nil means none.
	Tools tools.Executor
	// Models builds a run's model; nil means model.New.
	Models func(*reinv1.ModelSpec) (model.Model, error)
	// Identity says who a call comes from; nil means LocalIdentity.
	Identity func(ctx context.Context) Identity
	// Clock is the engine's clock; nil means time.Now.
	Clock  func() time.Time
	Logger *slog.Logger
	// ServerOptions are passed to grpc.NewServer.
	ServerOptions []grpc.ServerOption
}

// Node is one rein server: its store, engine, watch hub and gRPC server with
// the services registered. Serve it on any listener.
type Node struct {
	Store  store.Store
	Engine *harness.Engine
	Hub    *Hub
	GRPC   *grpc.Server
	log    *slog.Logger
}

// Open opens the store, starts the engine, registers the services, and
// resumes every run the store holds as running.
func Open(ctx context.Context, cfg Config) (*Node, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Identity == nil {
		cfg.Identity = func(context.Context) Identity { return LocalIdentity }
	}
	st, err := bolt.Open(cfg.DBPath, bolt.Options{})
	if err != nil {
		return nil, err
	}
	hub := NewHub()
	eng := harness.New(harness.Config{
		Store: st, Models: cfg.Models, Tools: cfg.Tools, Clock: cfg.Clock, Notify: hub.Notify, Logger: cfg.Logger,
	})
	n := &Node{Store: st, Engine: eng, Hub: hub, GRPC: grpc.NewServer(cfg.ServerOptions...), log: cfg.Logger}
	reinv1.RegisterRunServiceServer(n.GRPC, &runService{engine: eng, store: st, hub: hub, log: cfg.Logger, identity: cfg.Identity})
	if err := n.resume(ctx); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

// resume schedules every running run: after a restart they carry on.
// Paused runs stay paused.
func (n *Node) resume(ctx context.Context) error {
	f := store.Filter{Statuses: []reinv1.RunStatus{reinv1.RunStatus_RUN_STATUS_RUNNING}, Limit: 1000}
	for {
		page, err := n.Store.List(ctx, f)
		if err != nil {
			return err
		}
		for _, st := range page.Runs {
			if err := n.Engine.Resume(ctx, st.RunID); err != nil {
				return err
			}
			n.log.Info("resumed run", "run_id", st.RunID, "version", st.Version)
		}
		if page.Next == "" {
			return nil
		}
		f.After = page.Next
	}
}

// Close stops the gRPC server, then the engine (drivers commit what they
// hold), then closes the store.
func (n *Node) Close() {
	n.GRPC.Stop()
	n.Engine.Close()
	if err := n.Store.Close(); err != nil {
		n.log.Error("close store", "error", err)
	}
}
