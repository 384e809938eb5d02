package server

import (
	"context"
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the "proto" codec wrapped here
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// requestCodec is the server's codec: protobuf's, except for a request that
// does not decode (garbage bytes, a string that is not UTF-8, nesting past
// protobuf's limit). grpc-go answers any codec error with Internal, which
// would call a caller's mistake the server's; so requestCodec leaves such a
// message empty, notes why it did not decode, and the interceptors
// (undecodableUnary, undecodableStream) answer InvalidArgument before any
// handler sees it.
type requestCodec struct {
	encoding.CodecV2
	// undecodable maps a message the codec could not fill to why; an entry
	// lives from the decode to the interceptor that takes it.
	undecodable sync.Map
}

func newRequestCodec() *requestCodec {
	return &requestCodec{CodecV2: encoding.GetCodecV2("proto")}
}

func (c *requestCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.CodecV2.Unmarshal(data, v)
	m, ok := v.(proto.Message)
	if err == nil || !ok {
		return err
	}
	proto.Reset(m)
	c.undecodable.Store(m, err)
	return nil
}

// take returns why m did not decode, or nil, and forgets it.
func (c *requestCodec) take(m any) error {
	if e, ok := c.undecodable.LoadAndDelete(m); ok {
		return e.(error)
	}
	return nil
}

// undecodableError is the answer to a request that did not decode.
func undecodableError(m any, err error) error {
	name := "the request"
	if pm, ok := m.(proto.Message); ok {
		name = string(pm.ProtoReflect().Descriptor().FullName())
	}
	return status.Error(codes.InvalidArgument, fmt.Sprintf(
		"the request is not a valid %s message (%v); send it encoded by protobuf, with every string valid UTF-8", name, err))
}

type undecodableKey struct{}

// takeUndecodable is the first unary interceptor: it takes the request's
// decode error (so none is left behind, whatever the chain answers) into
// the context, for undecodableUnary to answer once the caller is known.
func (c *requestCodec) takeUndecodable(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := c.take(req); err != nil {
		ctx = context.WithValue(ctx, undecodableKey{}, err)
	}
	return h(ctx, req)
}

// undecodableUnary answers InvalidArgument for a request that did not
// decode. It runs after authentication, so a caller without credentials
// learns nothing of the request's form.
func undecodableUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err, ok := ctx.Value(undecodableKey{}).(error); ok {
		return nil, undecodableError(req, err)
	}
	return h(ctx, req)
}

// undecodableStream answers InvalidArgument when a stream's request did
// not decode: its RecvMsg returns the error to the handler.
func (c *requestCodec) undecodableStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	return h(srv, &decodedStream{ServerStream: ss, codec: c})
}

type decodedStream struct {
	grpc.ServerStream
	codec *requestCodec
}

func (s *decodedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if err := s.codec.take(m); err != nil {
		return undecodableError(m, err)
	}
	return nil
}
