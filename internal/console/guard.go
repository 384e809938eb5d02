package console

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// A request is judged in this order, each step before the next reads more
// of it: its Host and Origin (a page of another site must not reach the
// API, even by a name that resolves to this machine), its content type
// (what a form can send is not a call), its credentials (before any byte
// of the body is read), then its body, bounded.

// site says which Host and Origin headers the console answers: a DNS
// rebinding attack makes a browser send a request to this server with the
// attacker's name in Host and Origin, and is refused here, before the
// loopback-as-admin rule could apply.
type site struct {
	// hosts are the names, besides IP addresses and localhost, that
	// requests may carry in Host (--http-host), lower case.
	hosts map[string]bool
	// origins are the origins, besides the console's own, that may call
	// the API from a browser (--http-allowed-origins), as scheme://host[:port].
	origins map[string]bool
}

func newSite(hosts, origins []string) (*site, error) {
	s := &site{hosts: map[string]bool{}, origins: map[string]bool{}}
	for _, h := range hosts {
		h = strings.ToLower(strings.TrimSpace(h))
		if h == "" || strings.ContainsAny(h, "/:@ ") {
			return nil, fmt.Errorf("--http-host %q: give a host name, without scheme or port (console.example.com)", h)
		}
		s.hosts[h] = true
	}
	for _, o := range origins {
		u, err := url.Parse(strings.TrimSpace(o))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
			return nil, fmt.Errorf("--http-allowed-origins %q: give an origin, scheme://host[:port] (https://ops.example.com)", o)
		}
		s.origins[strings.ToLower(u.Scheme+"://"+u.Host)] = true
	}
	return s, nil
}

// check refuses a request whose Host this server does not answer to, or
// whose Origin is neither the console's own nor an allowed one.
func (s *site) check(r *http.Request) error {
	host := hostname(r.Host)
	if !s.hostAllowed(host) {
		return fmt.Errorf("this server does not answer to the host %q: use its address, localhost, or a name its operator allows with rein serve --http-host", r.Host)
	}
	origins := r.Header.Values("Origin")
	switch len(origins) {
	case 0:
		// Not a browser's cross-origin request: browsers send Origin
		// with every POST, and with every cross-origin fetch.
		return nil
	case 1:
	default:
		return errors.New("the request has more than one Origin header")
	}
	origin := strings.ToLower(origins[0])
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	if origin == scheme+"://"+strings.ToLower(r.Host) || s.origins[origin] {
		return nil
	}
	return fmt.Errorf("calls from the origin %q are refused: only the console's own origin may call this server from a browser, or one its operator allows with rein serve --http-allowed-origins", origins[0])
}

func (s *site) hostAllowed(host string) bool {
	if host == "" {
		return false
	}
	// An IP address cannot be rebound: a page loaded from it has it as
	// its origin.
	if net.ParseIP(host) != nil || host == "localhost" {
		return true
	}
	return s.hosts[host]
}

// hostname is Host without its port, lower case, an IPv6 address without
// its brackets.
func hostname(hostport string) string {
	h := hostport
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		h = host
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	return strings.TrimSuffix(strings.ToLower(h), ".")
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
