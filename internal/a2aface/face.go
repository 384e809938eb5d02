// Package a2aface is rein's face for other agents speaking A2A (the
// Agent2Agent protocol, v1.0; docs/a2a.md): an agent card with a skill
// per catalog task, and the JSON-RPC and HTTP+JSON bindings, on which a
// message starts a run of a skill, a reply answers its question or
// decides its proposal, and a stream follows it.
//
// The face decides nothing: it calls RunService (StartRun, GetRun,
// WatchRun, CancelRun, ProvideInput, DecideApproval, RaiseBudget, ListTasks)
// through a client the caller gives (in rein serve, an in-process
// connection to the node's own gRPC server, so that the same interceptors
// judge each call) with the request's credentials, and translates what
// the API answers. What the API refuses is an A2A error, and nothing
// changes.
//
// It uses the official Go SDK's transports (a2asrv's JSON-RPC and REST
// handlers) and types over a RequestHandler of its own rather than the
// SDK's default handler with an AgentExecutor and a TaskStore: that
// handler keeps its own task store as the record and runs the executor
// in the process that took the message, while a run's record is rein's
// store and it runs on whichever node holds it; and the default
// handler's resubscription gives the task as it stands and what happens
// next, where rein gives every update after a sequence, none twice, from
// its watch.
//
// The A2A task ID is the run ID. The context ID travels in the run's
// request ID ("a2a:LEN:CONTEXT:MESSAGE"), so that a message sent twice
// starts one run, and a run read back names its conversation. Every
// update carries, in its metadata under "rein.sequence", the sequence of
// the run's event it comes from.
package a2aface

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// Paths the face serves.
const (
	// CardPath is the agent card's well-known path.
	CardPath = "/.well-known/agent-card.json"
	// RPCPath is the JSON-RPC binding's endpoint.
	RPCPath = "/a2a"
	// RESTPath is the prefix of the HTTP+JSON binding.
	RESTPath = "/a2a/rest/"
)

// Metadata keys the face reads and writes.
const (
	// SkillKey names the skill a message starts (message or request
	// metadata).
	SkillKey = "skill"
	// SequenceKey is the sequence of the run's event an update comes
	// from, in the update's metadata; a Task's carries the sequence it
	// reflects.
	SequenceKey = "rein.sequence"
	// AfterHeader is the service parameter (an HTTP header) a
	// resubscription gives its last seen sequence in: the stream then
	// carries every update after it. A2A v1.0's SubscribeToTask request
	// has no metadata to carry it.
	AfterHeader = "Rein-After-Sequence"
)

// Options configure the face.
type Options struct {
	// Runs is the RunService every call goes through; required.
	Runs reinv1.RunServiceClient
	// Authenticate names the caller of a request from its headers and
	// connection (rein serve: the node's AuthenticateHTTP), so that a
	// caller without credentials is refused 401 before its body is read;
	// a refusal is a gRPC status. Nil leaves it to RunService.
	Authenticate func(*http.Request) error
	// PublicTasks are the tasks the public agent card lists as skills:
	// those every principal may start. An authenticated client reads its
	// own in the extended card. Nil lists none.
	PublicTasks func() []*reinv1.Task
	// Bearer says the card should declare bearer tokens as the security
	// scheme (rein serve --tokens).
	Bearer bool
	// MaxBodyBytes bounds a request's body; 0 means 4 MiB.
	MaxBodyBytes int64
	// Wait bounds how long message/send follows a run before it answers
	// with the task as it stands; 0 means 60s.
	Wait time.Duration
	// WriteTimeout bounds how long one write (or flush) to a client may
	// block; a stream whose client stops reading ends when a write
	// blocks longer. 0 means 10s.
	WriteTimeout time.Duration
	// Version is rein's version, for the card.
	Version string
	// Logger logs what the face could not do; nil logs nothing.
	Logger *slog.Logger
}

// Face serves A2A over HTTP.
type Face struct {
	opts Options
}

var _ a2asrv.RequestHandler = (*handler)(nil)

// New returns the face over opts.Runs.
func New(opts Options) *Face {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 4 << 20
	}
	if opts.Wait <= 0 {
		opts.Wait = 60 * time.Second
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.PublicTasks == nil {
		opts.PublicTasks = func() []*reinv1.Task { return nil }
	}
	return &Face{opts: opts}
}

// Mounts are the face's handlers by path, for the console's mux: the card
// at CardPath, JSON-RPC at RPCPath, HTTP+JSON under RESTPath.
func (f *Face) Mounts() map[string]http.Handler { return f.mounts(&handler{face: f}) }

// mounts are the face's handlers over the request handler h.
func (f *Face) mounts(h a2asrv.RequestHandler) map[string]http.Handler {
	panics := a2asrv.WithTransportPanicHandler(func(r any) error {
		f.opts.Logger.Error("the A2A face failed on a request", "panic", r)
		return a2a.NewError(a2a.ErrInternalError, "the server failed on this request; it is logged")
	})
	keepAlive := a2asrv.WithTransportKeepAlive(15 * time.Second)
	rest := http.StripPrefix(RESTPath[:len(RESTPath)-1], a2asrv.NewRESTHandler(h, panics, keepAlive))
	return map[string]http.Handler{
		CardPath: http.HandlerFunc(f.serveCard),
		RPCPath:  f.guard(a2asrv.NewJSONRPCHandler(h, panics, keepAlive), true),
		RESTPath: f.guard(rest, false),
	}
}

type (
	authKey struct{}
	baseKey struct{}
)

// guard authenticates a request before its body is read, bounds its body,
// and keeps its credentials in its context for the calls it makes.
func (f *Face) guard(next http.Handler, jsonrpc bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f.opts.Authenticate != nil {
			if err := f.opts.Authenticate(r); err != nil {
				refuseHTTP(w, err, jsonrpc)
				return
			}
		}
		w = &deadlineWriter{ResponseWriter: w, rc: http.NewResponseController(w), timeout: f.opts.WriteTimeout}
		r.Body = http.MaxBytesReader(w, r.Body, f.opts.MaxBodyBytes)
		r = r.WithContext(context.WithValue(r.Context(), baseKey{}, baseURL(r)))
		if a := r.Header.Values("Authorization"); len(a) > 0 {
			r = r.WithContext(context.WithValue(r.Context(), authKey{}, a))
		}
		next.ServeHTTP(w, r)
	})
}

// deadlineWriter is a response whose every write and flush must finish
// within timeout. The SDK's transports write a stream's events through
// it: a client that stops reading makes a write block, its deadline
// fails it, and the SDK ends the stream (and the request's context,
// which stops following the run). Once a write has failed, every later
// one fails at once.
type deadlineWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	err     error
}

func (w *deadlineWriter) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	// Not every writer has a deadline to set (a test's recorder); the
	// write then blocks as the writer does.
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.timeout))
	n, err := w.ResponseWriter.Write(p)
	w.err = err
	return n, err
}

// Flush is http.Flusher's, which the SDK's stream writer needs; a flush
// that fails fails the next Write.
func (w *deadlineWriter) Flush() {
	if w.err != nil {
		return
	}
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.timeout))
	w.err = w.rc.Flush()
}

// Unwrap is the writer underneath, for http.ResponseController.
func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// baseURL is the scheme and host a request reached the face by (the
// console's guard has checked the host).
func baseURL(r *http.Request) string {
	if r.TLS != nil {
		return "https://" + r.Host
	}
	return "http://" + r.Host
}

// out is ctx carrying the request's credentials to RunService.
func out(ctx context.Context) context.Context {
	if a, ok := ctx.Value(authKey{}).([]string); ok {
		return metadata.NewOutgoingContext(ctx, metadata.MD{"authorization": a})
	}
	return ctx
}

// refuseHTTP answers a refused caller: 401 or 403, with a JSON-RPC error
// body on the JSON-RPC binding.
func refuseHTTP(w http.ResponseWriter, err error, jsonrpc bool) {
	st := status.Convert(err)
	code, rpcCode := http.StatusForbidden, -31403
	if st.Code() == codes.Unauthenticated {
		w.Header().Set("WWW-Authenticate", `Bearer realm="rein"`)
		code, rpcCode = http.StatusUnauthorized, -31401
	}
	if !jsonrpc {
		http.Error(w, st.Message(), code)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": nil, "error": map[string]any{"code": rpcCode, "message": st.Message()}})
}

// fromStatus is an API refusal as an A2A error.
func fromStatus(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return a2a.NewError(a2a.ErrInternalError, err.Error())
	}
	var kind error
	switch st.Code() {
	case codes.NotFound:
		kind = a2a.ErrTaskNotFound
	case codes.InvalidArgument, codes.OutOfRange, codes.FailedPrecondition, codes.Aborted, codes.AlreadyExists:
		kind = a2a.ErrInvalidParams
	case codes.Unauthenticated:
		kind = a2a.ErrUnauthenticated
	case codes.PermissionDenied:
		kind = a2a.ErrUnauthorized
	default:
		kind = a2a.ErrInternalError
	}
	return a2a.NewError(kind, st.Message())
}

func invalid(msg string) error { return a2a.NewError(a2a.ErrInvalidParams, msg) }
