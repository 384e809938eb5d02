package httpface_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// closedWithin reports whether the server closes c within d: a read
// returns (EOF, a reset, or an answer followed by EOF) before then.
func closedWithin(t *testing.T, c net.Conn, d time.Duration) bool {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	return true
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// getInfo makes a GetServerInfo call on c and fails the test unless it is
// served.
func getInfo(t *testing.T, c net.Conn, what string) {
	t.Helper()
	if _, err := io.WriteString(c, "POST /rein.v1.RunService/GetServerInfo HTTP/1.1\r\nHost: 127.0.0.1\r\n"+
		"Content-Type: application/json\r\nConnect-Protocol-Version: 1\r\nContent-Length: 2\r\n\r\n{}"); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "local") {
		t.Fatalf("%s: %d %s", what, resp.StatusCode, b)
	}
}

// TestStalledConnectionsAreClosed: the HTTP face's timeouts. A connection
// whose headers stop half-way, one whose body stops half-way, and one left
// idle after a call are each closed on their timeout (1s here). The twin:
// a connection that keeps within its timeouts is served, call after call.
func TestStalledConnectionsAreClosed(t *testing.T) {
	srv := serve(t, "--http-read-header-timeout", "1s", "--http-read-timeout", "1s", "--http-idle-timeout", "1s")

	headers := dial(t, srv.web)
	if _, err := io.WriteString(headers, "POST /rein.v1.RunService/GetServerInfo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: appl"); err != nil {
		t.Fatal(err)
	}
	body := dial(t, srv.web)
	if _, err := io.WriteString(body, "POST /rein.v1.RunService/GetServerInfo HTTP/1.1\r\nHost: 127.0.0.1\r\n"+
		"Content-Type: application/json\r\nConnect-Protocol-Version: 1\r\nContent-Length: 100\r\n\r\n{\"pad\":"); err != nil {
		t.Fatal(err)
	}
	idle := dial(t, srv.web)
	getInfo(t, idle, "the call before the idle wait")
	for name, c := range map[string]net.Conn{"half-sent headers": headers, "a half-sent body": body, "an idle connection": idle} {
		if !closedWithin(t, c, 15*time.Second) {
			t.Errorf("%s was still open 15s after its 1s timeout", name)
		}
	}
	live := dial(t, srv.web)
	for i := range 3 {
		getInfo(t, live, fmt.Sprintf("call %d on a live connection", i))
		time.Sleep(400 * time.Millisecond) // the input, not a wait: idle under the 1s timeout, and 3 calls outlast it
	}
}

// TestConnectionsPerClientAreCapped: past --http-max-conns-per-client, a
// client's new connection is closed as it is accepted, long before any
// timeout (10s for headers here). The twin: once one of its connections
// closes, the client may open another, and it is served.
func TestConnectionsPerClientAreCapped(t *testing.T) {
	srv := serve(t, "--http-max-conns-per-client", "4")
	held := make([]net.Conn, 4)
	for i := range held {
		held[i] = dial(t, srv.web)
		getInfo(t, held[i], fmt.Sprintf("connection %d of 4", i+1))
	}
	over := dial(t, srv.web)
	if !closedWithin(t, over, 3*time.Second) {
		t.Fatal("a fifth connection from one address was kept open past --http-max-conns-per-client 4")
	}
	held[0].Close()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		c := dial(t, srv.web)
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err == nil {
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil && resp.StatusCode == http.StatusOK {
				return
			}
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("after one of four connections closed, a new one was still refused")
		}
		<-tick.C
	}
}
