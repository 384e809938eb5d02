package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sync/semaphore"
)

// A request's body costs the server several times its size while it is
// read, inflated and transcoded; the per-request limit alone would let
// many callers at once (or one HTTP/2 connection's many streams) hold
// gigabytes. bodyBudget bounds the bodies held at once, by weight: a
// request weighs its Content-Length, or the whole limit when its length
// is unknown or it is compressed (it may inflate that far), and at least
// minBodyWeight.
//
// A request takes its weight before its body arrives, and holds it while
// the body trickles in, up to the read timeout. So that a client sending
// slowly (or not at all) cannot make the others wait, each client (an IPv4
// address, an IPv6 /64: clientKey) holds at most its share of the budget,
// a quarter of it and at least one request of the limit; what a client
// asks past its share waits for its own requests, never for another's.

// minBodyWeight is the least a request weighs: its headers and buffers.
const minBodyWeight = 4 << 10

// clientShares is how many clients' full shares the budget holds.
const clientShares = 4

type bodyBudget struct {
	all   *semaphore.Weighted
	total int64
	// share is the most one client holds at once.
	share int64
	// mu guards clients: the share of each client holding or waiting
	// for room.
	mu      sync.Mutex
	clients map[string]*clientShare
}

// clientShare is one client's share of the budget.
type clientShare struct {
	sem   *semaphore.Weighted
	users int // requests holding or waiting for room in sem
}

func newBodyBudget(total, limit int64) *bodyBudget {
	if total <= 0 {
		total = 4 * limit
	}
	total = max(total, limit+envelopeBytes) // one request of the limit always fits
	share := min(max(total/clientShares, limit+envelopeBytes), total)
	return &bodyBudget{all: semaphore.NewWeighted(total), total: total, share: share, clients: map[string]*clientShare{}}
}

// weight is what r is counted as while it is held, under a body limit of
// limit bytes.
func weight(r *http.Request, limit int64) int64 {
	n := limit
	if r.ContentLength >= 0 && !compressed(r) {
		n = r.ContentLength
	}
	return min(max(n, minBodyWeight), limit)
}

// compressed says whether r's message may be compressed.
func compressed(r *http.Request) bool {
	for _, h := range []string{"Content-Encoding", "Connect-Content-Encoding", "Grpc-Encoding"} {
		if v := r.Header.Get(h); v != "" && v != "identity" {
			return true
		}
	}
	return false
}

// acquire waits up to half of timeout (the read timeout: a request that
// waited cannot take longer than its body may) for room for r, whose body
// may be limit bytes long, first in its client's share, then in the
// budget; it returns what gives the room back (once, however often it is
// called).
func (b *bodyBudget) acquire(r *http.Request, limit int64, timeout time.Duration) (release func(), err error) {
	n := min(weight(r, limit), b.share)
	ctx := r.Context()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout/2)
		defer cancel()
	}
	key := clientKeyOf(r.RemoteAddr)
	mine := b.enter(key)
	if err := mine.sem.Acquire(ctx, n); err != nil {
		b.leave(key)
		return nil, waited(err, fmt.Errorf(
			"this client (%s) has as many request bodies in flight as one client may (%d bytes of the server's %d): send each body whole, at once, and fewer at a time; retry once its calls in flight are answered",
			key, b.share, b.total))
	}
	if err := b.all.Acquire(ctx, n); err != nil {
		mine.sem.Release(n)
		b.leave(key)
		return nil, waited(err, fmt.Errorf("the server holds as many request bodies as it may at once (%d bytes); retry in a moment", b.total))
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			b.all.Release(n)
			mine.sem.Release(n)
			b.leave(key)
		})
	}, nil
}

// waited is the refusal of a request that waited for room: full, when the
// wait timed out.
func waited(err, full error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return connect.NewError(connect.CodeResourceExhausted, full)
	}
	return connect.NewError(connect.CodeCanceled, err)
}

// enter is the share of client key, counting one more request in it.
func (b *bodyBudget) enter(key string) *clientShare {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.clients[key]
	if c == nil {
		c = &clientShare{sem: semaphore.NewWeighted(b.share)}
		b.clients[key] = c
	}
	c.users++
	return c
}

// leave counts one request fewer in client key's share, and forgets the
// share once no request holds or waits for room in it.
func (b *bodyBudget) leave(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c := b.clients[key]; c != nil {
		if c.users--; c.users <= 0 {
			delete(b.clients, key)
		}
	}
}

// releasingWriter gives the request's room back at its first response
// byte: by then its message was transcoded and handed on.
type releasingWriter struct {
	http.ResponseWriter
	release func()
}

func (w *releasingWriter) WriteHeader(code int) {
	w.release()
	w.ResponseWriter.WriteHeader(code)
}

func (w *releasingWriter) Write(p []byte) (int, error) {
	w.release()
	return w.ResponseWriter.Write(p)
}

func (w *releasingWriter) Flush() {
	w.release()
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *releasingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// closeUnread asks an HTTP/1 connection to close after a refusal that left
// the body unread. The server still drains a little of the body (so that
// a client sending it promptly reads the refusal rather than a reset),
// but for at most drainTimeout: a client trickling it cannot hold the
// connection open past every timeout.
func closeUnread(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor == 1 && r.ContentLength != 0 {
		w.Header().Set("Connection", "close")
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(drainTimeout))
	}
}

// drainTimeout bounds the drain of a refused request's unread body.
const drainTimeout = time.Second
