package main

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// TestServeHTTPConsole: rein serve --http serves the console's page with
// its Content-Security-Policy, and RunService to a browser's Connect call
// on the same port, through the same authentication (here: no --tokens,
// so a loopback caller is the local admin).
func TestServeHTTPConsole(t *testing.T) {
	web := freeAddr(t)
	serveInProcess(t, newDB(t), "--http", web)
	resp, err := http.Get("http://" + web + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(page), "console.js") ||
		!strings.Contains(resp.Header.Get("Content-Security-Policy"), "script-src 'self'") {
		t.Fatalf("GET /: %d, CSP %q\n%s", resp.StatusCode, resp.Header.Get("Content-Security-Policy"), page)
	}
	req, _ := http.NewRequest(http.MethodPost, "http://"+web+"/rein.v1.RunService/GetServerInfo", strings.NewReader("{}"))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Connect-Protocol-Version", "1")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"principal":"local"`) {
		t.Fatalf("GetServerInfo over Connect: %d %s; want the local admin", resp.StatusCode, body)
	}
}

// The twin: an --http address already taken stops serve before it opens
// the store (exit 5, naming the flag).
func TestServeHTTPTaken(t *testing.T) {
	db := newDB(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	r := cli(t, "serve", "--db", db, "--listen", "127.0.0.1:0", "--http", taken.Addr().String()).mustExit(t, exitUnavailable)
	mustContain(t, "serve on a taken console port", r.stderr, "--http "+taken.Addr().String())
	mustNotExist(t, db)
}
