package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"buf.build/go/protovalidate"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	pvmw "github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/protovalidate"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"golang.org/x/time/rate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	reinauth "github.com/reinhq/rein/internal/auth"
)

// callInfo is filled in as a call passes the chain (the principal by auth,
// the run by the request) and read by the log line at the end of the call.
type callInfo struct {
	mu        sync.Mutex
	principal string
	runID     string
}

type callInfoKey struct{}

func (c *callInfo) set(f func(*callInfo)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(c)
}

func callInfoFrom(ctx context.Context) *callInfo {
	c, _ := ctx.Value(callInfoKey{}).(*callInfo)
	if c == nil {
		return &callInfo{}
	}
	return c
}

// runIDOf is the run a request names, if any.
func runIDOf(req any) string {
	if r, ok := req.(interface{ GetRunId() string }); ok {
		return r.GetRunId()
	}
	return ""
}

// chain builds the interceptors, outermost first: call info, logging (so a
// panicking call is logged with its code too), recovery, auth, validation,
// rate limit.
func chain(log *slog.Logger, a *authenticator, validator protovalidate.Validator, limit *limiter, codec *requestCodec) []grpc.ServerOption {
	logOpts := []logging.Option{
		logging.WithLogOnEvents(logging.FinishCall),
		logging.WithFieldsFromContext(func(ctx context.Context) logging.Fields {
			c := callInfoFrom(ctx)
			c.mu.Lock()
			defer c.mu.Unlock()
			return logging.Fields{"principal", c.principal, "run_id", c.runID}
		}),
	}
	logger := logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		log.Log(ctx, slog.Level(lvl), msg, fields...)
	})
	recoverer := recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		log.ErrorContext(ctx, "panic in a handler", "panic", fmt.Sprint(p))
		return status.Error(codes.Internal, "internal error; the server log has the details")
	})
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(codec),
		grpc.ChainUnaryInterceptor(
			codec.holdUnary,
			func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				return h(context.WithValue(ctx, callInfoKey{}, &callInfo{runID: runIDOf(req)}), req)
			},
			logging.UnaryServerInterceptor(logger, logOpts...),
			recovery.UnaryServerInterceptor(recoverer),
			auth.UnaryServerInterceptor(a.authenticate),
			undecodableUnary,
			func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				resp, err := pvmw.UnaryServerInterceptor(validator)(ctx, req, info, h)
				return resp, withBadRequest(err)
			},
			limit.unary,
		),
		grpc.ChainStreamInterceptor(
			func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
				info := &callInfo{}
				return h(srv, &infoStream{ServerStream: ss, ctx: context.WithValue(ss.Context(), callInfoKey{}, info), info: info})
			},
			logging.StreamServerInterceptor(logger, logOpts...),
			recovery.StreamServerInterceptor(recoverer),
			auth.StreamServerInterceptor(a.authenticate),
			codec.undecodableStream,
			func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
				// The middleware validates in its stream's RecvMsg; wrap that
				// stream so its errors gain the BadRequest detail.
				return pvmw.StreamServerInterceptor(validator)(srv, ss, info, func(srv any, validated grpc.ServerStream) error {
					return h(srv, &badRequestStream{validated})
				})
			},
			limit.stream,
		),
	}
}

// infoStream carries the call info in its context and records the run a
// streaming request names.
type infoStream struct {
	grpc.ServerStream
	ctx  context.Context
	info *callInfo
}

func (s *infoStream) Context() context.Context { return s.ctx }

func (s *infoStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil {
		if id := runIDOf(m); id != "" {
			s.info.set(func(c *callInfo) { c.runID = id })
		}
	}
	return err
}

// badRequestStream adds a BadRequest detail to validation errors of a
// stream's request.
type badRequestStream struct{ grpc.ServerStream }

func (s *badRequestStream) RecvMsg(m any) error { return withBadRequest(s.ServerStream.RecvMsg(m)) }

// withBadRequest adds a google.rpc.BadRequest detail, naming each field, to
// an InvalidArgument that carries protovalidate's violations (docs/design.md §10).
func withBadRequest(err error) error {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.InvalidArgument {
		return err
	}
	var br errdetails.BadRequest
	for _, d := range st.Details() {
		if vs, ok := d.(*validate.Violations); ok {
			for _, v := range vs.GetViolations() {
				br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{
					Field: protovalidate.FieldPathString(v.GetField()), Description: v.GetMessage(),
				})
			}
		}
	}
	if len(br.FieldViolations) == 0 {
		return err
	}
	if with, e := st.WithDetails(&br); e == nil {
		return with.Err()
	}
	return err
}

// newValidator is the validator of requests' protovalidate rules.
func newValidator() protovalidate.Validator {
	v, err := protovalidate.New()
	if err != nil {
		panic(fmt.Sprintf("server: protovalidate: %v", err))
	}
	return v
}

// authenticator maps a call's credentials to a principal and checks the
// role its method needs.
type authenticator struct {
	// dir is nil when the server runs without a tokens file: then it
	// accepts only local callers, as the local admin.
	dir *reinauth.Directory
}

// LocalPrincipal is the caller of a server without a tokens file: the
// admin "local" of tenant "default". Each call returns a fresh value, so
// what a caller does with it never changes the server's.
func LocalPrincipal() reinauth.Principal {
	return reinauth.Principal{ID: "local", Tenant: "default", Roles: []reinauth.Role{reinauth.Admin}}
}

func (a *authenticator) authenticate(ctx context.Context) (context.Context, error) {
	method, _ := grpc.Method(ctx)
	if reinauth.Public[method] {
		return ctx, nil
	}
	role, err := reinauth.Required(method)
	if err != nil {
		return nil, status.Errorf(codes.PermissionDenied, "%s has no auth rule, so nobody may call it", method)
	}
	p, err := a.identify(ctx)
	if err != nil {
		return nil, err
	}
	// Known before the role check, so that the log line of a call the role
	// refuses names whom it refused.
	callInfoFrom(ctx).set(func(c *callInfo) { c.principal = p.ID })
	if !p.Has(role) {
		return nil, status.Errorf(codes.PermissionDenied, "principal %q may not call %s: it needs the %s role (or admin)", p.ID, method, role)
	}
	return reinauth.WithPrincipal(ctx, p), nil
}

func (a *authenticator) identify(ctx context.Context) (reinauth.Principal, error) {
	vals := metadata.ValueFromIncomingContext(ctx, "authorization")
	if len(vals) > 1 {
		// Which one would be the caller is the client's guess, not the
		// server's: refused, whatever the tokens.
		return reinauth.Principal{}, status.Errorf(codes.Unauthenticated,
			"the call has %d authorization headers: send one (authorization: Bearer TOKEN)", len(vals))
	}
	if a.dir == nil {
		if pr, ok := peer.FromContext(ctx); ok && !isLocal(pr.Addr) {
			return reinauth.Principal{}, status.Errorf(codes.Unauthenticated,
				"this server runs without --tokens and accepts only local callers; %s is not local", pr.Addr)
		}
		return LocalPrincipal(), nil
	}
	if len(vals) == 1 {
		token, ok := strings.CutPrefix(vals[0], "Bearer ")
		if !ok {
			return reinauth.Principal{}, status.Error(codes.Unauthenticated, `the authorization header must be "Bearer TOKEN"`)
		}
		p, ok := a.dir.Token(strings.TrimSpace(token))
		if !ok {
			return reinauth.Principal{}, status.Error(codes.Unauthenticated, "the bearer token is not known to this server; check the authorization header (the CLI: --token or REIN_TOKEN)")
		}
		return p, nil
	}
	if pr, ok := peer.FromContext(ctx); ok {
		if ti, ok := pr.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.VerifiedChains) > 0 && len(ti.State.VerifiedChains[0]) > 0 {
			cn := ti.State.VerifiedChains[0][0].Subject.CommonName
			if p, ok := a.dir.Cert(cn); ok {
				return p, nil
			}
			return reinauth.Principal{}, status.Errorf(codes.Unauthenticated, "client certificate %q is not mapped to a principal in the tokens file", cn)
		}
	}
	return reinauth.Principal{}, status.Error(codes.Unauthenticated,
		"no credentials: pass --token or set REIN_TOKEN (header authorization: Bearer TOKEN), or a client certificate")
}

// isLocal reports whether a peer is on this machine: loopback TCP, a Unix
// socket, or the CLI's in-memory connection.
func isLocal(addr net.Addr) bool {
	if addr == nil {
		return true
	}
	switch a := addr.(type) {
	case *net.TCPAddr:
		return a.IP.IsLoopback()
	case *net.UnixAddr:
		return true
	}
	if addr.Network() == "bufconn" {
		return true
	}
	// A call that came over HTTP (rein serve --http, through the web
	// console's transcoder) names its peer by the request's remote address.
	if host, _, err := net.SplitHostPort(addr.String()); err == nil && addr.Network() == "tcp" {
		ip := net.ParseIP(host)
		return ip != nil && ip.IsLoopback()
	}
	return false
}

// The default rate limit of `rein serve`, per principal. A service that
// calls rein makes a handful of calls per run (StartRun, a WatchRun stream
// that counts once however long it lasts, a GetRun, a decision or an
// answer): 500 calls/s carries a service starting about a hundred runs a
// second, and a burst of 1000 lets it start a few hundred at once, each with
// its watch and its read, without a refusal. What stays over it gets
// ResourceExhausted with a RetryInfo saying when to try again.
const (
	DefaultRatePerSecond = 500
	DefaultRateBurst     = 1000
)

// limiter is a token bucket per principal.
type limiter struct {
	rate  rate.Limit
	burst int
	// mu guards buckets.
	mu      sync.Mutex
	buckets map[string]*rate.Limiter
}

func newLimiter(perSecond float64, burst int) *limiter {
	return &limiter{rate: rate.Limit(perSecond), burst: burst, buckets: map[string]*rate.Limiter{}}
}

// unary refuses a call over the caller's rate, before its handler runs.
func (l *limiter) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := l.Limit(ctx); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

// stream refuses a stream over the caller's rate: opening it is one call,
// however long it then lasts.
func (l *limiter) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := l.Limit(ss.Context()); err != nil {
		return err
	}
	return h(srv, ss)
}

// Limit refuses a call over the caller's rate. A refusal carries the wait after which
// the principal's bucket holds a call again (google.rpc.RetryInfo).
func (l *limiter) Limit(ctx context.Context) error {
	if l.rate <= 0 {
		return nil
	}
	p, ok := reinauth.FromContext(ctx)
	if !ok {
		return nil // public methods
	}
	l.mu.Lock()
	key := p.Tenant + "/" + p.ID
	b := l.buckets[key]
	if b == nil {
		b = rate.NewLimiter(l.rate, l.burst)
		l.buckets[key] = b
	}
	l.mu.Unlock()
	now := time.Now()
	r := b.ReserveN(now, 1)
	if !r.OK() {
		// A bucket of burst 0 never holds a call.
		return exhausted(fmt.Sprintf("principal %q may make no calls: the server's --burst is %d", p.ID, l.burst), noBurstDelay)
	}
	delay := r.DelayFrom(now)
	if delay == 0 {
		return nil
	}
	r.CancelAt(now) // refused: the call takes no token
	return exhausted(fmt.Sprintf("principal %q is over its rate limit of %g calls/s; retry after %s (RetryInfo)", p.ID, float64(l.rate), delay.Round(time.Millisecond)), delay)
}

// noBurstDelay is the RetryInfo of a refusal that waiting cannot lift.
const noBurstDelay = time.Minute

// exhausted is ResourceExhausted with a google.rpc.RetryInfo saying how long
// to wait before trying again: every ResourceExhausted rein sends carries
// one.
func exhausted(msg string, retryAfter time.Duration) error {
	st := status.New(codes.ResourceExhausted, msg)
	if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(retryAfter)}); err == nil {
		st = d
	}
	return st.Err()
}
