package server

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// TestGetServerInfoNamesCaller: GetServerInfo says whom the server took
// the caller for (the web console's "signed in as"), each principal its
// own; a token the server does not know is refused, naming nobody.
func TestGetServerInfoNamesCaller(t *testing.T) {
	s := newTCPServer(t, Config{Directory: testDirectory(t)})
	ctx := context.Background()
	for _, p := range testPrincipals {
		got, err := s.client.GetServerInfo(ctx, &reinv1.GetServerInfoRequest{}, as(p.ID))
		if err != nil {
			t.Fatalf("%s: %v", p.ID, err)
		}
		c := got.GetCaller()
		if c.GetPrincipal() != p.ID || c.GetTenant() != p.Tenant || len(c.GetRoles()) != len(p.Roles) || c.GetRoles()[0] != string(p.Roles[0]) {
			t.Errorf("%s: caller = %v, want %v", p.ID, c, p)
		}
		if got.GetBuild().GetApiVersion() == "" {
			t.Errorf("%s: no build info beside the caller: %v", p.ID, got)
		}
	}
	_, err := s.client.GetServerInfo(ctx, &reinv1.GetServerInfoRequest{}, as("nobody"))
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("an unknown token: %v, want Unauthenticated", err)
	}
}

// strAddr is a peer as grpc-go names one that came over net/http (the web
// console's transcoder): a Network of "tcp" and the request's RemoteAddr.
type strAddr string

func (a strAddr) Network() string {
	if a == "" {
		return ""
	}
	return "tcp"
}
func (a strAddr) String() string { return string(a) }

// TestIsLocalOverHTTP: a call the web console's transcoder hands on is
// local when its remote address is loopback, and only then.
func TestIsLocalOverHTTP(t *testing.T) {
	for _, tc := range []struct {
		addr net.Addr
		want bool
	}{
		{strAddr("127.0.0.1:5000"), true},
		{strAddr("[::1]:5000"), true},
		{strAddr("10.0.0.7:5000"), false},
		{strAddr("[2001:db8::1]:443"), false},
		{strAddr("localhost:5000"), false}, // a name, not an address: never trusted
		{strAddr(""), false},
		{strAddr("garbage"), false},
	} {
		if got := isLocal(tc.addr); got != tc.want {
			t.Errorf("isLocal(%q) = %v, want %v", tc.addr.String(), got, tc.want)
		}
	}
}
