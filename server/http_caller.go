package server

import (
	"net"
	"net/http"
	"net/netip"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// AuthenticateHTTP names the caller of an HTTP request (rein serve --http)
// by the rule the gRPC port applies, from its headers and connection
// alone, so the HTTP face can refuse a caller without credentials before
// it reads a byte of the body. The call itself is judged again, role and
// all, by the interceptors when it reaches the gRPC server. A refusal is
// a gRPC status (Unauthenticated).
func (n *Node) AuthenticateHTTP(r *http.Request) error {
	ctx := metadata.NewIncomingContext(r.Context(), metadata.MD{"authorization": r.Header.Values("Authorization")})
	p := &peer.Peer{Addr: remoteAddr(r.RemoteAddr)}
	if r.TLS != nil {
		p.AuthInfo = credentials.TLSInfo{State: *r.TLS}
	}
	_, err := n.auth.identify(peer.NewContext(ctx, p))
	return err
}

// remoteAddr is an HTTP request's remote address as a net.Addr; an
// address that does not parse is not local.
func remoteAddr(s string) net.Addr {
	// Parsed, never resolved: no name lookup on a caller's say.
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return net.TCPAddrFromAddrPort(ap)
	}
	return unparsedAddr(s)
}

type unparsedAddr string

func (a unparsedAddr) Network() string { return "unparsed" }
func (a unparsedAddr) String() string  { return string(a) }
