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
	"embed"
	"fmt"
	"io/fs"
	"net/http"
	"strings"

	"connectrpc.com/vanguard"
	"google.golang.org/grpc"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

//go:embed dist
var dist embed.FS

// ContentSecurityPolicy is sent with every response: scripts, styles and
// calls only from the console's own origin, nothing inline, no framing.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves the console's files and, under /rein.v1.RunService/,
// RunService through g (which must have it registered).
func Handler(g *grpc.Server) (http.Handler, error) {
	api, err := vanguard.NewTranscoder(
		[]*vanguard.Service{vanguard.NewService(reinv1.RunService_ServiceDesc.ServiceName, g)},
		vanguard.WithDefaultServiceOptions(
			vanguard.WithTargetProtocols(vanguard.ProtocolGRPC),
			vanguard.WithTargetCodecs(vanguard.CodecProto),
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
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		if strings.HasPrefix(r.URL.Path, prefix) {
			api.ServeHTTP(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "the console's files are read with GET; RunService is under "+prefix, http.StatusMethodNotAllowed)
			return
		}
		h.Set("Cache-Control", "no-cache")
		static.ServeHTTP(w, r)
	}), nil
}
