package etcd

import (
	"bytes"
	"context"
	"fmt"
	"net/url"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// maxRateTries bounds the compare-and-swaps of one UpdateRateBucket that
// lose to another replica's.
const maxRateTries = 64

// RateCells are the rate buckets that every Store on the prefix shares, so
// that the replicas draw on one budget per model and one per tenant
// (internal/ratelimit keeps what a bucket holds; rein serve passes
// UpdateRateBucket as its ratelimit.Cells). It owns the keys
// P rate/<name>, the name path-escaped, each holding its bucket's state.
// The Store embeds it.
type RateCells struct{ *conn }

// UpdateRateBucket updates the rate bucket name (under P rate/NAME), shared
// by every Store on the prefix: it reads the bucket's state, gives it to f
// (nil for a new bucket) and stores what f returns if no one changed the
// bucket meanwhile, else tries again on the state as it is now. So replicas
// draw on one bucket, and none takes what another took.
func (r *RateCells) UpdateRateBucket(ctx context.Context, name string, f func(old []byte) ([]byte, error)) error {
	if err := r.enter("update rate bucket " + name); err != nil {
		return err
	}
	defer r.mu.RUnlock()
	key := r.keys.p + "rate/" + url.PathEscape(name)
	for range maxRateTries {
		resp, err := r.cli.Get(ctx, key)
		if err != nil {
			return err
		}
		var old []byte
		var rev int64
		if len(resp.Kvs) > 0 {
			old, rev = resp.Kvs[0].Value, resp.Kvs[0].ModRevision
		}
		next, err := f(old)
		if err != nil {
			return err
		}
		if bytes.Equal(next, old) {
			return nil // read, not changed: nothing to write
		}
		txn, err := r.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(clientv3.OpPut(key, string(next))).Commit()
		if err != nil {
			return err
		}
		if txn.Succeeded {
			return nil
		}
	}
	return fmt.Errorf("rate bucket %s: %d replicas' updates in a row won over this one's; try again", name, maxRateTries)
}
