package server

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// TestTwoAuthorizationHeadersAreRefused: a call with two authorization
// headers is Unauthenticated, naming why, whether the two tokens are known
// or not and whether the server has tokens at all; which one would be the
// caller is not the server's to guess. The twin: either token alone is
// served as its principal.
func TestTwoAuthorizationHeadersAreRefused(t *testing.T) {
	for _, cfg := range []Config{{Directory: testDirectory(t)}, {}} {
		s := newTCPServer(t, cfg)
		for _, pair := range [][2]string{{"a-admin", "b-viewer"}, {"a-viewer", "a-viewer"}} {
			ctx := metadata.AppendToOutgoingContext(t.Context(),
				"authorization", "Bearer "+pair[0]+"-token", "authorization", "Bearer "+pair[1]+"-token")
			_, err := s.client.GetServerInfo(ctx, &reinv1.GetServerInfoRequest{})
			if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "2 authorization headers") {
				t.Errorf("tokens file %v, %s and %s at once: %v; want Unauthenticated naming the two headers", cfg.Directory != nil, pair[0], pair[1], err)
			}
			// The same refusal on the HTTP face, before its body is read.
			r := httptest.NewRequest(http.MethodPost, "/rein.v1.RunService/GetServerInfo", nil)
			r.RemoteAddr = "127.0.0.1:5000"
			r.Header.Add("Authorization", "Bearer "+pair[0]+"-token")
			r.Header.Add("Authorization", "Bearer "+pair[1]+"-token")
			if err := s.node.AuthenticateHTTP(r); status.Code(err) != codes.Unauthenticated {
				t.Errorf("tokens file %v, over HTTP, %s and %s at once: %v; want Unauthenticated", cfg.Directory != nil, pair[0], pair[1], err)
			}
		}
		if cfg.Directory == nil {
			continue
		}
		for _, who := range []string{"a-admin", "b-viewer"} {
			resp, err := s.client.GetServerInfo(t.Context(), &reinv1.GetServerInfoRequest{}, as(who))
			if err != nil || resp.GetCaller().GetPrincipal() != who {
				t.Errorf("%s alone: %v %v", who, resp.GetCaller(), err)
			}
		}
	}
}

// TestAuthenticateHTTP: the HTTP face names a caller by the gRPC port's
// rule from its headers and address alone: a known token passes, an
// unknown or missing one is Unauthenticated; without a tokens file a
// loopback address passes and another address does not.
func TestAuthenticateHTTP(t *testing.T) {
	withTokens := newTCPServer(t, Config{Directory: testDirectory(t)}).node
	without := newTCPServer(t, Config{}).node
	for _, tc := range []struct {
		name   string
		node   *Node
		remote string
		token  string
		ok     bool
	}{
		{"a known token", withTokens, "203.0.113.9:4000", "a-admin-token", true},
		{"an unknown token", withTokens, "203.0.113.9:4000", "nope", false},
		{"no token", withTokens, "127.0.0.1:4000", "", false},
		{"loopback, no tokens file", without, "127.0.0.1:4000", "", true},
		{"IPv6 loopback, no tokens file", without, "[::1]:4000", "", true},
		{"remote, no tokens file", without, "203.0.113.9:4000", "", false},
		{"an address that does not parse", without, "somewhere", "", false},
	} {
		r := httptest.NewRequest(http.MethodPost, "/rein.v1.RunService/GetRun", nil)
		r.RemoteAddr = tc.remote
		if tc.token != "" {
			r.Header.Set("Authorization", "Bearer "+tc.token)
		}
		err := tc.node.AuthenticateHTTP(r)
		if (err == nil) != tc.ok || (err != nil && status.Code(err) != codes.Unauthenticated) {
			t.Errorf("%s: %v; want ok=%v (else Unauthenticated)", tc.name, err, tc.ok)
		}
	}
}
