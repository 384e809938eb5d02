package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/reinhq/rein/internal/store"
)

// conn is the one etcd client that the Store and its satellites (the
// Follower, the Relay, the Locks and the RateCells) share, with what each
// of their requests needs: the prefix's keys, the timeout that bounds a
// request, the mapping of the client's errors, the replica's lease and
// whether the Store is closed. It owns no key.
type conn struct {
	cli     *clientv3.Client
	keys    keys
	timeout time.Duration // Options.Timeout

	// mu guards closed: every call holds it for reading while it runs, so
	// Close, which takes it for writing, waits for the calls in flight.
	mu     sync.RWMutex
	closed bool

	// replicaLease is the etcd lease this replica holds its runs (owner.go)
	// and the model output it relays (relay.go) under; 0 when it is the
	// prefix's one server.
	replicaLease atomic.Int64
}

// enter marks a call in flight; the caller must call c.mu.RUnlock when it
// returns nil.
func (c *conn) enter(what string) error {
	c.mu.RLock()
	if c.closed {
		c.mu.RUnlock()
		return fmt.Errorf("%s: %w", what, store.ErrClosed)
	}
	return nil
}

// readCtx bounds a read by the timeout and the caller's context.
func (c *conn) readCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.timeout)
}

// writeCtx bounds a write by the timeout only: once sent, a Txn is not cut
// by the caller's cancellation, which would leave its outcome unknown.
func (c *conn) writeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), c.timeout)
}

// etcdErr maps an error of the etcd client. The caller's own cancellation
// passes through; a timeout (the client's or etcd's own), no leader or an
// unreachable cluster wrap store.ErrUnavailable; a write refused for etcd's
// quota (the database at --quota-backend-bytes, or the NOSPACE alarm
// raised) wraps store.ErrNoSpace and says what frees it (quota.go).
func (c *conn) etcdErr(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || grpcCode(err) == codes.Canceled) {
		return fmt.Errorf("%s: %w", what, ctx.Err())
	}
	endpoints := strings.Join(c.cli.Endpoints(), ",")
	switch code := grpcCode(err); {
	case errors.Is(err, context.DeadlineExceeded), code == codes.DeadlineExceeded, code == codes.Unavailable:
		return fmt.Errorf("%s: %w: etcd at %s did not answer within %v (%v); check that etcd is running and its cluster has a leader, then retry (a write that timed out may have been stored: reload the run)",
			what, store.ErrUnavailable, endpoints, c.timeout, err)
	case isNoSpace(err):
		return fmt.Errorf("%s: %w: etcd at %s refused the write (%v), and nothing was stored; %s",
			what, store.ErrNoSpace, endpoints, err, noSpaceRemedy)
	case errors.Is(err, rpctypes.ErrRequestTooLarge), errors.Is(err, rpctypes.ErrTooManyOps):
		return fmt.Errorf("%s: etcd at %s refused the request (%v), nothing was stored: set the store's MaxRequestBytes and MaxTxnOps to the server's --max-request-bytes and --max-txn-ops",
			what, endpoints, err)
	}
	return fmt.Errorf("%s: etcd at %s: %w", what, endpoints, err)
}

// grpcCode is the gRPC code of an etcd client's error: a gRPC status, or
// one etcd's server names (rpctypes.EtcdError, which the client makes of
// "no leader", "leader changed" and "request timed out", all Unavailable).
func grpcCode(err error) codes.Code {
	var etcdErr rpctypes.EtcdError
	if errors.As(err, &etcdErr) {
		return etcdErr.Code()
	}
	return status.Code(err)
}

// lease is the etcd lease this replica holds its keys under (SetLease); 0
// when there is none.
func (c *conn) lease() clientv3.LeaseID { return clientv3.LeaseID(c.replicaLease.Load()) }
