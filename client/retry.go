package client

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The client owns two retries, each for what only waiting can fix; nothing
// else is retried:
//
//   - a unary call answered ResourceExhausted with a google.rpc.RetryInfo
//     (over the rate, a full disk) is sent again after the delay the server
//     gave, up to MaxRetryInfoAttempts times, never past ctx's deadline
//     (Dial installs it);
//   - Retry sends a call again while the server is Unavailable, for as long
//     as its ctx and Backoff.Patience allow; it is for calls that are safe to repeat (a StartRun
//     with its request ID, a read), and the caller chooses them.

// MaxRetryInfoAttempts bounds how many times a unary call is sent when the
// server keeps answering ResourceExhausted with a RetryInfo.
const MaxRetryInfoAttempts = 4

// RetryDelay is the delay of the google.rpc.RetryInfo err carries, and
// whether it carries one.
func RetryDelay(err error) (time.Duration, bool) {
	st, ok := status.FromError(err)
	if !ok || err == nil {
		return 0, false
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return max(ri.GetRetryDelay().AsDuration(), 0), true
		}
	}
	return 0, false
}

// honourRetryInfo retries a unary call answered ResourceExhausted with a
// RetryInfo, after its delay (plus a little jitter, so that callers refused
// together do not come back together). A delay that would pass ctx's
// deadline returns the error at once; so does an error without RetryInfo
// (a message over the size limit: waiting does not fix it).
func honourRetryInfo(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	for attempt := 1; ; attempt++ {
		err := lostAnswer(invoker(ctx, method, req, reply, cc, opts...))
		if status.Code(err) != codes.ResourceExhausted || attempt == MaxRetryInfoAttempts {
			return err
		}
		delay, ok := RetryDelay(err)
		if !ok {
			return err
		}
		delay += rand.N(delay/10 + 1)
		if deadline, has := ctx.Deadline(); has && time.Until(deadline) < delay {
			return err
		}
		if !sleep(ctx, delay) {
			return err
		}
	}
}

// lostAnswer is err, or Unavailable for a bare io.EOF: grpc-go may return
// io.EOF from a unary call whose connection ended as the request was sent
// (the server died or closed it; grpc/grpc-go#7230), which is the server
// being unavailable, and says so, so that a caller's retry of Unavailable
// covers it.
func lostAnswer(err error) error {
	if errors.Is(err, io.EOF) {
		return status.Error(codes.Unavailable, "the connection to the server ended before it answered (EOF): the call may or may not have been applied; retry it where that is safe (a StartRun with its request ID, a read)")
	}
	return err
}

// sleep waits d, or until ctx ends (then it returns false).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Retry calls fn until it returns anything but Unavailable, waiting between
// tries as Options.Backoff says (doubling, with jitter), for as long as ctx
// and Backoff.Patience (counted from the first Unavailable) allow. Given up,
// it returns the last Unavailable, which says why the server could not be
// reached, rather than ctx's error. fn must be safe to repeat: a call whose
// answer was lost may have been applied (StartRun's request ID makes a start
// so).
func (c *Client) Retry(ctx context.Context, fn func(context.Context) error) error {
	wait := c.backoff.Min
	var unavailable error
	var since time.Time
	for {
		err := fn(ctx)
		if status.Code(err) != codes.Unavailable {
			if err != nil && unavailable != nil && ctx.Err() != nil {
				return unavailable // ctx ended the try, not the server
			}
			return err
		}
		if unavailable == nil {
			since = time.Now()
		}
		unavailable = err
		pause := wait/2 + rand.N(wait/2+1)
		if p := c.backoff.Patience; p > 0 && time.Since(since)+pause > p {
			return err
		}
		if !sleep(ctx, pause) {
			return err
		}
		wait = min(2*wait, c.backoff.Max)
	}
}
