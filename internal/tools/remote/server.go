package remote

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"buf.build/go/protovalidate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/tools"
)

// Server serves a tools.Executor as a ToolService. Each handler validates
// its request against the proto's rules, makes one executor call and maps
// its error (toStatus); the executor owns every rule about its tools,
// idempotency of Commit included.
type Server struct {
	reinv1.UnsafeToolServiceServer
	exec tools.Executor
}

var _ reinv1.ToolServiceServer = (*Server)(nil)

// NewServer returns a ToolService over exec. LookupWrite asks exec's
// tools.Looker, and answers Unimplemented when exec has none.
func NewServer(exec tools.Executor) *Server {
	return &Server{exec: exec}
}

// ListTools implements reinv1.ToolServiceServer.
func (s *Server) ListTools(ctx context.Context, _ *reinv1.ListToolsRequest) (*reinv1.ListToolsResponse, error) {
	specs, err := s.exec.List(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &reinv1.ListToolsResponse{Tools: make([]*reinv1.ToolSpec, len(specs))}
	for i, sp := range specs {
		resp.Tools[i] = &reinv1.ToolSpec{Name: sp.Name, Description: sp.Description, InputSchema: sp.InputSchema, Tier: sp.Tier}
	}
	return resp, nil
}

// Read implements reinv1.ToolServiceServer.
func (s *Server) Read(ctx context.Context, req *reinv1.ReadRequest) (*reinv1.ReadResponse, error) {
	if err := validate(req); err != nil {
		return nil, err
	}
	out, err := s.exec.Read(ctx, fromWire(req.GetCall()))
	if err != nil {
		return nil, toStatus(err)
	}
	return &reinv1.ReadResponse{Output: out}, nil
}

// ProposeWrite implements reinv1.ToolServiceServer.
func (s *Server) ProposeWrite(ctx context.Context, req *reinv1.ProposeWriteRequest) (*reinv1.ProposeWriteResponse, error) {
	if err := validate(req); err != nil {
		return nil, err
	}
	preview, err := s.exec.Propose(ctx, fromWire(req.GetCall()))
	if err != nil {
		return nil, toStatus(err)
	}
	return &reinv1.ProposeWriteResponse{Preview: preview}, nil
}

// CommitWrite implements reinv1.ToolServiceServer.
func (s *Server) CommitWrite(ctx context.Context, req *reinv1.CommitWriteRequest) (*reinv1.CommitWriteResponse, error) {
	if err := validate(req); err != nil {
		return nil, err
	}
	call := fromWire(req.GetCall())
	call.Preview = req.GetPreview()
	receipt, err := s.exec.Commit(ctx, call, req.GetOperationId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &reinv1.CommitWriteResponse{Receipt: receipt}, nil
}

// LookupWrite implements reinv1.ToolServiceServer.
func (s *Server) LookupWrite(ctx context.Context, req *reinv1.LookupWriteRequest) (*reinv1.LookupWriteResponse, error) {
	if err := validate(req); err != nil {
		return nil, err
	}
	l, ok := s.exec.(tools.Looker)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "this tool service cannot look writes up; check the system of record for the operation")
	}
	receipt, applied, err := l.Lookup(ctx, fromWire(req.GetCall()), req.GetOperationId())
	if err != nil {
		return nil, toStatus(err)
	}
	if !applied {
		return &reinv1.LookupWriteResponse{}, nil
	}
	return &reinv1.LookupWriteResponse{Applied: true, Receipt: receipt}, nil
}

// validate checks req against the rules of tool_service.proto: a refused
// request is InvalidArgument naming each field (with a google.rpc.BadRequest
// detail), and never reaches the executor.
func validate(req proto.Message) error {
	err := protovalidate.Validate(req)
	if err == nil {
		return nil
	}
	var ve *protovalidate.ValidationError
	if !errors.As(err, &ve) {
		return status.Errorf(codes.Internal, "validate the request: %v", err)
	}
	var (
		br   errdetails.BadRequest
		msgs []string
	)
	for _, v := range ve.Violations {
		field := protovalidate.FieldPathString(v.Proto.GetField())
		br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{
			Field: field, Description: v.Proto.GetMessage(),
		})
		msgs = append(msgs, fmt.Sprintf("%s: %s", field, v.Proto.GetMessage()))
	}
	st := status.New(codes.InvalidArgument, strings.Join(msgs, "; "))
	if d, derr := st.WithDetails(&br); derr == nil {
		st = d
	}
	return st.Err()
}
