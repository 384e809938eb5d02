package main

import (
	"log/slog"
	"net/http"

	"github.com/reinhq/rein/internal/aguiface"
	"github.com/reinhq/rein/server"
)

// aguiMounts is the AG-UI face of rein serve --http --http-agui: its
// handler under /agui/, for the console's mux, and how to let its
// connection go. Its calls go through node's interceptors
// (inProcessRuns), with the caller's bearer token.
func aguiMounts(node *server.Node, log *slog.Logger) (map[string]http.Handler, func(), error) {
	runs, stop, err := inProcessRuns(node, "AG-UI", log)
	if err != nil {
		return nil, nil, err
	}
	face := aguiface.New(aguiface.Options{Runs: runs, Authenticate: node.AuthenticateHTTP, Logger: log})
	log.Info("serving the AG-UI face", "path", aguiface.Prefix)
	return map[string]http.Handler{aguiface.Prefix: face}, stop, nil
}
