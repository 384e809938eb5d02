package webhook

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"syscall"
	"time"
)

// ErrRefusedAddress: a webhook's host resolves to an address rein does not
// call (loopback, private, link-local, CGNAT, cloud metadata, unspecified,
// multicast) and the server was not started with --webhook-allow-private.
var ErrRefusedAddress = errors.New("refused address")

// refused are the ranges a webhook may not reach unless private addresses
// are allowed, besides what netip's predicates cover.
var refused = []netip.Prefix{
	netip.MustParsePrefix("100.64.0.0/10"),      // CGNAT (RFC 6598)
	netip.MustParsePrefix("169.254.169.254/32"), // cloud metadata, in link-local
	netip.MustParsePrefix("fd00:ec2::254/128"),  // AWS metadata over IPv6, in ULA
	netip.MustParsePrefix("0.0.0.0/8"),          // "this network"
	netip.MustParsePrefix("192.0.0.0/24"),       // IETF protocol assignments
	netip.MustParsePrefix("198.18.0.0/15"),      // benchmarking
	netip.MustParsePrefix("64:ff9b:1::/48"),     // local-use NAT64
}

// CheckAddr returns an error wrapping ErrRefusedAddress when addr is one a
// webhook may not reach.
func CheckAddr(addr netip.Addr) error {
	addr = addr.Unmap()
	why := ""
	switch {
	case addr.IsLoopback():
		why = "loopback"
	case addr.IsPrivate():
		why = "private"
	case addr.IsLinkLocalUnicast() || addr.IsLinkLocalMulticast():
		why = "link-local"
	case addr.IsUnspecified():
		why = "unspecified"
	case addr.IsMulticast() || addr.IsInterfaceLocalMulticast():
		why = "multicast"
	}
	for _, p := range refused {
		if why == "" && p.Contains(addr) {
			why = "reserved (" + p.String() + ")"
		}
	}
	if why != "" {
		return fmt.Errorf("%s is a %s address: %w; rein calls only public addresses unless started with --webhook-allow-private", addr, why, ErrRefusedAddress)
	}
	return nil
}

// Timeouts bound each attempt.
type Timeouts struct {
	// Connect bounds the TCP connection; 0 means 5s.
	Connect time.Duration
	// TLS bounds the TLS handshake; 0 means 5s.
	TLS time.Duration
	// Response bounds the whole attempt, the response read included; 0
	// means 15s.
	Response time.Duration
}

// MaxResponseBytes is the most of a response body rein reads.
const MaxResponseBytes = 64 << 10

// NewClient is the HTTP client deliveries go through. Unless allowPrivate,
// its dialer checks the address it connects to, after DNS resolution, in
// the socket's Control (so a name that resolves to a public address when
// checked and to a private one when dialled cannot pass). It follows no
// redirect: a 3xx is a failed attempt, so no redirect reaches an address
// the URL did not name.
func NewClient(allowPrivate bool, t Timeouts) *http.Client {
	if t.Connect == 0 {
		t.Connect = 5 * time.Second
	}
	if t.TLS == 0 {
		t.TLS = 5 * time.Second
	}
	if t.Response == 0 {
		t.Response = 15 * time.Second
	}
	d := &net.Dialer{Timeout: t.Connect, KeepAlive: 30 * time.Second}
	if !allowPrivate {
		d.Control = func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("webhook dial %s: %w", address, err)
			}
			return CheckAddr(ap.Addr())
		}
	}
	tr := &http.Transport{
		Proxy:                 nil, // a proxy would dial for us, past the check
		DialContext:           d.DialContext,
		TLSHandshakeTimeout:   t.TLS,
		ResponseHeaderTimeout: t.Response,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	return &http.Client{
		Transport: tr,
		Timeout:   t.Response,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// CheckURL refuses a URL a webhook may not have: a scheme other than http
// or https, no host, credentials in it, or (unless allowPrivate) a literal
// address that CheckAddr refuses. A name is checked when it is dialled.
func CheckURL(raw string, allowPrivate bool) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("webhook URL %q: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("webhook URL %q: the scheme must be http or https", raw)
	}
	if u.Hostname() == "" {
		return fmt.Errorf("webhook URL %q has no host", raw)
	}
	if u.User != nil {
		return fmt.Errorf("webhook URL %q holds credentials; the signature authenticates rein to the receiver", raw)
	}
	if allowPrivate {
		return nil
	}
	if addr, err := netip.ParseAddr(u.Hostname()); err == nil {
		if err := CheckAddr(addr); err != nil {
			return fmt.Errorf("webhook URL %q: %w", raw, err)
		}
	}
	if u.Hostname() == "localhost" {
		return fmt.Errorf("webhook URL %q: localhost is a loopback address: %w; rein calls only public addresses unless started with --webhook-allow-private", raw, ErrRefusedAddress)
	}
	return nil
}
