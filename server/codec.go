package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the "proto" codec wrapped here
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/reinhq/rein/internal/reqlimit"
)

// requestCodec is the server's codec: protobuf's, with two differences.
//
// It bounds what a request may cost before decoding it (docs/operating.md,
// Request limits): a request longer than its method's wire limit, or
// whose decoding would cost more, by estimate, than the whole decoding
// budget, is refused ResourceExhausted; one that fits waits (up to
// decodeWait) for room in the budget, which it holds until its handler
// returns (a stream's request: until it is decoded). Decoding
// materialises up to some fifty times the wire size (empty values), so the
// wire limit alone would let twenty 4 MiB requests hold gigabytes.
//
// And it answers a request that does not decode (garbage bytes, a string
// that is not UTF-8, nesting past protobuf's limit) InvalidArgument:
// grpc-go answers any codec error with Internal, which would call a
// caller's mistake the server's.
//
// Either way the codec leaves the message empty and notes the refusal,
// and the interceptors (undecodableUnary, undecodableStream) answer it
// after authentication, before any handler sees the request.
type requestCodec struct {
	encoding.CodecV2
	// max is the largest request the server takes (--max-msg-bytes).
	max int64
	// decoding bounds what the requests decoded and not yet answered
	// cost at once, by estimate.
	decoding *reqlimit.Budget
	// refused maps a message the codec did not fill to the status that
	// answers it; an entry lives from the decode to the interceptor that
	// takes it.
	refused sync.Map
	// held maps a decoded message to what gives its room in decoding
	// back; an entry lives from the decode to the interceptor that takes
	// it.
	held sync.Map
	// wait bounds how long a request waits for room in decoding before
	// it is refused: decodeWait.
	wait time.Duration
}

// decodeBudgetFactor is the decoding budget, in multiples of the largest
// request: 64 MiB at the default 4 MiB.
const decodeBudgetFactor = 16

// decodeWait bounds how long a request waits for room in the decoding
// budget before it is refused.
const decodeWait = 10 * time.Second

func newRequestCodec(maxRecvBytes int) *requestCodec {
	max := int64(maxRecvBytes)
	return &requestCodec{CodecV2: encoding.GetCodecV2("proto"), max: max, decoding: reqlimit.NewBudget(decodeBudgetFactor * max), wait: decodeWait}
}

func (c *requestCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return c.CodecV2.Unmarshal(data, v)
	}
	md := m.ProtoReflect().Descriptor()
	n := int64(data.Len())
	if limit := reqlimit.WireLimit(md.FullName(), c.max); n > limit {
		c.refused.Store(m, status.Error(codes.ResourceExhausted, reqlimit.TooLarge(md.FullName(), n, limit)))
		return nil
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	cost := reqlimit.Estimate(md, buf.ReadOnlyData())
	ctx, cancel := context.WithTimeout(context.Background(), c.wait)
	defer cancel()
	release, err := c.decoding.Acquire(ctx, cost)
	switch {
	case errors.Is(err, reqlimit.ErrOverBudget):
		c.refused.Store(m, status.Error(codes.ResourceExhausted, reqlimit.TooDear(md.FullName(), n, cost, c.decoding.Total())))
		return nil
	case err != nil:
		c.refused.Store(m, status.Error(codes.ResourceExhausted, reqlimit.Busy(c.decoding.Total())))
		return nil
	}
	if err := c.CodecV2.Unmarshal(mem.BufferSlice{buf}, v); err != nil {
		release()
		proto.Reset(m)
		c.refused.Store(m, undecodableError(m, err))
		return nil
	}
	c.held.Store(m, release)
	return nil
}

// take returns the status that answers m, if the codec refused it, and
// forgets it.
func (c *requestCodec) take(m any) error {
	if e, ok := c.refused.LoadAndDelete(m); ok {
		return e.(error)
	}
	return nil
}

// release gives m's room in the decoding budget back, if it holds any.
func (c *requestCodec) release(m any) {
	if r, ok := c.held.LoadAndDelete(m); ok {
		r.(func())()
	}
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

// holdUnary is the first unary interceptor: it gives the request's room
// in the decoding budget back once the call is answered, and takes the
// codec's refusal of it (so none is left behind, whatever the chain
// answers) into the context, for undecodableUnary to answer once the
// caller is known.
func (c *requestCodec) holdUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	defer c.release(req)
	if err := c.take(req); err != nil {
		ctx = context.WithValue(ctx, undecodableKey{}, err)
	}
	return h(ctx, req)
}

// undecodableUnary answers a request the codec refused. It runs after
// authentication, so a caller without credentials learns nothing of the
// request's form.
func undecodableUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err, ok := ctx.Value(undecodableKey{}).(error); ok {
		return nil, err
	}
	return h(ctx, req)
}

// undecodableStream answers a stream's request the codec refused: its
// RecvMsg returns the refusal to the handler. A stream's request gives its
// room in the decoding budget back once decoded: a watch lives long, and
// its request is small.
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
	s.codec.release(m)
	return s.codec.take(m)
}
