package etcd

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/store/seal"
)

// The outbox: P outbox/<tenant>/<name>/<run id>/<seq>, one key per
// delivery a subscription must still send, seq as 16 hex digits, so that a
// subscription's deliveries sort by run, then in the order of the run's
// events (a run ID holds no "/", so run_1/ does not begin run_10/). The
// Txn of the create, import or append whose events cause a delivery puts
// it (putOutbox), so it is committed iff they are; the sender updates and
// removes it (store.Webhooks).

func (k keys) outbox(tenant, name string) string {
	return k.p + "outbox/" + url.PathEscape(tenant) + "/" + url.PathEscape(name) + "/"
}

func (k keys) delivery(d *reinv1.WebhookDelivery) string {
	return hex16(k.outbox(d.GetTenant(), d.GetWebhook())+d.GetRunId()+"/", d.GetSequence())
}

// putOutbox adds to t, a write of the run from before to after by events,
// the deliveries s.outbox makes of it with the tenant's subscriptions, and
// the compare that those are still the tenant's subscriptions when t
// commits (webhooks.go). It reports whether it added anything; the caller
// then reads P webhook-rev/<tenant> in t's Else branch (hooksElse) so that
// a failed compare refreshes the cache. A damaged subscription refuses the
// write (store.ErrDataLoss naming it) rather than lose what it would send.
func (s *Store) putOutbox(ctx context.Context, t *txn, before, after *runstate.State, events []*reinv1.Event) (bool, error) {
	if s.outbox == nil {
		return false, nil
	}
	h, err := s.tenantHooks(ctx, after.Tenant)
	if err != nil {
		return false, err
	}
	t.cmp(modIs(s.keys.webhookRev(after.Tenant), h.rev))
	if len(h.subs) == 0 {
		return true, nil
	}
	for _, d := range s.outbox(h.subs, before, after, events) {
		v, err := seal.Seal(d)
		if err != nil {
			return false, fmt.Errorf("encode webhook delivery %s: %w", d.GetId(), err)
		}
		t.put(s.keys.delivery(d), v)
	}
	return true, nil
}

// eraseOutbox adds to t, a run's erasure (erase), the deletion of every
// delivery of run runID, sent or failed, that a subscription of tenant
// holds: one range delete of P outbox/<tenant>/<name>/<run id>/ per
// subscription, as this Store last read them, and the compare that those
// are still the tenant's subscriptions when t commits; the caller reads P
// webhook-rev/<tenant> in t's Else branch (hooksElse) so that a failed
// compare refreshes the cache. A subscription deleted meanwhile took its
// outbox with it; one created meanwhile fails the compare.
func (s *Store) eraseOutbox(ctx context.Context, t *txn, tenant, runID string) error {
	h, err := s.tenantHooks(ctx, tenant)
	if err != nil {
		return err
	}
	t.cmp(modIs(s.keys.webhookRev(tenant), h.rev))
	for _, w := range h.subs {
		t.delPrefix(s.keys.outbox(tenant, w.GetName()) + runID + "/")
	}
	return nil
}

// hooksElse reads the tenant's P webhook-rev key in t's Else branch, and
// returns the index of that read.
func (s *Store) hooksElse(t *txn, tenant string) int {
	t.orElse(s.keys.webhookRev(tenant))
	return len(t.els) - 1
}

// Deliveries implements store.Webhooks.
func (s *Store) Deliveries(ctx context.Context, tenant, name string, limit int) ([]*reinv1.WebhookDelivery, error) {
	what := "read the outbox of webhook " + name
	if err := s.enter(what); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	if limit <= 0 {
		return nil, nil
	}
	rctx, cancel := s.readCtx(ctx)
	defer cancel()
	resp, err := s.cli.Get(rctx, s.keys.outbox(tenant, name), clientv3.WithPrefix(), clientv3.WithLimit(int64(limit)))
	if err != nil {
		return nil, s.etcdErr(ctx, what, err)
	}
	return decodeDeliveries(resp.Kvs, name)
}

func decodeDeliveries(kvs []*mvccpb.KeyValue, name string) ([]*reinv1.WebhookDelivery, error) {
	out := make([]*reinv1.WebhookDelivery, 0, len(kvs))
	for _, kv := range kvs {
		d := &reinv1.WebhookDelivery{}
		if err := unseal(kv.Value, d, "webhook delivery "+string(kv.Key)+" of "+name); err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// DeliveryHeads implements store.Webhooks. It reads the outbox's keys
// alone, then the values of the heads it returns: each run's, one range
// read of at most perRun keys, in read Txns of at most MaxTxnOps reads.
func (s *Store) DeliveryHeads(ctx context.Context, tenant, name string, runs, perRun int) ([][]*reinv1.WebhookDelivery, int, error) {
	what := "read the outbox of webhook " + name
	if err := s.enter(what); err != nil {
		return nil, 0, err
	}
	defer s.mu.RUnlock()
	prefix := s.keys.outbox(tenant, name)
	rctx, cancel := s.readCtx(ctx)
	resp, err := s.cli.Get(rctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	cancel()
	if err != nil {
		return nil, 0, s.etcdErr(ctx, what, err)
	}
	queued := len(resp.Kvs)
	// The first key of each run, up to runs of them.
	var firsts []string
	last := ""
	for _, kv := range resp.Kvs {
		k := string(kv.Key)
		run, _, ok := strings.Cut(k[len(prefix):], "/")
		if !ok {
			return nil, 0, damaged("the outbox of webhook "+name, "key %q names no run", k)
		}
		if run == last {
			continue
		}
		if len(firsts) == runs {
			break
		}
		last = run
		firsts = append(firsts, k)
	}
	var out [][]*reinv1.WebhookDelivery
	for len(firsts) > 0 {
		n := min(len(firsts), s.opts.MaxTxnOps)
		ops := make([]clientv3.Op, n)
		for i, first := range firsts[:n] {
			runEnd := clientv3.GetPrefixRangeEnd(first[:strings.LastIndexByte(first, '/')+1])
			ops[i] = clientv3.OpGet(first, clientv3.WithRange(runEnd), clientv3.WithLimit(int64(perRun)))
		}
		firsts = firsts[n:]
		rctx, cancel := s.readCtx(ctx)
		got, err := s.cli.Txn(rctx).Then(ops...).Commit()
		cancel()
		if err != nil {
			return nil, 0, s.etcdErr(ctx, what, err)
		}
		for _, r := range got.Responses {
			ds, err := decodeDeliveries(r.GetResponseRange().GetKvs(), name)
			if err != nil {
				return nil, 0, err
			}
			if len(ds) > 0 { // a run whose deliveries were all removed meanwhile
				out = append(out, ds)
			}
		}
	}
	return out, queued, nil
}

// RemoveDeliveries implements store.Webhooks: one Txn of deletes (nested
// past MaxTxnOps); a key no longer stored deletes nothing.
func (s *Store) RemoveDeliveries(ctx context.Context, ds []*reinv1.WebhookDelivery) error {
	if len(ds) == 0 {
		return nil
	}
	what := fmt.Sprintf("remove %d delivered webhooks from the outbox", len(ds))
	if err := s.enter(what); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	// A Txn may not delete one key twice.
	seen := make(map[string]bool, len(ds))
	limit := min(maxRemovals, (s.opts.MaxTxnOps/2)*(s.opts.MaxTxnOps/2))
	for len(ds) > 0 {
		t := &txn{}
		for len(ds) > 0 && len(t.ops) < limit {
			if k := s.keys.delivery(ds[0]); !seen[k] {
				seen[k] = true
				t.del(k)
			}
			ds = ds[1:]
		}
		if _, err := s.commit(ctx, what, t); err != nil {
			return err
		}
	}
	return nil
}

// maxRemovals bounds the deletes of one Txn of RemoveDeliveries, and so
// does what nest fits in one Txn at the store's MaxTxnOps ((MaxTxnOps/2)²,
// 4096 at etcd's default): a sender's batch is one commit.
const maxRemovals = 4096

// UpdateDelivery implements store.Webhooks: read, f, and a put (or delete)
// compared at the revision read, again while another write moves it.
func (s *Store) UpdateDelivery(ctx context.Context, d *reinv1.WebhookDelivery, f func(*reinv1.WebhookDelivery) (bool, error)) error {
	what := "update webhook delivery " + d.GetId()
	if err := s.enter(what); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	key := s.keys.delivery(d)
	for range maxAttempts {
		kv, err := s.getOne(ctx, what, key)
		if err != nil {
			return err
		}
		if kv == nil {
			return fmt.Errorf("webhook delivery %s: %w", d.GetId(), store.ErrNotFound)
		}
		got := &reinv1.WebhookDelivery{}
		if err := unseal(kv.Value, got, "webhook delivery "+d.GetId()); err != nil {
			return err
		}
		remove, err := f(got)
		if err != nil {
			return err
		}
		t := &txn{}
		t.cmp(modIs(key, kv.ModRevision))
		if remove {
			t.del(key)
		} else {
			v, err := seal.Seal(got)
			if err != nil {
				return fmt.Errorf("%s: encode it: %w", what, err)
			}
			t.put(key, v)
		}
		resp, err := s.commit(ctx, what, t)
		if err != nil {
			return err
		}
		if resp.Succeeded {
			return nil
		}
	}
	return contention(what)
}

// FollowOutbox calls put each time a delivery is put in any subscription's
// outbox, by any server, until ctx ends, and also whenever it may have
// missed one (at the start, and after its watch had to start again): a
// sender that reads the outbox on its own commits and on a timer learns so
// of the other servers' at once. The calls come from one goroutine and
// must not block (webhook.Sender.Wake).
func (s *Store) FollowOutbox(ctx context.Context, put func()) {
	s.follow(ctx, s.keys.p+"outbox/", []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithFilterDelete()},
		func(string, []byte) { put() }, put)
}
