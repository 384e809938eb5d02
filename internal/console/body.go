package console

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"strings"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/vanguard"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/reqlimit"
)

// Every RunService method takes one request message (none streams from the
// client), so the whole body is read before the call goes on, bounded in
// size (its method's limit, methodLimit) and in time; the transcoder then
// reads it from memory. What a request can make the server hold is
// therefore its body, the message decompressed (at most --max-msg-bytes),
// and, for JSON, the message decoded and transcoded, which the decoding
// budget bounds by estimate (decodeRoom); the gRPC server's codec bounds
// its own decoding of the protobuf (server/codec.go).

// envelopeBytes is the frame header of an enveloped message (Connect
// streaming, gRPC-Web, gRPC): a flag byte and a 4-byte length.
const envelopeBytes = 5

// jsonFactor is how much longer than its protobuf a request's JSON may
// be: JSON spells out field names, numbers and escapes.
const jsonFactor = 4

// decodeBudgetFactor is the decoding budget, in multiples of the largest
// request: 64 MiB at the default 4 MiB.
const decodeBudgetFactor = 16

// runMethods are RunService's methods, by name.
var runMethods = reinv1.File_rein_v1_run_service_proto.Services().ByName("RunService").Methods()

// methodLimit is the most bytes r's body may hold, by its method's limit
// (reqlimit.WireLimit, jsonFactor times it for JSON) and at most max (the
// server's), and the method's request type ("" for no RunService method,
// which the transcoder refuses).
func methodLimit(r *http.Request, max int64) (int64, protoreflect.FullName) {
	m := runMethods.ByName(protoreflect.Name(path.Base(r.URL.Path)))
	if m == nil {
		return max + envelopeBytes, ""
	}
	name := m.Input().FullName()
	limit := reqlimit.WireLimit(name, max)
	if isJSON(contentType(r)) {
		limit = min(jsonFactor*limit, max)
	}
	return limit + envelopeBytes, name
}

// isJSON says whether a content type's messages are JSON.
func isJSON(ct string) bool { return strings.HasSuffix(ct, "json") }

// readBody reads r's body into memory, at most limit bytes, within
// timeout, and gives r a body that reads from memory. A body longer than
// limit is refused as ResourceExhausted before more of it is read; one
// that does not arrive in time as DeadlineExceeded. max is the server's
// limit and name the request's type, for the refusal.
func readBody(w http.ResponseWriter, r *http.Request, limit, max int64, name protoreflect.FullName, timeout time.Duration) ([]byte, error) {
	rc := http.NewResponseController(w)
	if timeout > 0 {
		// Only the body: a watch stream's response goes on long after.
		// A connection that cannot take a deadline (a test's recorder)
		// is read without one.
		if err := rc.SetReadDeadline(time.Now().Add(timeout)); err == nil {
			defer func() { _ = rc.SetReadDeadline(time.Time{}) }()
		}
	}
	if r.ContentLength > limit {
		return nil, tooLarge(r.ContentLength, limit, max, name)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	_ = r.Body.Close()
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, tooLarge(-1, limit, max, name)
		}
		if isTimeout(err) {
			return nil, connect.NewError(connect.CodeDeadlineExceeded, fmt.Errorf("the request body did not arrive within %s; send it whole, at once", timeout))
		}
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("reading the request body: %w", err))
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	return body, nil
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// tooLarge refuses a body of n bytes (-1: more than it read) over limit,
// its method's, or max, the server's (--max-msg-bytes).
func tooLarge(n, limit, max int64, name protoreflect.FullName) error {
	if limit < max+envelopeBytes && name != "" {
		if n < 0 {
			n = limit + 1
		}
		return connect.NewError(connect.CodeResourceExhausted, errors.New(reqlimit.TooLarge(name, n, limit)))
	}
	if n >= 0 {
		return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("the request body is %d bytes, over this server's limit of %d (rein serve --max-msg-bytes)", n, limit))
	}
	return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("the request body is over this server's limit of %d bytes (rein serve --max-msg-bytes)", limit))
}

// decodeRoom takes room in the decoding budget for a JSON request of body
// as read (of type name), and returns what gives it back: its estimate,
// or the whole budget when it is compressed (what it inflates to is not
// known yet; callCodec refuses it then if it is too dear). It waits up to
// half of timeout, and refuses a request that would cost more than the
// whole budget. A protobuf request passes the transcoder as it is, and the
// gRPC server's codec bounds its decoding.
func decodeRoom(r *http.Request, body []byte, name protoreflect.FullName, budget *reqlimit.Budget, timeout time.Duration) (release func(), err error) {
	if !isJSON(contentType(r)) {
		return func() {}, nil
	}
	cost := budget.Total()
	if !compressed(r) {
		cost = reqlimit.EstimateJSON(body)
	}
	ctx := r.Context()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout/2)
		defer cancel()
	}
	release, err = budget.Acquire(ctx, cost)
	switch {
	case err == nil:
		return release, nil
	case errors.Is(err, reqlimit.ErrOverBudget):
		return nil, connect.NewError(connect.CodeResourceExhausted, errors.New(reqlimit.TooDear(name, int64(len(body)), cost, budget.Total())))
	}
	return nil, waited(err, errors.New(reqlimit.Busy(budget.Total())))
}

// checkFrames refuses an enveloped body (Connect streaming, gRPC-Web,
// gRPC) that is not exactly one message frame: a frame cut short, a length
// past the body, flags no request carries, or bytes after the frame.
// Every RunService method takes one request message.
func checkFrames(body []byte, r *http.Request) error {
	if !enveloped(contentType(r)) {
		return nil
	}
	bad := func(what string) error {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(
			"the request body is not one enveloped message (%s): send a 5-byte header (flags 0 or 1, the length, big-endian) and the message", what))
	}
	if len(body) < envelopeBytes {
		return bad(fmt.Sprintf("%d bytes, shorter than a frame header", len(body)))
	}
	if flags := body[0]; flags&^1 != 0 {
		return bad(fmt.Sprintf("flags %#x", flags))
	} else if flags&1 != 0 && !compressed(r) {
		return bad("flagged compressed with no encoding named (Grpc-Encoding or Connect-Content-Encoding)")
	}
	n := uint64(binary.BigEndian.Uint32(body[1:envelopeBytes]))
	switch rest := uint64(len(body) - envelopeBytes); {
	case n > rest:
		return bad(fmt.Sprintf("the frame says %d bytes and %d follow", n, rest))
	case n < rest:
		return bad(fmt.Sprintf("%d bytes after the frame", rest-n))
	}
	return nil
}

// enveloped says whether a content type's body is framed: all but Connect
// unary calls'.
func enveloped(ct string) bool {
	return strings.HasPrefix(ct, "application/connect+") || strings.HasPrefix(ct, "application/grpc")
}

// Decompression is bounded twice: no message inflates past the server's
// message limit, and none past maxRatio times the bytes it was inflated
// from once it passes ratioFloor (a gzip bomb is refused early, whatever
// the limit).
const (
	maxRatio   = 100
	ratioFloor = 1 << 20
)

// boundedGzip is a gzip decompressor that refuses to inflate a message
// past limit bytes, or past maxRatio times its compressed size.
type boundedGzip struct {
	limit int64
	src   countingReader
	zr    gzip.Reader
	out   int64
}

func newBoundedGzip(limit int64) func() connect.Decompressor {
	return func() connect.Decompressor { return &boundedGzip{limit: limit} }
}

func (g *boundedGzip) Reset(r io.Reader) error {
	g.src = countingReader{r: r}
	g.out = 0
	if err := g.zr.Reset(&g.src); err != nil {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("the request's gzip data is damaged: %w", err))
	}
	return nil
}

func (g *boundedGzip) Read(p []byte) (int, error) {
	n, err := g.zr.Read(p)
	g.out += int64(n)
	switch {
	case g.out > g.limit:
		return n, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("the request inflates to more than this server's limit of %d bytes (rein serve --max-msg-bytes)", g.limit))
	case g.out > ratioFloor && g.out > maxRatio*g.src.n:
		return n, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("the request inflates more than %d times its compressed size; send it uncompressed", maxRatio))
	case err != nil && !errors.Is(err, io.EOF):
		return n, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("the request's gzip data is damaged: %w", err))
	}
	return n, err
}

func (g *boundedGzip) Close() error { return g.zr.Close() }

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// callCodec is the transcoder's JSON codec, whose refusals are the
// caller's: a body that is not the method's request in JSON (cut short,
// not UTF-8, a wrong type, a key twice, nested past the limit) is
// InvalidArgument, as it is on the gRPC port, not an error of the server;
// one whose decoding would cost more than the decoding budget (total), by
// estimate, is ResourceExhausted before it is decoded.
type callCodec struct {
	*vanguard.JSONCodec
	total int64
}

func newCallCodec(res vanguard.TypeResolver, total int64) vanguard.Codec {
	return callCodec{JSONCodec: vanguard.NewJSONCodec(res), total: total}
}

func (c callCodec) Unmarshal(data []byte, msg proto.Message) error {
	name := msg.ProtoReflect().Descriptor().FullName()
	if cost := reqlimit.EstimateJSON(data); cost > c.total {
		return connect.NewError(connect.CodeResourceExhausted, errors.New(reqlimit.TooDear(name, int64(len(data)), cost, c.total)))
	}
	if err := c.JSONCodec.Unmarshal(data, msg); err != nil {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(
			"the request is not a valid %s in JSON (%v); send one JSON object, UTF-8, each field once with its type (the API reference lists them)",
			name, err))
	}
	return nil
}
