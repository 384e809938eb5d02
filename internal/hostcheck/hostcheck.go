// Package hostcheck holds the one rule by which every HTTP listener of rein
// (the console's --http, the operators' --admin-listen) says which Host and
// Origin headers it answers to.
//
// A DNS rebinding attack makes a browser send a request to this machine
// with the attacker's name in Host and Origin: a page on evil.example,
// whose name is made to resolve to 127.0.0.1, then reads what the server
// answers as if it were its own site's. The rule refuses such a request
// before any handler sees it. A request answers to a listener when
//
//   - its request target is a path (origin form): rein is no proxy, and the
//     absolute form (GET http://127.0.0.1:9090/metrics) would put the
//     target's authority in place of the Host header the client sent;
//   - its Host is exactly host or host:port, port a decimal number from 1
//     to 65535, and host an IP address (an IPv6 one in brackets),
//     localhost, the host of the listen address, or a name the operator
//     allows (a flag such as --http-host): an IP address cannot be rebound,
//     as a page loaded from it has it as its origin;
//   - it carries at most one Origin, and that one is the listener's own
//     (scheme://Host of the request) or one the operator allows.
//
// Browsers send Host as exactly host[:port]; anything looser (a port that is
// not a number, an unbracketed IPv6 address) comes from no browser and is
// refused rather than read generously.
package hostcheck

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// Options are what a listener's operator says of it.
type Options struct {
	// Listen is the address the listener was given (host:port); when its
	// host is a name, requests may carry that name in Host.
	Listen string
	// Hosts are names, besides IP addresses, localhost and Listen's host,
	// that requests may carry in Host: host names, without port.
	Hosts []string
	// Origins are origins, besides the listener's own, that a browser may
	// send requests from, as scheme://host[:port].
	Origins []string
	// HostFlag and OriginFlag are the flags of rein serve that give Hosts
	// and Origins (--http-host), named in the refusals; HostFlag empty
	// says no flag allows more names, OriginFlag empty no other origins.
	HostFlag, OriginFlag string
}

// Rule says which Host and Origin headers a listener answers to. The zero
// Rule answers to IP addresses and localhost, from the listener's own
// origin.
type Rule struct {
	hosts      map[string]bool // lower case, without a trailing dot
	origins    map[string]bool // scheme://host[:port], lower case
	hostFlag   string
	originFlag string
}

// New is the Rule o describes, or what is wrong with o and what to give
// instead.
func New(o Options) (Rule, error) {
	r := Rule{hosts: map[string]bool{}, origins: map[string]bool{}, hostFlag: o.HostFlag, originFlag: o.OriginFlag}
	for _, h := range o.Hosts {
		h = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), ".")
		if h == "" || strings.ContainsAny(h, "/:@ []") {
			return Rule{}, fmt.Errorf("%s %q: give a host name, without scheme or port (console.example.com)", o.HostFlag, h)
		}
		r.hosts[h] = true
	}
	if o.Listen != "" {
		// The listen address was parsed already, by net.Listen.
		if host, _, err := net.SplitHostPort(o.Listen); err == nil && host != "" {
			if _, err := netip.ParseAddr(host); err != nil {
				r.hosts[strings.TrimSuffix(strings.ToLower(host), ".")] = true
			}
		}
	}
	for _, o2 := range o.Origins {
		u, err := url.Parse(strings.TrimSpace(o2))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
			return Rule{}, fmt.Errorf("%s %q: give an origin, scheme://host[:port] (https://ops.example.com)", o.OriginFlag, o2)
		}
		r.origins[strings.ToLower(u.Scheme+"://"+u.Host)] = true
	}
	return r, nil
}

// Check refuses a request whose target is not a path, whose Host this
// listener does not answer to, or whose Origin is neither the listener's
// own nor an allowed one; the error says which and what would pass.
func (r Rule) Check(req *http.Request) error {
	// RequestURI is the target as the client sent it; empty only in a
	// request made in the process, which no client sent.
	if t := req.RequestURI; t != "" && !strings.HasPrefix(t, "/") && t != "*" {
		return fmt.Errorf("the request target %q is not a path: this server is no proxy; send the path alone, with the server's address in Host", t)
	}
	if !r.answers(req.Host) {
		allow := "or localhost"
		if r.hostFlag != "" {
			allow = "localhost, or a name its operator allows with rein serve " + r.hostFlag
		}
		return fmt.Errorf("this server does not answer to the host %q: use its address (host:port, the port a number from 1 to 65535) %s", req.Host, allow)
	}
	// A page on another site reaches a listener at its own Host with a
	// plain <img> or <script> (no Origin): it cannot read the answer, but
	// it can start what a GET starts (a CPU profile on the admin port).
	// Browsers mark such requests; only a person's own navigation passes.
	if req.Header.Get("Sec-Fetch-Site") == "cross-site" && !(isRead(req.Method) && req.Header.Get("Sec-Fetch-Mode") == "navigate") {
		return fmt.Errorf("a page on another site may not call this server (Sec-Fetch-Site: cross-site, Sec-Fetch-Mode: %s): open its address in the browser directly", req.Header.Get("Sec-Fetch-Mode"))
	}
	origins := req.Header.Values("Origin")
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
	if req.TLS != nil {
		scheme = "https"
	}
	if origin == scheme+"://"+strings.ToLower(req.Host) || r.origins[origin] {
		return nil
	}
	allow := ""
	if r.originFlag != "" {
		allow = ", or one its operator allows with rein serve " + r.originFlag
	}
	return fmt.Errorf("requests from the origin %q are refused: only this server's own origin may send them from a browser%s", origins[0], allow)
}

// isRead reports whether method only reads.
func isRead(method string) bool {
	return method == http.MethodGet || method == http.MethodHead
}

// Guard serves h to the requests r passes, and refuses the rest with 403
// and why.
func (r Rule) Guard(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if err := r.Check(req); err != nil {
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, req)
	})
}

// answers says whether hostport, a request's Host, is host or host:port
// with a host r answers to and a port from 1 to 65535.
func (r Rule) answers(hostport string) bool {
	host, ok := hostOf(hostport)
	if !ok {
		return false
	}
	if strings.HasPrefix(host, "[") {
		// An IPv6 address, as it must be written in Host.
		a, err := netip.ParseAddr(host[1 : len(host)-1])
		return err == nil && a.Is6()
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Is4()
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	return host == "localhost" || r.hosts[host]
}

// hostOf is hostport without its port, an IPv6 address in its brackets;
// false when hostport is not host or host:port with a port from 1 to 65535.
func hostOf(hostport string) (string, bool) {
	host, port, hasPort := hostport, "", false
	if strings.HasPrefix(hostport, "[") {
		end := strings.IndexByte(hostport, ']')
		if end < 0 {
			return "", false
		}
		rest := hostport[end+1:]
		host = hostport[:end+1]
		switch {
		case rest == "":
		case rest[0] == ':':
			port, hasPort = rest[1:], true
		default:
			return "", false
		}
	} else if h, p, found := strings.Cut(hostport, ":"); found {
		host, port, hasPort = h, p, true
	}
	if host == "" || (hasPort && !validPort(port)) {
		return "", false
	}
	return host, true
}

// validPort says whether port is a decimal number from 1 to 65535, as
// browsers write it.
func validPort(port string) bool {
	if port == "" || len(port) > 5 || strings.Trim(port, "0123456789") != "" {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= 1 && n <= 65535
}
