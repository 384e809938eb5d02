package etcd

import (
	"context"
	"fmt"
	"net/url"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/store/seal"
	"github.com/reinhq/rein/internal/storeformat"
)

// Webhook subscriptions (store.Webhooks). Each is one key, P
// webhook/<tenant>/<name>; each tenant that has any also has P
// webhook-rev/<tenant>, put again by every write of the tenant's
// subscriptions and deleted with the last of them, so its ModRevision
// versions the set. An append that may put deliveries in the outbox
// (outbox.go) matches the tenant's subscriptions as this Store last read
// them and compares that ModRevision in its Txn: a subscription created,
// changed or deleted meanwhile, by any server, fails the compare, and the
// append matches the set again. So an event is matched against the
// subscriptions as they were when it committed, as on bbolt.

var _ store.Webhooks = (*Store)(nil)

// WebhooksFormat is the store format that brought webhook subscriptions
// to the etcd store: a replica of an older build matches none of them and
// would append without their deliveries, so subscriptions wait until the
// format is active (a finalization) and every replica writes it.
const WebhooksFormat storeformat.Format = 7

func (k keys) webhooks() string { return k.p + "webhook/" }
func (k keys) tenantWebhooks(tenant string) string {
	return k.webhooks() + url.PathEscape(tenant) + "/"
}
func (k keys) webhook(tenant, name string) string {
	return k.tenantWebhooks(tenant) + url.PathEscape(name)
}
func (k keys) webhookRev(tenant string) string { return k.p + "webhook-rev/" + url.PathEscape(tenant) }

// hooksAt is a tenant's subscriptions as read at the ModRevision rev of
// its P webhook-rev key (0: absent, and the tenant has none).
type hooksAt struct {
	rev  int64
	subs []*reinv1.Webhook
}

// hookCache is each tenant's subscriptions as this Store last read them.
// A stale entry costs one failed Txn, never a wrong delivery: the append
// compares the rev it holds.
type hookCache struct {
	mu sync.Mutex
	m  map[string]hooksAt
}

func (c *hookCache) get(tenant string) (hooksAt, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h, ok := c.m[tenant]
	return h, ok
}

func (c *hookCache) put(tenant string, h hooksAt) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxCached {
		c.m = map[string]hooksAt{}
	}
	c.m[tenant] = h
}

func (c *hookCache) forget(tenant string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, tenant)
}

// seen forgets the tenant's entry unless kv, its P webhook-rev key as a
// failed Txn read it (nil: absent), is at the rev the entry holds.
func (c *hookCache) seen(tenant string, kv *mvccpb.KeyValue) {
	var rev int64
	if kv != nil {
		rev = kv.ModRevision
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if h, ok := c.m[tenant]; ok && h.rev != rev {
		delete(c.m, tenant)
	}
}

// tenantHooks is the tenant's subscriptions, from the cache or read in one
// Txn with the rev they are at.
func (s *Store) tenantHooks(ctx context.Context, tenant string) (hooksAt, error) {
	if h, ok := s.hooks.get(tenant); ok {
		return h, nil
	}
	rctx, cancel := s.readCtx(ctx)
	defer cancel()
	resp, err := s.cli.Txn(rctx).Then(
		clientv3.OpGet(s.keys.webhookRev(tenant)),
		clientv3.OpGet(s.keys.tenantWebhooks(tenant), clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return hooksAt{}, s.etcdErr(ctx, fmt.Sprintf("read the webhooks of tenant %q", tenant), err)
	}
	var h hooksAt
	if kv := kvOf(resp, 0); kv != nil {
		h.rev = kv.ModRevision
	}
	for _, kv := range resp.Responses[1].GetResponseRange().GetKvs() {
		w := &reinv1.Webhook{}
		if err := unseal(kv.Value, w, "webhook "+string(kv.Key)); err != nil {
			return hooksAt{}, err
		}
		h.subs = append(h.subs, w)
	}
	s.hooks.put(tenant, h)
	return h, nil
}

// CreateWebhook implements store.Webhooks.
func (s *Store) CreateWebhook(ctx context.Context, w *reinv1.Webhook) error {
	what := fmt.Sprintf("create webhook %q", w.GetName())
	v, err := seal.Seal(w)
	if err != nil {
		return fmt.Errorf("%s: encode it: %w", what, err)
	}
	if err := s.enter(what); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	defer s.hooks.forget(w.GetTenant())
	key := s.keys.webhook(w.GetTenant(), w.GetName())
	t := &txn{}
	t.cmp(absent(key))
	t.put(key, v)
	t.put(s.keys.webhookRev(w.GetTenant()), nil)
	resp, err := s.commit(ctx, what, t)
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return fmt.Errorf("webhook %q: %w", w.GetName(), store.ErrExists)
	}
	return nil
}

// ListWebhooks implements store.Webhooks.
func (s *Store) ListWebhooks(ctx context.Context, tenant string) ([]*reinv1.Webhook, error) {
	what := "list the webhooks"
	if err := s.enter(what); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	prefix := s.keys.webhooks()
	if tenant != "" {
		prefix = s.keys.tenantWebhooks(tenant)
	}
	rctx, cancel := s.readCtx(ctx)
	defer cancel()
	resp, err := s.cli.Get(rctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, s.etcdErr(ctx, what, err)
	}
	out := make([]*reinv1.Webhook, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		w := &reinv1.Webhook{}
		if err := unseal(kv.Value, w, "webhook "+string(kv.Key)); err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	return out, nil
}

// UpdateWebhook implements store.Webhooks: read, f, and a put compared at
// the revision read, again while another write moves it.
func (s *Store) UpdateWebhook(ctx context.Context, tenant, name string, f func(*reinv1.Webhook) error) (*reinv1.Webhook, error) {
	what := fmt.Sprintf("update webhook %q", name)
	if err := s.enter(what); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	defer s.hooks.forget(tenant)
	key := s.keys.webhook(tenant, name)
	for range maxAttempts {
		kv, err := s.getOne(ctx, what, key)
		if err != nil {
			return nil, err
		}
		if kv == nil {
			return nil, fmt.Errorf("webhook %q: %w", name, store.ErrNotFound)
		}
		w := &reinv1.Webhook{}
		if err := unseal(kv.Value, w, "webhook "+name); err != nil {
			return nil, err
		}
		if err := f(w); err != nil {
			return nil, err
		}
		v, err := seal.Seal(w)
		if err != nil {
			return nil, fmt.Errorf("%s: encode it: %w", what, err)
		}
		t := &txn{}
		t.cmp(modIs(key, kv.ModRevision))
		t.put(key, v)
		t.put(s.keys.webhookRev(tenant), nil)
		resp, err := s.commit(ctx, what, t)
		if err != nil {
			return nil, err
		}
		if resp.Succeeded {
			return proto.CloneOf(w), nil
		}
	}
	return nil, contention(what)
}

// DeleteWebhook implements store.Webhooks: the subscription, its outbox
// and, with the tenant's last subscription, P webhook-rev/<tenant>, in
// one Txn compared at the revisions read.
func (s *Store) DeleteWebhook(ctx context.Context, tenant, name string) error {
	what := fmt.Sprintf("delete webhook %q", name)
	if err := s.enter(what); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	defer s.hooks.forget(tenant)
	key, revKey := s.keys.webhook(tenant, name), s.keys.webhookRev(tenant)
	for range maxAttempts {
		rctx, cancel := s.readCtx(ctx)
		resp, err := s.cli.Txn(rctx).Then(
			clientv3.OpGet(key, clientv3.WithKeysOnly()),
			clientv3.OpGet(revKey, clientv3.WithKeysOnly()),
			clientv3.OpGet(s.keys.tenantWebhooks(tenant), clientv3.WithPrefix(), clientv3.WithCountOnly()),
		).Commit()
		cancel()
		if err != nil {
			return s.etcdErr(ctx, what, err)
		}
		kv := kvOf(resp, 0)
		if kv == nil {
			return fmt.Errorf("webhook %q: %w", name, store.ErrNotFound)
		}
		var rev int64
		if r := kvOf(resp, 1); r != nil {
			rev = r.ModRevision
		}
		t := &txn{}
		t.cmp(modIs(key, kv.ModRevision))
		t.cmp(modIs(revKey, rev))
		t.del(key)
		t.delPrefix(s.keys.outbox(tenant, name))
		if resp.Responses[2].GetResponseRange().GetCount() <= 1 {
			t.del(revKey)
		} else {
			t.put(revKey, nil)
		}
		got, err := s.commit(ctx, what, t)
		if err != nil {
			return err
		}
		if got.Succeeded {
			return nil
		}
	}
	return contention(what)
}

// getOne is key as stored, or nil when absent.
func (s *Store) getOne(ctx context.Context, what, key string) (*mvccpb.KeyValue, error) {
	rctx, cancel := s.readCtx(ctx)
	defer cancel()
	resp, err := s.cli.Get(rctx, key)
	if err != nil {
		return nil, s.etcdErr(ctx, what, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	return resp.Kvs[0], nil
}
