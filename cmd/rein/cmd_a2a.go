package main

import (
	"log/slog"
	"net/http"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/a2aface"
	"github.com/reinhq/rein/internal/catalog"
	"github.com/reinhq/rein/internal/version"
	"github.com/reinhq/rein/server"
)

// a2aMounts is the A2A face of rein serve --http --http-a2a: the agent
// card and the JSON-RPC and HTTP+JSON bindings, for the console's mux,
// and how to let its connection go. Its calls go through node's
// interceptors (inProcessRuns), with the caller's bearer token.
func a2aMounts(node *server.Node, cfg server.Config, log *slog.Logger) (map[string]http.Handler, func(), error) {
	runs, stop, err := inProcessRuns(node, "A2A", log)
	if err != nil {
		return nil, nil, err
	}
	face := a2aface.New(a2aface.Options{
		Runs: runs, Authenticate: node.AuthenticateHTTP, Bearer: cfg.Directory != nil,
		PublicTasks: func() []*reinv1.Task { return openTasks(cfg.Tasks) }, MaxBodyBytes: int64(cfg.MaxRecvBytes),
		Version: version.Get().GetVersion(), Logger: log,
	})
	log.Info("serving the A2A face", "card", a2aface.CardPath, "jsonrpc", a2aface.RPCPath, "rest", a2aface.RESTPath)
	return face.Mounts(), stop, nil
}

// openTasks are the tasks of tasks every principal may start (no tenant
// or role restriction): the skills of the public agent card. A caller
// reads the ones it may start in the extended card.
func openTasks(tasks *catalog.Holder) []*reinv1.Task {
	if tasks == nil {
		return nil
	}
	cur := tasks.Current()
	var out []*reinv1.Task
	for _, name := range cur.Names() {
		t, ok := cur.Get(name)
		if !ok || len(t.Tenants) > 0 || len(t.Roles) > 0 {
			continue
		}
		out = append(out, &reinv1.Task{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema, Digest: t.Digest})
	}
	return out
}
