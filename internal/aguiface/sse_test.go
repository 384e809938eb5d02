package aguiface

import (
	"bufio"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestSlowClientLosesItsStream: a client that never reads makes a write
// block; the write's deadline ends the stream with an error, having
// written no more than the connection's buffers hold. The twin: a client
// that reads gets every flush.
func TestSlowClientLosesItsStream(t *testing.T) {
	for _, reads := range []bool{false, true} {
		ended := make(chan error, 1)
		written := make(chan int, 1)
		big := strings.Repeat("x", 64<<10)
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s := &sse{w: w, rc: http.NewResponseController(w), timeout: 2 * time.Second}
			n := 0
			for range 256 { // 16 MiB, far past any socket buffer
				s.add("", event{"type": "CUSTOM", "name": "big", "value": big})
				if err := s.flush(); err != nil {
					written <- n
					ended <- err
					return
				}
				n += len(big)
			}
			written <- n
			ended <- nil
		}))
		conn, err := net.Dial("tcp", hs.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if !reads {
			_ = conn.(*net.TCPConn).SetReadBuffer(4 << 10)
		}
		if _, err := conn.Write([]byte("GET /agui/runs/x HTTP/1.1\r\nHost: " + hs.Listener.Addr().String() + "\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		if reads {
			go func() {
				br := bufio.NewReader(conn)
				buf := make([]byte, 64<<10)
				for {
					if _, err := br.Read(buf); err != nil {
						return
					}
				}
			}()
		}
		var err2 error
		select {
		case err2 = <-ended:
		case <-time.After(60 * time.Second):
			t.Fatalf("reads=%v: the stream did not end", reads)
		}
		n := <-written
		if !reads && (err2 == nil || n >= 16<<20) {
			t.Errorf("a client that never reads: the stream wrote %d bytes and ended with %v, want a write error before the end", n, err2)
		}
		if reads && err2 != nil {
			t.Errorf("a client that reads: the stream ended with %v after %d bytes", err2, n)
		}
		conn.Close()
		hs.Close()
	}
}
