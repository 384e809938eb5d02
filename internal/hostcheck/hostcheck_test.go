package hostcheck

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestHosts: which Host headers a listener answers to. What browsers send
// for its address, localhost, the listen address's name and the names
// allowed pass; a rebound name, and every form no browser sends (a port
// that is not a number from 1 to 65535, an IPv6 address out of brackets),
// is refused, saying which Host and which flag allows a name.
func TestHosts(t *testing.T) {
	r, err := New(Options{Listen: "rein-node-1:9090", Hosts: []string{"Rein.Internal."}, HostFlag: "--admin-host"})
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{
		"127.0.0.1:9090", "127.0.0.1", "10.1.2.3:9090", "[::1]:9090", "[::1]", "[::ffff:127.0.0.1]:9090",
		"localhost:9090", "LOCALHOST", "localhost.:9090", "rein-node-1:9090", "rein.internal:1", "REIN.internal:65535",
	} {
		if err := r.Check(request(host)); err != nil {
			t.Errorf("Host %q refused: %v", host, err)
		}
	}
	for _, host := range []string{
		"", "evil.example", "evil.example:9090", "evil.localhost:9090", "rein.internal.evil.example:9090",
		"127.0.0.1:9090.evil.example", "localhost:9090.evil.example", "[::1]:9090.evil.example", "127.0.0.1:evil",
		"127.0.0.1:", "[::1]:", "127.0.0.1:0", "127.0.0.1:65536", "127.0.0.1:99999", "127.0.0.1:123456", "127.0.0.1:-1",
		"127.0.0.1:+80", "127.0.0.1:0x50", "127.0.0.1: 80", "127.0.0.1:80:80", ":9090",
		"::1", "::1:9090", "[::1", "[::1]x", "[127.0.0.1]:9090", "[evil.example]:9090", "127.0.0.1.:9090",
		"2130706433:9090", "0x7f.0.0.1:9090",
	} {
		err := r.Check(request(host))
		if err == nil {
			t.Errorf("Host %q passed", host)
			continue
		}
		if !strings.Contains(err.Error(), `"`+host+`"`) || !strings.Contains(err.Error(), "rein serve --admin-host") {
			t.Errorf("Host %q: %v; want the Host and the flag named", host, err)
		}
	}
}

// TestOrigins: a request from a browser passes from the listener's own
// origin or an allowed one; another site's, the null origin, its own under
// the other scheme, and two Origin headers are refused.
func TestOrigins(t *testing.T) {
	r, err := New(Options{Origins: []string{"https://ops.example.com"}, HostFlag: "--http-host", OriginFlag: "--http-allowed-origins"})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range [][]string{nil, {"http://127.0.0.1:8080"}, {"HTTP://127.0.0.1:8080"}, {"https://ops.example.com"}} {
		req := request("127.0.0.1:8080")
		req.Header["Origin"] = o
		if err := r.Check(req); err != nil {
			t.Errorf("Origin %q refused: %v", o, err)
		}
	}
	for _, o := range [][]string{{"http://evil.example:8080"}, {"null"}, {"https://127.0.0.1:8080"}, {"http://ops.example.com"},
		{"http://127.0.0.1:8080", "http://127.0.0.1:8080"}} {
		req := request("127.0.0.1:8080")
		req.Header["Origin"] = o
		if err := r.Check(req); err == nil {
			t.Errorf("Origin %q passed", o)
		} else if len(o) == 1 && !strings.Contains(err.Error(), "--http-allowed-origins") {
			t.Errorf("Origin %q: %v; want the flag named", o, err)
		}
	}
}

// TestOptionsAreChecked: a host or an origin that is not one is refused
// with the flag and what to give instead; the twin passes.
func TestOptionsAreChecked(t *testing.T) {
	for _, o := range []Options{
		{Hosts: []string{"http://rein.internal"}},
		{Hosts: []string{"rein.internal:8080"}},
		{Hosts: []string{"[::1]"}},
		{Hosts: []string{""}},
		{Origins: []string{"ops.example.com"}},
		{Origins: []string{"https://ops.example.com/console"}},
		{Origins: []string{"ftp://ops.example.com"}},
	} {
		o.HostFlag, o.OriginFlag = "--a-host", "--an-origin"
		_, err := New(o)
		if err == nil || !strings.Contains(err.Error(), "give") || !strings.Contains(err.Error(), "--a") {
			t.Errorf("%+v: %v; want a refusal naming the flag and saying what to give", o, err)
		}
	}
	if _, err := New(Options{Hosts: []string{"rein.internal"}, Origins: []string{"https://ops.example.com:8443"}}); err != nil {
		t.Errorf("good options refused: %v", err)
	}
}

// TestAbsoluteFormIsRefused: a request whose target is an absolute URI
// naming the server (GET http://127.0.0.1:PORT/ HTTP/1.1), sent with a
// foreign Host header, is refused: Go's server would take the URI's
// authority for the Host. The twin, the same request in origin form with
// the server's address in Host, passes.
func TestAbsoluteFormIsRefused(t *testing.T) {
	srv := httptest.NewServer(Rule{}.Guard(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("served"))
	})))
	defer srv.Close()
	addr := srv.Listener.Addr().String()
	for _, tc := range []struct {
		request string
		want    int
	}{
		{"GET http://" + addr + "/metrics HTTP/1.1\r\nHost: evil.example\r\n", http.StatusForbidden},
		{"GET HTTP://" + addr + "/metrics HTTP/1.1\r\nHost: evil.example\r\n", http.StatusForbidden},
		{"GET http://" + addr + "/metrics HTTP/1.1\r\nHost: " + addr + "\r\n", http.StatusForbidden},
		{"GET /metrics HTTP/1.1\r\nHost: " + addr + "\r\n", http.StatusOK},
	} {
		code, body := raw(t, addr, tc.request+"Connection: close\r\n\r\n")
		if code != tc.want {
			t.Errorf("%q: %d %s; want %d", tc.request, code, body, tc.want)
		}
		if tc.want == http.StatusForbidden && (!strings.Contains(body, "not a path") || strings.Contains(body, "served")) {
			t.Errorf("%q: %q; want a refusal saying the target is not a path", tc.request, body)
		}
	}
}

// request is a GET of / with Host host, as a server reads it.
func request(host string) *http.Request {
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.Host = host
	return req
}

// raw sends request, bytes as they are, to addr and returns the response's
// status and body.
func raw(t *testing.T, addr, request string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(request)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestCrossSiteFetches: a request a browser marks as sent by a page on
// another site (an <img> or <script> to the admin port's pprof, with the
// listener's own Host and no Origin) is refused; the twins, a person's own
// navigation from a link, a same-origin or same-site fetch, and a request
// from no browser at all, pass.
func TestCrossSiteFetches(t *testing.T) {
	r, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		method, site, mode string
		refused            bool
	}{
		{http.MethodGet, "cross-site", "no-cors", true},
		{http.MethodGet, "cross-site", "cors", true},
		{http.MethodPost, "cross-site", "navigate", true},
		{http.MethodGet, "cross-site", "", true},
		{http.MethodGet, "cross-site", "navigate", false},
		{http.MethodGet, "same-origin", "cors", false},
		{http.MethodGet, "same-site", "no-cors", false},
		{http.MethodGet, "none", "navigate", false},
		{http.MethodGet, "", "", false},
	} {
		req := httptest.NewRequest(tc.method, "/debug/pprof/profile?seconds=30", nil)
		req.Host = "127.0.0.1:9090"
		if tc.site != "" {
			req.Header.Set("Sec-Fetch-Site", tc.site)
		}
		if tc.mode != "" {
			req.Header.Set("Sec-Fetch-Mode", tc.mode)
		}
		err := r.Check(req)
		if got := err != nil; got != tc.refused {
			t.Errorf("%s Sec-Fetch-Site %q, Sec-Fetch-Mode %q: refused %v (%v), want %v", tc.method, tc.site, tc.mode, got, err, tc.refused)
		}
		if err != nil && !strings.Contains(err.Error(), "another site") {
			t.Errorf("%s %q %q: %v; want it to say a page on another site may not call", tc.method, tc.site, tc.mode, err)
		}
	}
}
