package mcp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Reconnection backoff: after an attempt to reconnect, the next one waits
// minBackoff, doubling with every attempt to maxBackoff, until a tool call
// succeeds. A server that dies at once is thus started a few times a
// minute at most, never in a loop.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// ErrUnreachable marks a call that found the MCP server down (its process
// exited, its session ended) and was not sent, or whose connection closed
// before the answer. rein reconnects at a later call.
var ErrUnreachable = errors.New("the MCP server is unreachable")

// session is one session with the server: one process of a stdio server,
// one session of an HTTP one.
type session struct {
	cs *sdk.ClientSession
	// ended is closed when the session has ended; broken when a call on it
	// found its connection closed, which may come first.
	ended     chan struct{}
	broken    chan struct{}
	breakOnce sync.Once
}

func (s *session) dead() bool {
	select {
	case <-s.ended:
		return true
	case <-s.broken:
		return true
	default:
		return false
	}
}

func (s *session) markBroken() { s.breakOnce.Do(func() { close(s.broken) }) }

// watch makes cs the session s, whose end is noticed and logged.
func (c *Client) watch(cs *sdk.ClientSession) *session {
	s := &session{cs: cs, ended: make(chan struct{}), broken: make(chan struct{})}
	go func() {
		err := cs.Wait()
		close(s.ended)
		c.sessMu.Lock()
		closed := c.closed
		c.sessMu.Unlock()
		if !closed {
			c.logger.Warn("MCP server session ended; rein reconnects at the next call",
				"server", c.name, "error", err, "stderr", c.stderr.WholeLines())
		}
	}()
	return s
}

// live is the session to call the server on: the current one, or a new one
// when it is dead and the backoff allows. It fails with ErrUnreachable when
// the server cannot be reached now; nothing was sent then.
func (c *Client) live(ctx context.Context) (*session, error) {
	c.sessMu.Lock()
	s, closed := c.sess, c.closed
	c.sessMu.Unlock()
	switch {
	case closed:
		return nil, fmt.Errorf("MCP server %q: the client is closed; nothing was sent", c.name)
	case !s.dead():
		return s, nil
	case c.dial == nil:
		return nil, c.unreachable("its session ended, and a server connected over a given transport cannot be reconnected; restart rein")
	}
	select {
	case c.redial <- struct{}{}:
	case <-ctx.Done():
		return nil, &unreachableError{msg: fmt.Sprintf("MCP server %q is being reconnected by another call, which did not finish in time; the call was not sent: %v", c.name, ctx.Err()), cause: ctx.Err()}
	}
	defer func() { <-c.redial }()
	return c.reconnect(ctx)
}

// reconnect replaces the dead session with a new one (a stdio server is
// started again), unless another call did, or the backoff says to wait. It
// runs holding c.redial.
func (c *Client) reconnect(ctx context.Context) (*session, error) {
	c.sessMu.Lock()
	old := c.sess
	if !old.dead() {
		c.sessMu.Unlock()
		return old, nil
	}
	if wait := time.Until(c.nextTry); wait > 0 {
		c.sessMu.Unlock()
		return nil, c.unreachable(fmt.Sprintf("rein tried to reconnect moments ago, and the next attempt is due in %s", wait.Round(time.Millisecond)))
	}
	c.attempts++
	wait := backoff(c.attempts - 1)
	c.sessMu.Unlock()
	// The wait runs from the end of this attempt, however long it took.
	defer func() {
		c.sessMu.Lock()
		c.nextTry = time.Now().Add(wait)
		c.sessMu.Unlock()
	}()

	// The old session's connection is closed already; this reaps a stdio
	// server's process. Its error is the dead session's.
	_ = old.cs.Close()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, handshakeTimeout)
		defer cancel()
	}
	cs, err := c.dial(ctx)
	if err != nil {
		c.logger.Warn("reconnecting to the MCP server failed", "server", c.name, "error", err)
		return nil, c.unreachable("reconnecting failed: " + err.Error())
	}
	s := c.watch(cs)
	c.sessMu.Lock()
	if c.closed {
		c.sessMu.Unlock()
		_ = cs.Close()
		return nil, fmt.Errorf("MCP server %q: the client was closed while reconnecting; nothing was sent", c.name)
	}
	c.sess = s
	c.sessMu.Unlock()
	// The server may list other tools than before.
	c.toolsChanged()
	c.logger.Info("MCP server reconnected", "server", c.name)
	return s, nil
}

// backoff is the wait after the nth attempt to reconnect since a call last
// succeeded.
func backoff(n int) time.Duration {
	if n >= 6 { // 100ms << 6 is past the cap
		return maxBackoff
	}
	return min(minBackoff<<n, maxBackoff)
}

// succeeded resets the backoff: the session answered a call.
func (c *Client) succeeded() {
	c.sessMu.Lock()
	defer c.sessMu.Unlock()
	c.attempts, c.nextTry = 0, time.Time{}
}

// unreachable is the error of a call that found the server down and was
// not sent.
func (c *Client) unreachable(why string) error {
	return &unreachableError{msg: fmt.Sprintf("MCP server %q is unreachable (%s); the call was not sent, and rein reconnects at a later call, so it may be tried again in a moment%s",
		c.name, why, stderrNote(c.stderr))}
}

// unreachableError is an ErrUnreachable, with its cause when it has one.
type unreachableError struct {
	msg   string
	cause error
}

func (e *unreachableError) Error() string { return e.msg }

func (e *unreachableError) Unwrap() []error {
	if e.cause == nil {
		return []error{ErrUnreachable}
	}
	return []error{ErrUnreachable, e.cause}
}

// Close ends the session; a stdio server has its stdin closed, then is
// signalled if it does not exit. A Client is not reconnected after Close;
// a reconnection in progress closes the session it opens.
func (c *Client) Close() error {
	c.sessMu.Lock()
	c.closed = true
	s := c.sess
	c.sessMu.Unlock()
	dead := s.dead()
	err := s.cs.Close()
	if dead {
		// How a dead session ended was logged when it did.
		return nil
	}
	return err
}
