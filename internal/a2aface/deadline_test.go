package a2aface

import (
	"bufio"
	"context"
	"iter"
	"net"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
)

// bigStream is a request handler whose every subscription yields n
// status updates of 64 KiB each, then reports how many were taken and
// whether the transport took them all.
type bigStream struct {
	a2asrv.RequestHandler // nil: only SubscribeToTask is called
	n                     int
	ended                 chan int
}

func (b *bigStream) SubscribeToTask(ctx context.Context, req *a2a.SubscribeToTaskRequest) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		info := a2a.TaskInfo{TaskID: req.ID, ContextID: "c"}
		big := strings.Repeat("x", 64<<10)
		taken := 0
		defer func() { b.ended <- taken }()
		for range b.n {
			if !yield(a2a.NewStatusUpdateEvent(info, a2a.TaskStateWorking, statusMessage(info, big)), nil) {
				return
			}
			taken++
		}
	}
}

// TestSlowClientLosesItsStream: an A2A stream (the SDK's JSON-RPC
// transport behind the face's guard) to a client that never reads makes
// a write block; the write's deadline ends the stream, and the request's
// context with it, having taken no more updates than the connection's
// buffers hold. The twin: a client that reads gets every update.
func TestSlowClientLosesItsStream(t *testing.T) {
	const updates = 256 // 16 MiB, far past any socket buffer
	for _, reads := range []bool{false, true} {
		b := &bigStream{n: updates, ended: make(chan int, 1)}
		f := New(Options{WriteTimeout: 2 * time.Second})
		hs := httptest.NewServer(f.mounts(b)[RPCPath])
		conn, err := net.Dial("tcp", hs.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if !reads {
			_ = conn.(*net.TCPConn).SetReadBuffer(4 << 10)
		}
		body := `{"jsonrpc":"2.0","id":1,"method":"SubscribeToTask","params":{"id":"t1"}}`
		req := "POST /a2a HTTP/1.1\r\nHost: " + hs.Listener.Addr().String() + "\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
		if _, err := conn.Write([]byte(req)); err != nil {
			t.Fatal(err)
		}
		events := make(chan int, 1)
		if reads {
			go func() {
				n := 0
				sc := bufio.NewScanner(conn)
				sc.Buffer(make([]byte, 256<<10), 1<<20)
				for n < updates && sc.Scan() {
					if strings.HasPrefix(sc.Text(), "data:") {
						n++
					}
				}
				events <- n
			}()
		}
		var taken int
		select {
		case taken = <-b.ended:
		case <-time.After(60 * time.Second):
			t.Fatalf("reads=%v: the stream did not end", reads)
		}
		if !reads && taken >= updates {
			t.Errorf("a client that never reads: the stream took all %d updates, want it ended by a write that blocked", taken)
		}
		if reads {
			if taken != updates {
				t.Errorf("a client that reads: the stream ended after %d of %d updates", taken, updates)
			}
			if n := <-events; n != updates {
				t.Errorf("a client that reads got %d events, want %d", n, updates)
			}
		}
		conn.Close()
		hs.Close()
	}
}
