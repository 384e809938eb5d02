// Package aguiface is rein's face for web pages speaking AG-UI (the
// Agent-User Interaction protocol, docs/agui.md): a run streamed as AG-UI
// events over server-sent events, resumable from any event, and a catalog
// task started from AG-UI's RunAgentInput and streamed the same way.
//
// The face decides nothing: it calls RunService (GetRun, WatchRun,
// StartRun) through a client the caller gives (in rein serve, an
// in-process connection to the node's own gRPC server, so that the same
// interceptors judge each call) with the request's credentials, and
// translates what the API answers. What the API refuses is an HTTP error,
// and nothing changes.
//
// Every SSE message after a stream's opening carries, as its id, the
// sequence of the run's event it comes from ("N" on the last message of
// event N, "N:K" on the K-th before it), so that a client that comes back
// with Last-Event-ID gets every message after it once. The translation of
// an event depends only on the events before it, which is what makes the
// messages of one sequence the same on every stream.
package aguiface

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// Paths the face serves: a run by ID under RunsPath, a task by name
// under TasksPath.
const (
	Prefix    = "/agui/"
	RunsPath  = "/agui/runs/"
	TasksPath = "/agui/tasks/"
)

// Options configure the face.
type Options struct {
	// Runs is the RunService every call goes through; required.
	Runs reinv1.RunServiceClient
	// Authenticate names the caller of a request from its headers and
	// connection (rein serve: the node's AuthenticateHTTP), so that a
	// caller without credentials is refused 401 before any call; a
	// refusal is a gRPC status. Nil leaves it to RunService's
	// interceptors.
	Authenticate func(*http.Request) error
	// WriteTimeout bounds how long one write to a client may block; a
	// client that reads slower loses its stream (it resumes with
	// Last-Event-ID). 0 means 10s.
	WriteTimeout time.Duration
	// Heartbeat is how often a quiet stream (a paused run) sends an SSE
	// comment, so that proxies keep it open; 0 means 15s.
	Heartbeat time.Duration
	// Logger logs streams that ended on an error; nil logs nothing.
	Logger *slog.Logger
}

// Face serves AG-UI over HTTP.
type Face struct {
	opts Options
}

// New returns the face over opts.Runs.
func New(opts Options) *Face {
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = 10 * time.Second
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = 15 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Face{opts: opts}
}

// ServeHTTP serves GET RunsPath+ID and POST TasksPath+NAME.
func (f *Face) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if f.opts.Authenticate != nil {
		if err := f.opts.Authenticate(r); err != nil {
			refuse(w, err)
			return
		}
	}
	switch {
	case strings.HasPrefix(r.URL.Path, RunsPath):
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", "GET")
			http.Error(w, "a run is streamed with GET", http.StatusMethodNotAllowed)
			return
		}
		f.serveRun(w, r, strings.TrimPrefix(r.URL.Path, RunsPath))
	case strings.HasPrefix(r.URL.Path, TasksPath):
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			http.Error(w, "a task is started with POST and AG-UI's RunAgentInput as the body", http.StatusMethodNotAllowed)
			return
		}
		f.serveTask(w, r, strings.TrimPrefix(r.URL.Path, TasksPath))
	default:
		http.Error(w, "no such AG-UI resource: GET "+RunsPath+"RUN_ID or POST "+TasksPath+"TASK", http.StatusNotFound)
	}
}

// serveRun streams a run from the point ?after or Last-Event-ID names.
func (f *Face) serveRun(w http.ResponseWriter, r *http.Request, runID string) {
	if runID == "" || strings.Contains(runID, "/") {
		http.Error(w, "name one run: GET "+RunsPath+"RUN_ID", http.StatusNotFound)
		return
	}
	at, err := resumePoint(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.stream(w, r, runID, runID, at)
}

// point is where a stream resumes: after the events up to after, and
// past the first skip messages of the event that follows.
type point struct {
	after uint64
	skip  int
}

// resumePoint reads Last-Event-ID (an EventSource's reconnect sends it,
// and it wins over the URL's ?after, which the reconnect repeats) or
// ?after.
func resumePoint(r *http.Request) (point, error) {
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		seq, k, found := strings.Cut(id, ":")
		n, err := strconv.ParseUint(seq, 10, 64)
		if err != nil {
			return point{}, errors.New("Last-Event-ID " + strconv.Quote(id) + " is not an id this face sent: want N or N:K, from a message's id")
		}
		if !found {
			return point{after: n}, nil
		}
		skip, err := strconv.Atoi(k)
		if err != nil || skip < 1 || n < 1 {
			return point{}, errors.New("Last-Event-ID " + strconv.Quote(id) + " is not an id this face sent: want N or N:K, from a message's id")
		}
		return point{after: n - 1, skip: skip}, nil
	}
	v := r.URL.Query()
	if !v.Has("after") {
		return point{}, nil
	}
	n, err := strconv.ParseUint(v.Get("after"), 10, 64)
	if err != nil {
		return point{}, errors.New("after " + strconv.Quote(v.Get("after")) + " is not a sequence: give the id of the last message seen (a whole number, 0 for the start)")
	}
	return point{after: n}, nil
}

// out is ctx carrying the request's credentials to RunService.
func out(ctx context.Context, r *http.Request) context.Context {
	if a := r.Header.Values("Authorization"); len(a) > 0 {
		return metadata.NewOutgoingContext(ctx, metadata.MD{"authorization": a})
	}
	return ctx
}

// refuse answers an API refusal as its HTTP status.
func refuse(w http.ResponseWriter, err error) {
	st := status.Convert(err)
	code := http.StatusInternalServerError
	switch st.Code() {
	case codes.InvalidArgument, codes.OutOfRange, codes.FailedPrecondition:
		code = http.StatusBadRequest
	case codes.Unauthenticated:
		w.Header().Set("WWW-Authenticate", `Bearer realm="rein"`)
		code = http.StatusUnauthorized
	case codes.PermissionDenied:
		code = http.StatusForbidden
	case codes.NotFound:
		code = http.StatusNotFound
	case codes.AlreadyExists, codes.Aborted:
		code = http.StatusConflict
	case codes.ResourceExhausted:
		code = http.StatusTooManyRequests
	case codes.Unavailable:
		code = http.StatusServiceUnavailable
	case codes.DeadlineExceeded, codes.Canceled:
		code = http.StatusGatewayTimeout
	}
	http.Error(w, st.Message(), code)
}
