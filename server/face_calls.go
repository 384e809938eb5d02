package server

import (
	"context"
	"log/slog"
	"time"

	"buf.build/go/protovalidate"
	pvmw "github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/protovalidate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/auth"
)

// faceCalls makes RunService calls for principals that a face named by its own
// proof, such as a chat tool's signed request mapped to a principal
// (internal/slackapp), rather than by a credential of the gRPC port. Each
// call is judged as the interceptors judge one that arrives with a
// credential: the role its method needs (auth.Required), the request's
// validation, the principal's rate; then the same handler makes it.
type faceCalls struct {
	runs      *runService
	validator protovalidate.Validator
	limit     *limiter
}

// DecideApprovalAs is DecideApproval called by p, whom a face authenticated
// (see faceCalls): p needs the approver role, the run must be of p's tenant, and
// every rule of a decision applies as on the gRPC port. Errors are gRPC
// statuses.
func (n *Node) DecideApprovalAs(ctx context.Context, p auth.Principal, req *reinv1.DecideApprovalRequest) (*reinv1.DecideApprovalResponse, error) {
	return call(ctx, n, p, reinv1.RunService_DecideApproval_FullMethodName, req, n.faces.runs.DecideApproval)
}

// GetRunAs is GetRun called by p, whom a face authenticated (see faceCalls).
func (n *Node) GetRunAs(ctx context.Context, p auth.Principal, req *reinv1.GetRunRequest) (*reinv1.GetRunResponse, error) {
	return call(ctx, n, p, reinv1.RunService_GetRun_FullMethodName, req, n.faces.runs.GetRun)
}

// call judges p's call of method with req, makes it with handler, and logs
// it as the interceptors log a call.
func call[Req proto.Message, Resp any](ctx context.Context, n *Node, p auth.Principal, method string, req Req, handler func(context.Context, Req) (Resp, error)) (resp Resp, err error) {
	start := time.Now()
	defer func() {
		code := status.Code(err)
		level := slog.LevelInfo
		if code != codes.OK {
			level = slog.LevelWarn
		}
		n.log.Log(ctx, level, "finished call for a face", "grpc.method", method, "grpc.code", code.String(), "principal", p.ID,
			"run_id", runIDOf(req), "grpc.time_ms", time.Since(start).Milliseconds())
	}()
	role, err := auth.Required(method)
	if err != nil {
		return resp, status.Errorf(codes.PermissionDenied, "%s has no auth rule, so nobody may call it", method)
	}
	if !p.Has(role) {
		return resp, status.Errorf(codes.PermissionDenied, "principal %q may not call %s: it needs the %s role (or admin)", p.ID, method, role)
	}
	// The interceptors' validation and rate limit, in their order.
	out, err := pvmw.UnaryServerInterceptor(n.faces.validator)(auth.WithPrincipal(ctx, p), req, &grpc.UnaryServerInfo{FullMethod: method},
		func(ctx context.Context, req any) (any, error) {
			if err := n.faces.limit.Limit(ctx); err != nil {
				return nil, err
			}
			return handler(ctx, req.(Req))
		})
	if err != nil {
		return resp, withBadRequest(err)
	}
	return out.(Resp), nil
}
