package console

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
)

// upload is a request of client addr whose body declares n bytes.
func upload(addr string, n int64) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/rein.v1.RunService/GetServerInfo", strings.NewReader("{"))
	r.RemoteAddr = addr
	r.ContentLength = n
	return r
}

// TestStalledUploadsDoNotStallOtherClients: the report's attack on the
// body budget. One client (127.0.0.2) opens five uploads that each declare
// the whole limit and send one byte; while they stall, another client's
// request is given room at once (within a minute's deadline; before, it
// waited half the read timeout and was refused). The twin: the stalling
// client itself holds no more than its share: past it, its own requests
// are refused resource_exhausted, saying so.
func TestStalledUploadsDoNotStallOtherClients(t *testing.T) {
	const limit = 64<<10 + envelopeBytes
	b := newBodyBudget(0, limit-envelopeBytes)
	var held, refused int
	for i := range 5 {
		release, err := b.acquire(upload("127.0.0.2:4000", limit), limit, 100*time.Millisecond)
		if err != nil {
			if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "this client (127.0.0.2) has as many request bodies in flight as one client may") {
				t.Fatalf("the stalling client's upload %d: %v; want resource_exhausted naming its share", i, err)
			}
			refused++
			continue
		}
		held++
		defer release()
	}
	if held != 1 || refused != 4 {
		t.Errorf("the stalling client holds %d uploads of the limit and was refused %d; want 1 and 4 (its share is one)", held, refused)
	}
	release, err := b.acquire(upload("127.0.0.1:5000", 2), limit, 2*time.Minute)
	if err != nil {
		t.Fatalf("another client's request while the uploads stall: %v", err)
	}
	release()
	// Another client's uploads of the limit fit too: the budget is not
	// the stalling client's.
	for i := range 2 {
		release, err := b.acquire(upload(fmt.Sprintf("10.0.0.%d:1", i+1), limit), limit, 2*time.Minute)
		if err != nil {
			t.Fatalf("client 10.0.0.%d's upload: %v", i+1, err)
		}
		defer release()
	}
}

// TestClientSharesAreForgotten: a client's share is dropped once none of
// its requests holds or waits for room, so the map of shares does not
// grow with the clients ever seen.
func TestClientSharesAreForgotten(t *testing.T) {
	b := newBodyBudget(0, 64<<10)
	for i := range 100 {
		release, err := b.acquire(upload(fmt.Sprintf("10.0.%d.%d:1", i/250, i%250), 100), 64<<10, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		release()
		release() // once, however often
	}
	if _, err := b.acquire(upload("10.9.9.9:1", 64<<10), 64<<10, 100*time.Millisecond); err != nil {
		t.Fatalf("a request of the whole share, after the others gave theirs back: %v", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.clients) != 1 {
		t.Fatalf("%d shares kept; want the one still held", len(b.clients))
	}
}

// dialFrom connects to the console at url from the local address ip.
func dialFrom(t *testing.T, url, ip string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	c, err := d.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Skipf("cannot connect from %s (a loopback address other than 127.0.0.1): %v", ip, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// stall starts an upload of GetServerInfo on c declaring n bytes, asking
// the server to say when it reads the body (Expect: 100-continue), and
// returns a reader of its answers.
func stall(t *testing.T, c net.Conn, n int) *bufio.Reader {
	t.Helper()
	if _, err := fmt.Fprintf(c, "POST /rein.v1.RunService/GetServerInfo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"+
		"Connect-Protocol-Version: 1\r\nAuthorization: Bearer t0k\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n", n); err != nil {
		t.Fatal(err)
	}
	return bufio.NewReader(c)
}

// TestStalledUploadsOverHTTP: the same over the console's HTTP face. One
// client's five uploads of the limit stall, one of them being read (the
// server sent it 100 Continue: it holds its room); another client's call
// is served (before, it waited half the read timeout, 10s here, and was
// refused 429: the uploads held the budget for the whole 20s).
// The twin: the stalling client's own next call is refused 429, saying it
// holds its share.
func TestStalledUploadsOverHTTP(t *testing.T) {
	const limit = 64 << 10
	for _, tc := range []struct {
		name    string
		timeout time.Duration
	}{{"another client", 20 * time.Second}, {"the same client", 2 * time.Second}} {
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := newConsoleWith(t, Options{MaxBodyBytes: limit, ReadTimeout: tc.timeout})
			answers := make(chan string, 5)
			for range 5 {
				r := stall(t, dialFrom(t, srv.URL, "127.0.0.2"), limit)
				go func() {
					line, _ := r.ReadString('\n')
					answers <- line
				}()
			}
			select {
			case line := <-answers:
				if !strings.Contains(line, "100 Continue") {
					t.Fatalf("a stalled upload's first answer: %q; want 100 Continue", line)
				}
			case <-time.After(time.Minute):
				t.Fatal("no stalled upload was read within a minute")
			}
			from := "127.0.0.1"
			if tc.name == "the same client" {
				from = "127.0.0.2"
			}
			c := dialFrom(t, srv.URL, from)
			if _, err := io.WriteString(c, "POST /rein.v1.RunService/GetServerInfo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"+
				"Connect-Protocol-Version: 1\r\nAuthorization: Bearer t0k\r\nContent-Length: 2\r\n\r\n{}"); err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(time.Minute))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("%s's call while the uploads stall: %v", tc.name, err)
			}
			defer resp.Body.Close()
			b := make([]byte, 4096)
			n, _ := resp.Body.Read(b)
			switch tc.name {
			case "another client":
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("another client's call while the uploads stall: %d %s; want 200", resp.StatusCode, b[:n])
				}
			default:
				if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(b[:n]), "this client (127.0.0.2)") {
					t.Fatalf("the stalling client's next call: %d %s; want 429 naming its share", resp.StatusCode, b[:n])
				}
			}
		})
	}
}
