package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/aguiface"
	"github.com/reinhq/rein/server"
)

// aguiMounts is the AG-UI face of rein serve --http --http-agui: its
// handler under /agui/, for the console's mux, and how to let its
// connection go. Its calls reach node's gRPC server over an in-memory
// connection, so the node's interceptors (authentication, tenants, roles,
// validation, rate limits) judge each one, with the caller's bearer token.
func aguiMounts(node *server.Node, log *slog.Logger) (map[string]http.Handler, func(), error) {
	lis := bufconn.Listen(1 << 20)
	go func() {
		if err := node.GRPC.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			log.Error("the AG-UI face's connection to the server stopped", "error", err)
		}
	}()
	cc, err := grpc.NewClient("passthrough:///rein-agui",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	)
	if err != nil {
		_ = lis.Close()
		return nil, nil, fmt.Errorf("the AG-UI face: %w", err)
	}
	face := aguiface.New(aguiface.Options{Runs: reinv1.NewRunServiceClient(cc), Authenticate: node.AuthenticateHTTP, Logger: log})
	log.Info("serving the AG-UI face", "path", aguiface.Prefix)
	return map[string]http.Handler{aguiface.Prefix: face}, func() { _ = cc.Close(); _ = lis.Close() }, nil
}
