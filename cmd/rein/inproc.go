package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/server"
)

// inProcessRuns is a RunService client for a face of the HTTP port (MCP,
// AG-UI, A2A): its calls reach node's gRPC server over an in-memory
// connection, so the node's interceptors (authentication, tenants, roles,
// validation, rate limits) judge each one, with the credentials the face
// passes on. face names it in logs; stop lets the connection go.
func inProcessRuns(node *server.Node, face string, log *slog.Logger) (runs reinv1.RunServiceClient, stop func(), err error) {
	lis := bufconn.Listen(1 << 20)
	go func() {
		if err := node.GRPC.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			log.Error("the "+face+" face's connection to the server stopped", "error", err)
		}
	}()
	cc, err := grpc.NewClient("passthrough:///rein-"+face,
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	)
	if err != nil {
		_ = lis.Close()
		return nil, nil, fmt.Errorf("the %s face: %w", face, err)
	}
	return reinv1.NewRunServiceClient(cc), func() { _ = cc.Close(); _ = lis.Close() }, nil
}
