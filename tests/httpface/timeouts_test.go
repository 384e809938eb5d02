package httpface_test

import (
	"bufio"
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

// TestStalledConnectionsAreClosed: the HTTP face's timeouts and its cap on
// connections per client. A connection whose headers stop half-way, one
// whose body stops half-way, and one left idle after a call are each
// closed on their timeout (1s here); past --http-max-conns-per-client, a
// client's new connection is closed at once. The twins: a connection
// that stays within its timeouts is served, and another client's is.
func TestStalledConnectionsAreClosed(t *testing.T) {
	srv := serve(t, "--http-read-header-timeout", "1s", "--http-read-timeout", "1s", "--http-idle-timeout", "1s", "--http-max-conns-per-client", "4")

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
	if _, err := io.WriteString(idle, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(idle), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET / on the idle connection: %v %v", resp, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)

	// A fourth connection, the last under the cap, held open by calls.
	live := dial(t, srv.web)
	// A fifth from the same address is over the cap: closed at once.
	over := dial(t, srv.web)
	if !closedWithin(t, over, 5*time.Second) {
		t.Error("a fifth connection from one address was kept open past --http-max-conns-per-client 4")
	}

	for name, c := range map[string]net.Conn{"half-sent headers": headers, "a half-sent body": body, "an idle connection": idle} {
		if !closedWithin(t, c, 15*time.Second) {
			t.Errorf("%s was still open 15s after its 1s timeout", name)
		}
	}
	// The twin: a connection that keeps within its timeouts is served,
	// call after call.
	for i := range 3 {
		if _, err := io.WriteString(live, "POST /rein.v1.RunService/GetServerInfo HTTP/1.1\r\nHost: 127.0.0.1\r\n"+
			"Content-Type: application/json\r\nConnect-Protocol-Version: 1\r\nContent-Length: 2\r\n\r\n{}"); err != nil {
			t.Fatalf("call %d on a live connection: %v", i, err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(live), nil)
		if err != nil {
			t.Fatalf("call %d on a live connection: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "local") {
			t.Fatalf("call %d on a live connection: %d %s", i, resp.StatusCode, b)
		}
		time.Sleep(500 * time.Millisecond) // under the idle timeout
	}
}
