package etcd

import (
	"context"
	"fmt"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"
)

// Lead campaigns, as value, for the lead of name among the Stores on the
// prefix (an etcd election under P leader/<name>/, client/v3/concurrency),
// on a session of its own whose lease has ttl (whole seconds, at least
// one). It returns once this Store leads, or with ctx's error: lost is
// closed when it no longer does (its lease ended: it was cut off from etcd
// or paused past the TTL), and resign gives the lead up at once, so that
// another Store takes it without waiting for the lease. A Store that dies
// leading frees the lead within ttl. One leads at a time while leases hold;
// around a lease's end the one that lost it may still be finishing what
// it did when it learns of it.
func (s *Store) Lead(ctx context.Context, name, value string, ttl time.Duration) (lost <-chan struct{}, resign func(), err error) {
	what := fmt.Sprintf("campaign for the lead of %s", name)
	secs := max(int(ttl/time.Second), 1)
	// The session ends with ctx too: its lease's grant waits for etcd, and
	// a caller that stops (rein serve's shutdown) must not wait for etcd
	// to come back.
	sctx, cancel := context.WithCancel(ctx)
	sess, err := concurrency.NewSession(s.cli, concurrency.WithTTL(secs), concurrency.WithContext(sctx))
	if err != nil {
		cancel()
		return nil, nil, s.etcdErr(ctx, what, err)
	}
	end := func() {
		cancel()
		_ = sess.Close()
	}
	e := concurrency.NewElection(sess, s.keys.p+"leader/"+name)
	// The campaign ends with the session too: a Store whose lease ended
	// while it waited does not lead.
	cctx, stop := context.WithCancel(ctx)
	go func() {
		select {
		case <-sess.Done():
		case <-cctx.Done():
		}
		stop()
	}()
	err = e.Campaign(cctx, value)
	stop()
	if err != nil {
		end()
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		return nil, nil, s.etcdErr(ctx, what, err)
	}
	select {
	case <-sess.Done():
		end()
		return nil, nil, fmt.Errorf("%s: its etcd lease ended as it won; campaign again", what)
	default:
	}
	return sess.Done(), func() {
		rctx, done := context.WithTimeout(context.Background(), s.opts.Timeout)
		defer done()
		_ = e.Resign(rctx)
		end()
	}, nil
}
