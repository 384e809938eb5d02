package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// TestServeListenersRefuseForeignHosts: every HTTP listener of rein serve
// (the console's --http and the operators' --admin-listen, with --pprof)
// applies one Host rule. A rebound name, a Host whose port is a name
// (127.0.0.1:PORT.evil.example), a port out of range and an absolute-form
// request target naming the server with a foreign Host header are refused
// with 403 on each, naming the flag that allows a name. The twins: the
// listen address, localhost, [::1] and, on the admin port, an
// --admin-host name pass; that name is the admin port's alone.
func TestServeListenersRefuseForeignHosts(t *testing.T) {
	admin, web := freeAddr(t), freeAddr(t)
	serveInProcess(t, newDB(t), "--admin-listen", admin, "--pprof", "--admin-host", "prometheus-target.internal", "--http", web)
	for _, l := range []struct {
		addr, path, flag string
	}{
		{admin, "/metrics", "--admin-host"},
		{admin, "/debug/pprof/goroutine?debug=2", "--admin-host"},
		{web, "/", "--http-host"},
	} {
		_, port, _ := net.SplitHostPort(l.addr)
		for _, host := range []string{
			"evil.example:" + port, "127.0.0.1:" + port + ".evil.example", "localhost:" + port + ".evil.example",
			"127.0.0.1:0", "127.0.0.1:65536", "127.0.0.1:99999", "127.0.0.1:",
		} {
			code, body := rawHTTP(t, l.addr, "GET "+l.path+" HTTP/1.1\r\nHost: "+host+"\r\nConnection: close\r\n\r\n")
			if code != http.StatusForbidden || !strings.Contains(body, `"`+host+`"`) || !strings.Contains(body, "rein serve "+l.flag) {
				t.Errorf("%s%s with Host %s: %d %.100q; want 403 naming the Host and %s", l.addr, l.path, host, code, body, l.flag)
			}
		}
		code, body := rawHTTP(t, l.addr, "GET http://"+l.addr+l.path+" HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n")
		if code != http.StatusForbidden || !strings.Contains(body, "not a path") {
			t.Errorf("GET http://%s%s with Host evil.example: %d %.100q; want 403", l.addr, l.path, code, body)
		}

		allowed := []string{l.addr, "localhost:" + port, "[::1]:" + port}
		if l.addr == admin {
			allowed = append(allowed, "prometheus-target.internal:"+port)
		} else {
			code, _ := rawHTTP(t, l.addr, "GET "+l.path+" HTTP/1.1\r\nHost: prometheus-target.internal:"+port+"\r\nConnection: close\r\n\r\n")
			if code != http.StatusForbidden {
				t.Errorf("%s%s with the --admin-host name: %d, want 403", l.addr, l.path, code)
			}
		}
		for _, host := range allowed {
			if code, body := rawHTTP(t, l.addr, "GET "+l.path+" HTTP/1.1\r\nHost: "+host+"\r\nConnection: close\r\n\r\n"); code != http.StatusOK {
				t.Errorf("%s%s with Host %s: %d %.100q; want 200", l.addr, l.path, host, code, body)
			}
		}
	}
}

// TestServeAdminHostRefused: --admin-host without --admin-listen, or with
// a value that is not a host name, is refused before the store opens
// (exit 2, naming the flag). The twin is the test above.
func TestServeAdminHostRefused(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--admin-host", "prometheus-target.internal"}, "--admin-host is for the admin port"},
		{[]string{"--admin-listen", "127.0.0.1:0", "--admin-host", "http://prometheus-target.internal"}, `--admin-host "http://prometheus-target.internal": give a host name`},
		{[]string{"--admin-listen", "127.0.0.1:0", "--admin-host", "prometheus-target.internal:9090"}, "--admin-host"},
	} {
		db := newDB(t)
		r := cli(t, append([]string{"serve", "--db", db, "--listen", "127.0.0.1:0"}, tc.args...)...).mustExit(t, exitUsage)
		mustContain(t, strings.Join(tc.args, " "), r.stderr, tc.want)
		mustNotExist(t, db)
	}
}

// rawHTTP sends request, bytes as they are, to addr and returns the
// response's status and body.
func rawHTTP(t *testing.T, addr, request string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, request); err != nil {
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
