// Package console serves rein's web console on one HTTP listener: the built
// front end, embedded from dist/ (made from web/ by esbuild and committed,
// so a build needs Go alone), and RunService for browsers.
//
// The browser speaks Connect (or gRPC-Web); vanguard transcodes each call
// into a gRPC call on the node's own grpc.Server, so the same interceptors
// (authentication, tenants, roles, validation, rate limits, logging) judge
// it as they judge any other client's. There is no second API.
//
// Every response carries a Content-Security-Policy that allows only the
// console's own script and style (no inline script, no framing), and
// nosniff, so text the console shows can never be run as markup.
package console

import (
	"compress/gzip"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/vanguard"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/reqlimit"
)

//go:embed dist
var dist embed.FS

// ContentSecurityPolicy is sent with every response: scripts, styles and
// calls only from the console's own origin, nothing inline, no framing.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Options are the HTTP face's defences; the zero value serves with no
// limits, as a test's handler may.
type Options struct {
	// Authenticate names the caller of a request from its headers and
	// connection alone (a bearer token, a client certificate, a loopback
	// address), before its body is read; a refusal is a gRPC status. Nil
	// leaves it to the gRPC server's interceptors alone.
	Authenticate func(*http.Request) error
	// MaxBodyBytes bounds a request's body, as read and as inflated; 0
	// means 4 MiB. A method's own limit may be lower (reqlimit.WireLimit;
	// four times it for JSON, which spells a message out).
	MaxBodyBytes int
	// MaxBodyBytesInFlight bounds the request bodies the server holds at
	// once, read or being transcoded; a request waits for room up to half
	// of ReadTimeout, then is refused resource_exhausted. Each client
	// (clientKey) holds at most a quarter of it, and at least one request
	// of MaxBodyBytes. 0 means 4 × MaxBodyBytes.
	MaxBodyBytesInFlight int64
	// MaxDecodeBytes bounds what the JSON requests being transcoded cost
	// the server at once, by estimate (reqlimit.EstimateJSON): a request
	// that would cost more is refused resource_exhausted, one that fits
	// waits for room up to half of ReadTimeout. 0 means 16 × MaxBodyBytes.
	MaxDecodeBytes int64
	// ReadTimeout bounds how long a request's body may take to arrive; 0
	// means no bound.
	ReadTimeout time.Duration
	// Listen is the address the console listens on (rein serve --http);
	// when its host is a name, requests may carry it in Host.
	Listen string
	// Hosts are the names, besides IP addresses, localhost and Listen's,
	// that requests may carry in Host (rein serve --http-host).
	Hosts []string
	// AllowedOrigins are the origins, besides the console's own, that may
	// call RunService from a browser (rein serve --http-allowed-origins).
	AllowedOrigins []string
	// Mounts are handlers served at exact paths beside the console (the
	// MCP face), or under a path when it ends in "/" (the AG-UI face),
	// after the Host and Origin checks, their bodies bounded by
	// MaxBodyBytes; each authenticates its own callers.
	Mounts map[string]http.Handler
}

// Check says what is wrong with the options' hosts and origins, before a
// server is started with them.
func (o Options) Check() error {
	_, err := site(o)
	return err
}

// Handler serves the console's files and, under /rein.v1.RunService/,
// RunService through g (which must have it registered). Every request
// passes the checks guard.go describes first.
func Handler(g *grpc.Server, opts Options) (http.Handler, error) {
	limit := int64(opts.MaxBodyBytes)
	if limit <= 0 {
		limit = 4 << 20
	}
	at, err := site(opts)
	if err != nil {
		return nil, err
	}
	decodeTotal := opts.MaxDecodeBytes
	if decodeTotal <= 0 {
		decodeTotal = decodeBudgetFactor * limit
	}
	decoding := reqlimit.NewBudget(decodeTotal)
	api, err := vanguard.NewTranscoder(
		[]*vanguard.Service{vanguard.NewService(reinv1.RunService_ServiceDesc.ServiceName, g)},
		vanguard.WithCodec(func(res vanguard.TypeResolver) vanguard.Codec { return newCallCodec(res, decodeTotal) }),
		vanguard.WithCompression(vanguard.CompressionGzip, func() connect.Compressor { return gzip.NewWriter(io.Discard) }, newBoundedGzip(limit)),
		vanguard.WithDefaultServiceOptions(
			vanguard.WithTargetProtocols(vanguard.ProtocolGRPC),
			vanguard.WithTargetCodecs(vanguard.CodecProto),
			vanguard.WithNoTargetCompression(),
			vanguard.WithMaxMessageBufferBytes(uint32(min(limit, math.MaxUint32))),
		),
	)
	if err != nil {
		return nil, fmt.Errorf("console: serve RunService to browsers: %w", err)
	}
	files, err := fs.Sub(dist, "dist")
	if err != nil {
		return nil, fmt.Errorf("console: the embedded assets: %w", err)
	}
	static := http.FileServerFS(files)
	prefix := "/" + reinv1.RunService_ServiceDesc.ServiceName + "/"
	held := newBodyBudget(opts.MaxBodyBytesInFlight, limit)
	errs := connect.NewErrorWriter()
	refuse := func(w http.ResponseWriter, r *http.Request, err error) {
		if errs.IsSupported(r) {
			_ = errs.Write(w, r, err)
			return
		}
		http.Error(w, err.Error(), connectHTTPStatus(connect.CodeOf(err)))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		if err := at.Check(r); err != nil {
			// 403 whatever the protocol: a page of another site learns
			// nothing more.
			closeUnread(w, r)
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		}
		if m, ok := mounted(opts.Mounts, r.URL.Path); ok {
			r.Body = http.MaxBytesReader(w, r.Body, limit)
			m.ServeHTTP(w, r)
			return
		}
		if !strings.HasPrefix(r.URL.Path, prefix) {
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				closeUnread(w, r)
			}
			serveFile(w, r, static, prefix)
			return
		}
		if err := notACall(r); err != nil {
			closeUnread(w, r)
			http.Error(w, err.Error(), http.StatusUnsupportedMediaType)
			return
		}
		if opts.Authenticate != nil {
			if err := opts.Authenticate(r); err != nil {
				closeUnread(w, r)
				refuse(w, r, fromStatus(err))
				return
			}
		}
		bodyLimit, name := methodLimit(r, limit)
		if r.ContentLength > bodyLimit {
			closeUnread(w, r)
			refuse(w, r, tooLarge(r.ContentLength, bodyLimit, limit, name))
			return
		}
		release, err := held.acquire(r, bodyLimit, opts.ReadTimeout)
		if err != nil {
			closeUnread(w, r)
			refuse(w, r, err)
			return
		}
		defer release()
		body, err := readBody(w, r, bodyLimit, limit, name, opts.ReadTimeout)
		if err != nil {
			refuse(w, r, err)
			return
		}
		if err := checkFrames(body, r); err != nil {
			refuse(w, r, err)
			return
		}
		// An empty body is the empty message in protobuf, and no JSON.
		if r.Method == http.MethodPost && len(body) == 0 && contentType(r) == "application/json" {
			refuse(w, r, connect.NewError(connect.CodeInvalidArgument, errors.New("the request body is empty, which is not JSON: send the request message, {} for one with no fields set")))
			return
		}
		releaseDecoding, err := decodeRoom(r, body, name, decoding, opts.ReadTimeout)
		if err != nil {
			refuse(w, r, err)
			return
		}
		defer releaseDecoding()
		// The request's memory is the transcoder's until it answers: a
		// stream's first response frees the weight, so watches do not hold it.
		api.ServeHTTP(&releasingWriter{ResponseWriter: w, release: func() { release(); releaseDecoding() }}, r)
	}), nil
}

// serveFile serves the console's files, to GET and HEAD only.
func serveFile(w http.ResponseWriter, r *http.Request, static http.Handler, prefix string) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "the console's files are read with GET; RunService is under "+prefix, http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Cache-Control", "no-cache")
	static.ServeHTTP(w, r)
}

// fromStatus is a gRPC status error as a Connect error of the same code
// and message.
func fromStatus(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return connect.NewError(connect.CodeUnauthenticated, err)
	}
	return connect.NewError(connect.Code(st.Code()), errors.New(st.Message()))
}

// connectHTTPStatus is the HTTP status the Connect protocol gives a code,
// for a refusal to a request of no RPC protocol.
func connectHTTPStatus(c connect.Code) int {
	switch c {
	case connect.CodeInvalidArgument:
		return http.StatusBadRequest
	case connect.CodeUnauthenticated:
		return http.StatusUnauthorized
	case connect.CodePermissionDenied:
		return http.StatusForbidden
	case connect.CodeResourceExhausted:
		return http.StatusTooManyRequests
	case connect.CodeDeadlineExceeded:
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

// mounted is the mount serving path: the one at path itself, else the one
// at its longest prefix ending in "/".
func mounted(mounts map[string]http.Handler, path string) (http.Handler, bool) {
	if m, ok := mounts[path]; ok {
		return m, true
	}
	for i := strings.LastIndexByte(path, '/'); i >= 0; i = strings.LastIndexByte(path[:i], '/') {
		if m, ok := mounts[path[:i+1]]; ok && i > 0 {
			return m, true
		}
	}
	return nil, false
}
