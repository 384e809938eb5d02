package console

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/reinhq/rein/internal/hostcheck"
)

// A request is judged in this order, each step before the next reads more
// of it: its Host and Origin, by the rule every listener of rein applies
// (internal/hostcheck: a page of another site must not reach the API, even
// by a name that resolves to this machine, so the loopback-as-admin rule
// applies only to a request that passed), its content type (what a form
// can send is not a call), its credentials (before any byte of the body is
// read), then its body, bounded.

// site is the console's Host and Origin rule: opts' names and origins,
// refused ones naming the flags of rein serve that allow them.
func site(opts Options) (hostcheck.Rule, error) {
	return hostcheck.New(hostcheck.Options{
		Listen: opts.Listen, Hosts: opts.Hosts, Origins: opts.AllowedOrigins,
		HostFlag: "--http-host", OriginFlag: "--http-allowed-origins",
	})
}

// callContentTypes are the content types of the RPC protocols the console
// serves (Connect, binary gRPC-Web, gRPC), without parameters; the
// transcoder serves no gRPC-Web text. None is one an
// HTML form can send (application/x-www-form-urlencoded, multipart/form-
// data, text/plain), and each makes a browser ask first (a CORS preflight,
// which this server never grants) before it sends one to another origin.
var callContentTypes = map[string]bool{
	"application/json": true, "application/proto": true,
	"application/connect+json": true, "application/connect+proto": true,
	"application/grpc-web": true, "application/grpc-web+proto": true, "application/grpc-web+json": true,
	"application/grpc": true, "application/grpc+proto": true, "application/grpc+json": true,
}

// contentType is r's content type without parameters, lower case.
func contentType(r *http.Request) string {
	ct, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";")
	return strings.ToLower(strings.TrimSpace(ct))
}

// errNotACall refuses a request that is not a call: the defence against a
// forged form post, whatever its origin.
func notACall(r *http.Request) error {
	if r.Method != http.MethodPost {
		return nil // a Connect GET is for a read (vanguard refuses the rest)
	}
	ct := contentType(r)
	if !callContentTypes[ct] {
		return fmt.Errorf("content type %q is not an RPC call's: send Connect (application/json or application/proto, with Connect-Protocol-Version: 1), gRPC-Web or gRPC", r.Header.Get("Content-Type"))
	}
	if (ct == "application/json" || ct == "application/proto") && r.Header.Get("Connect-Protocol-Version") != "1" {
		return errors.New("a Connect unary call needs the header Connect-Protocol-Version: 1")
	}
	return nil
}
