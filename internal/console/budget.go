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

// minBodyWeight is the least a request weighs: its headers and buffers.
const minBodyWeight = 4 << 10

type bodyBudget struct {
	sem   *semaphore.Weighted
	total int64
}

func newBodyBudget(total, limit int64) *bodyBudget {
	if total <= 0 {
		total = 4 * limit
	}
	total = max(total, limit+envelopeBytes) // one request of the limit always fits
	return &bodyBudget{sem: semaphore.NewWeighted(total), total: total}
}

// weight is what r is counted as while it is held.
func weight(r *http.Request, limit int64) int64 {
	n := limit + envelopeBytes
	if r.ContentLength >= 0 && !compressed(r) {
		n = r.ContentLength
	}
	return min(max(n, minBodyWeight), limit+envelopeBytes)
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
// waited cannot take longer than its body may) for room for r, and returns
// what gives the room back (once, however often it is called).
func (b *bodyBudget) acquire(r *http.Request, limit int64, timeout time.Duration) (release func(), err error) {
	n := min(weight(r, limit), b.total)
	ctx := r.Context()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout/2)
		defer cancel()
	}
	if err := b.sem.Acquire(ctx, n); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf(
				"the server holds as many request bodies as it may at once (%d bytes); retry in a moment", b.total))
		}
		return nil, connect.NewError(connect.CodeCanceled, err)
	}
	var once sync.Once
	return func() { once.Do(func() { b.sem.Release(n) }) }, nil
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
