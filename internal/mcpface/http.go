package mcpface

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"time"

	mcpauth "github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/reinhq/rein/internal/auth"
)

// Paths the HTTP face serves.
const (
	// Path is the Streamable HTTP endpoint.
	Path = "/mcp"
	// MetadataPath is the OAuth protected resource metadata (RFC 9728)
	// the MCP authorization spec points clients to.
	MetadataPath = "/.well-known/oauth-protected-resource"
)

// HTTPOptions configure the Streamable HTTP transport.
type HTTPOptions struct {
	// Token names the principal of a bearer token (the server's tokens
	// file). Nil: the server has no tokens, every caller that reaches the
	// handler is the local admin, and no token is asked for; the caller
	// must then be checked to be local before the handler.
	Token func(token string) (auth.Principal, bool)
	// MaxBodyBytes bounds a request's body; 0 means 4 MiB.
	MaxBodyBytes int64
	// SessionTimeout closes a session idle this long; 0 means 30 minutes.
	SessionTimeout time.Duration
	// Logger logs the transport's troubles; nil logs nothing.
	Logger *slog.Logger
	// EventStore keeps what the transport sends each session, so that a
	// client whose connection drops resumes its streams with Last-Event-ID
	// and gets what was sent meanwhile (an elicitation among them); nil
	// means one in memory, bounded to 10 MiB for all sessions, the oldest
	// events dropped first.
	EventStore mcp.EventStore
}

// Handler serves the face over the Streamable HTTP transport at Path,
// and the protected resource metadata at MetadataPath. A request without a
// known bearer token is 401 with WWW-Authenticate naming the metadata; a
// session is bound to the principal that opened it, and a request of
// another principal that names it is refused.
func (f *Face) Handler(opts HTTPOptions) http.Handler {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 4 << 20
	}
	if opts.SessionTimeout <= 0 {
		opts.SessionTimeout = 30 * time.Minute
	}
	// The SDK asks for a server on every request, to learn the protocol
	// versions it speaks, and again when the request opens a session. A
	// request naming a session is served by that session's own server, so
	// it gets the probe, which speaks the same versions; a request that
	// opens one builds its server once (newServer): a session's server
	// costs two calls of the API and its tools' schemas, most of a call's
	// cost if made per request (docs/benchmarks.md, "The MCP face").
	if opts.EventStore == nil {
		opts.EventStore = mcp.NewMemoryEventStore(nil)
	}
	probe := mcp.NewServer(implementation(), nil)
	streamable := mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		if r.Header.Get(sessionIDHeader) != "" {
			return probe
		}
		built, _ := r.Context().Value(newServerKey{}).(*newServer)
		if built == nil {
			built = &newServer{}
		}
		if built.srv == nil && !built.refused {
			srv, err := f.Session(r.Context(), r.Header.Get("Authorization"))
			if err != nil {
				f.opts.Logger.Info("mcp: a session was refused", "error", err)
			}
			built.srv, built.refused = srv, err != nil
		}
		return built.srv
	}, &mcp.StreamableHTTPOptions{
		MaxRequestBodyBytes: opts.MaxBodyBytes,
		SessionTimeout:      opts.SessionTimeout,
		EventStore:          opts.EventStore,
		Logger:              opts.Logger,
	})
	verify := func(_ context.Context, token string, _ *http.Request) (*mcpauth.TokenInfo, error) {
		p, ok := opts.Token(token)
		if !ok {
			return nil, mcpauth.ErrInvalidToken
		}
		// The session is bound to the principal: the SDK refuses a
		// request naming a session another user opened.
		return &mcpauth.TokenInfo{UserID: p.Tenant + "/" + p.ID, Expiration: time.Now().Add(time.Hour)}, nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc(MetadataPath, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "the protected resource metadata is read with GET", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"resource":                 origin(r) + Path,
			"resource_name":            "rein",
			"bearer_methods_supported": []string{"header"},
			"authorization_servers":    []string{},
		})
	})
	mux.HandleFunc(Path, func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, opts.MaxBodyBytes)
		r = r.WithContext(context.WithValue(r.Context(), newServerKey{}, &newServer{}))
		if opts.Token == nil {
			if r.Method == http.MethodDelete {
				f.closing(r.Header.Get(sessionIDHeader), "")
			}
			streamable.ServeHTTP(w, r)
			return
		}
		mcpauth.RequireBearerToken(verify, &mcpauth.RequireBearerTokenOptions{
			ResourceMetadataURL: origin(r) + MetadataPath,
		})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if ti := mcpauth.TokenInfoFromContext(r.Context()); ti != nil && r.Method == http.MethodDelete {
				f.closing(r.Header.Get(sessionIDHeader), ti.UserID)
			}
			streamable.ServeHTTP(w, r)
		})).ServeHTTP(w, r)
	})
	return mux
}

// sessionIDHeader is the Streamable HTTP transport's header naming a
// session.
const sessionIDHeader = "Mcp-Session-Id"

// newServer is the server built for a request that opens a session, held
// in the request's context (newServerKey) so that the SDK's two asks for
// it build it once; refused notes that the API refused the credentials.
type newServer struct {
	srv     *mcp.Server
	refused bool
}

type newServerKey struct{}

// origin is the scheme and host a request was made to.
func origin(r *http.Request) string {
	if r.TLS != nil {
		return "https://" + r.Host
	}
	return "http://" + r.Host
}
