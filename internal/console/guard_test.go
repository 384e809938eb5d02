package console

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// call makes a POST to RunService's method with the given headers (Host
// among them) and body, and returns the status and the body.
func call(t *testing.T, url, method, body string, headers map[string]string) (int, string) {
	t.Helper()
	return send(t, url, method, strings.NewReader(body), int64(len(body)), headers)
}

// send posts body, of length bytes (unknown when negative), to
// RunService's method with headers (Host among them).
func send(t *testing.T, url, method string, body io.Reader, length int64, headers map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/rein.v1.RunService/"+method, body)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = length
	for k, v := range headers {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// connectHeaders are a Connect unary call's headers, with a token.
func connectHeaders(extra map[string]string) map[string]string {
	h := map[string]string{"Content-Type": "application/json", "Connect-Protocol-Version": "1", "Authorization": "Bearer t0k"}
	for k, v := range extra {
		h[k] = v
	}
	return h
}

// TestForeignHostsAndOriginsAreRefused: DNS rebinding. A request whose
// Host is a name this server was not told it answers to, or whose Origin
// is another site's, is refused with 403 before it reaches the gRPC
// server; IP addresses, localhost, the allowed names and the console's own
// origin pass.
func TestForeignHostsAndOriginsAreRefused(t *testing.T) {
	srv, seen := newConsoleWith(t, Options{Hosts: []string{"rein.internal"}, AllowedOrigins: []string{"https://ops.example.com"}})
	port := srv.URL[strings.LastIndex(srv.URL, ":"):]
	refused := map[string]map[string]string{
		"a rebound name":            {"Host": "evil.example" + port, "Origin": "http://evil.example" + port},
		"a rebound name, no Origin": {"Host": "evil.example" + port},
		"a subdomain of localhost":  {"Host": "evil.localhost" + port},
		"an allowed name's sibling": {"Host": "rein.internal.evil.example" + port},
		"another site's Origin":     {"Origin": "http://evil.example" + port},
		"the null Origin":           {"Origin": "null"},
		"an Origin of other scheme": {"Origin": "https://127.0.0.1" + port},
		"an allowed origin's http":  {"Origin": "http://ops.example.com"},
		"a port that is a name":     {"Host": "127.0.0.1" + port + ".evil.example"},
		"localhost, port a name":    {"Host": "localhost" + port + ".evil.example"},
		"port 0":                    {"Host": "127.0.0.1:0"},
		"port 65536":                {"Host": "127.0.0.1:65536"},
		"an empty port":             {"Host": "127.0.0.1:"},
		"an unbracketed IPv6":       {"Host": "::1" + port},
	}
	for name, h := range refused {
		code, body := call(t, srv.URL, "GetServerInfo", "{}", connectHeaders(h))
		if code != http.StatusForbidden {
			t.Errorf("%s: %d %s; want 403", name, code, body)
		}
	}
	if got := seen(); len(got) != 0 {
		t.Fatalf("refused requests reached the gRPC server: %v", got)
	}
	// The files, too: a rebound page learns nothing.
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
	req.Host = "evil.example" + port
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("GET / with a rebound Host: %d, want 403", resp.StatusCode)
	}

	// The twins: what passes.
	passed := map[string]map[string]string{
		"the listen address":       {},
		"localhost":                {"Host": "localhost" + port},
		"an allowed name":          {"Host": "REIN.internal" + port},
		"another IP address":       {"Host": "[::1]" + port},
		"an IP address, no port":   {"Host": "127.0.0.1"},
		"the highest port":         {"Host": "127.0.0.1:65535"},
		"the console's own origin": {"Origin": srv.URL},
		"an allowed origin":        {"Origin": "https://ops.example.com"},
		"an allowed name's origin": {"Host": "rein.internal" + port, "Origin": "http://rein.internal" + port},
	}
	for name, h := range passed {
		code, body := call(t, srv.URL, "GetServerInfo", "{}", connectHeaders(h))
		if code != http.StatusOK {
			t.Errorf("%s: %d %s; want 200", name, code, body)
		}
	}
}

// TestAbsoluteFormIsRefused: a call whose request target is an absolute
// URI naming the server (POST http://127.0.0.1:PORT/… HTTP/1.1) with a
// rebound name in its Host header is refused with 403 before it reaches
// the gRPC server: Go's server would take the URI's authority for Host.
// The twin: the same call in origin form passes.
func TestAbsoluteFormIsRefused(t *testing.T) {
	srv, seen := newConsole(t)
	addr := srv.Listener.Addr().String()
	call := func(target, host string) (int, string) {
		return raw(t, addr, "POST "+target+" HTTP/1.1\r\nHost: "+host+"\r\nContent-Type: application/json\r\n"+
			"Connect-Protocol-Version: 1\r\nAuthorization: Bearer t0k\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
	}
	const path = "/rein.v1.RunService/GetServerInfo"
	for _, host := range []string{"evil.example", addr} {
		if code, body := call("http://"+addr+path, host); code != http.StatusForbidden || !strings.Contains(body, "not a path") {
			t.Errorf("absolute form, Host %s: %d %s; want 403 saying the target is not a path", host, code, body)
		}
	}
	if got := seen(); len(got) != 0 {
		t.Fatalf("refused requests reached the gRPC server: %v", got)
	}
	if code, body := call(path, addr); code != http.StatusOK {
		t.Errorf("origin form: %d %s; want 200", code, body)
	}
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

// TestFormsCannotCall: the CSRF defence. What an HTML form can send (its
// three content types), and a Connect unary call without its protocol
// header, is refused with 415 before it reaches the gRPC server, whatever
// its Origin; the console's own calls pass.
func TestFormsCannotCall(t *testing.T) {
	srv, seen := newConsole(t)
	for _, h := range []map[string]string{
		{"Content-Type": "application/x-www-form-urlencoded"},
		{"Content-Type": "multipart/form-data; boundary=x"},
		{"Content-Type": "text/plain"},
		{"Content-Type": "text/plain", "Connect-Protocol-Version": "1"},
		{"Content-Type": ""},
		{"Content-Type": "application/json"}, // no Connect-Protocol-Version
		{"Content-Type": "application/json", "Connect-Protocol-Version": "2"},
	} {
		h["Authorization"] = "Bearer t0k"
		code, body := call(t, srv.URL, "GetServerInfo", "{}", h)
		if code != http.StatusUnsupportedMediaType {
			t.Errorf("%v: %d %s; want 415", h, code, body)
		}
	}
	if got := seen(); len(got) != 0 {
		t.Fatalf("form posts reached the gRPC server: %v", got)
	}
	if code, body := call(t, srv.URL, "GetServerInfo", "{}", connectHeaders(nil)); code != http.StatusOK {
		t.Fatalf("the console's own call: %d %s", code, body)
	}
}

// TestSiteOptionsAreChecked: a host or an origin that is not one is
// refused with what to give instead.
func TestSiteOptionsAreChecked(t *testing.T) {
	for _, o := range []Options{
		{Hosts: []string{"http://rein.internal"}},
		{Hosts: []string{"rein.internal:8080"}},
		{Hosts: []string{""}},
		{AllowedOrigins: []string{"ops.example.com"}},
		{AllowedOrigins: []string{"https://ops.example.com/console"}},
		{AllowedOrigins: []string{"ftp://ops.example.com"}},
	} {
		err := o.Check()
		if err == nil || !strings.Contains(err.Error(), "give") {
			t.Errorf("%+v: %v; want a refusal saying what to give", o, err)
		}
	}
	if err := (Options{Hosts: []string{"rein.internal"}, AllowedOrigins: []string{"https://ops.example.com:8443"}}).Check(); err != nil {
		t.Errorf("good options refused: %v", err)
	}
}
