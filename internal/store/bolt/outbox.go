package bolt

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	bbolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/store/seal"
)

var (
	// bucketWebhooks holds the webhook subscriptions:
	// store.WebhookKey(tenant, name) -> the Webhook, sealed, secrets
	// included. It is made by the first subscription stored.
	bucketWebhooks = []byte("webhooks")
	// bucketOutbox holds the deliveries the subscriptions must still send:
	// store.OutboxKey -> the WebhookDelivery, sealed. An append puts them
	// in its own transaction (putOutbox); the sender updates and removes
	// them.
	bucketOutbox = []byte("outbox")
)

var _ store.Webhooks = (*Store)(nil)

// subCache is the writer's cache of decoded subscriptions, by key, each
// with the stored bytes it was decoded from: an append reads the stored
// bytes in its own transaction and decodes them again only when they
// changed, so what it matches is always what that transaction holds (a
// subscription created in the same batch, or rolled back with it,
// included). The writer's goroutine alone uses it (and Open's recovery,
// before the writer starts).
type subCache map[string]cachedSub

type cachedSub struct {
	raw []byte
	sub *reinv1.Webhook
}

// outboxOf is the deliveries s.outbox makes of an append to the run, with
// the subscriptions of the run's tenant that tx holds. The writer calls it
// for every create and append before it writes any of it, and puts what
// it returns with the events (putOutbox), so that the deliveries are
// committed iff the events are. A damaged subscription refuses the append
// (store.ErrDataLoss naming it) rather than lose what it would send.
func (s *Store) outboxOf(tx *bbolt.Tx, before, after *runstate.State, events []*reinv1.Event) ([]*reinv1.WebhookDelivery, error) {
	if s.outbox == nil {
		return nil, nil
	}
	subs, err := s.tenantWebhooks(tx, after.Tenant)
	if err != nil || len(subs) == 0 {
		return nil, err
	}
	return s.outbox(subs, before, after, events), nil
}

// putOutbox puts the deliveries outboxOf made in the append's transaction,
// through w so that the log records them (writes.go).
func putOutbox(w *wtx, out []*reinv1.WebhookDelivery) error {
	if len(out) == 0 {
		return nil
	}
	b := w.Bucket(bucketOutbox)
	if b == nil {
		return fmt.Errorf("the webhook outbox is missing from the store though a subscription is in it: run rein check")
	}
	for _, d := range out {
		v, err := seal.Seal(d)
		if err != nil {
			return err
		}
		if err := b.Put([]byte(store.OutboxKey(d)), v); err != nil {
			return err
		}
	}
	return nil
}

// tenantWebhooks is the subscriptions of tenant that tx holds.
func (s *Store) tenantWebhooks(tx *bbolt.Tx, tenant string) ([]*reinv1.Webhook, error) {
	b := tx.Bucket(bucketWebhooks)
	if b == nil {
		return nil, nil
	}
	if s.subs == nil {
		s.subs = subCache{}
	}
	prefix := []byte(tenant + "\x00")
	var out []*reinv1.Webhook
	c := b.Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		got, ok := s.subs[string(k)]
		if !ok || !bytes.Equal(got.raw, v) {
			w := &reinv1.Webhook{}
			if err := unseal(v, w, "webhook "+string(k[len(prefix):])); err != nil {
				return nil, err
			}
			got = cachedSub{raw: bytes.Clone(v), sub: w}
			s.subs[string(k)] = got
		}
		out = append(out, got.sub)
	}
	return out, nil
}

// dropRunOutbox deletes, in tx, every delivery of the run (tenant's,
// runID) that a subscription of its tenant still holds, sent or failed:
// erasing a run erases what its deliveries' bodies say of it (eraseRun).
func dropRunOutbox(tx *bbolt.Tx, tenant, runID string) error {
	subs, ob := tx.Bucket(bucketWebhooks), tx.Bucket(bucketOutbox)
	if subs == nil || ob == nil {
		return nil
	}
	tp := []byte(tenant + "\x00")
	var keys [][]byte
	c, oc := subs.Cursor(), ob.Cursor()
	for k, _ := c.Seek(tp); k != nil && bytes.HasPrefix(k, tp); k, _ = c.Next() {
		prefix := append([]byte(store.OutboxPrefix(tenant, string(k[len(tp):]))+runID), 0)
		for ok, _ := oc.Seek(prefix); ok != nil && bytes.HasPrefix(ok, prefix); ok, _ = oc.Next() {
			keys = append(keys, bytes.Clone(ok))
		}
	}
	for _, k := range keys {
		if err := ob.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// CreateWebhook implements store.Webhooks.
func (s *Store) CreateWebhook(ctx context.Context, w *reinv1.Webhook) error {
	key := []byte(store.WebhookKey(w.GetTenant(), w.GetName()))
	_, err := s.submit(ctx, &writeReq{op: func(tx *bbolt.Tx) writeRes {
		b, err := tx.CreateBucketIfNotExists(bucketWebhooks)
		if err != nil {
			return writeRes{err: errTx{err}}
		}
		// The outbox is made with the first subscription, so that the
		// appends that fill it only put in it: an append's writes are
		// logged by bucket path (writes.go), and a top bucket is made here,
		// in a commit of its own, not there.
		if _, err := tx.CreateBucketIfNotExists(bucketOutbox); err != nil {
			return writeRes{err: errTx{err}}
		}
		if b.Get(key) != nil {
			return writeRes{err: fmt.Errorf("webhook %q: %w", w.GetName(), store.ErrExists)}
		}
		v, err := seal.Seal(w)
		if err != nil {
			return writeRes{err: err}
		}
		if err := b.Put(key, v); err != nil {
			return writeRes{err: errTx{err}}
		}
		return writeRes{}
	}})
	return err
}

// ListWebhooks implements store.Webhooks.
func (s *Store) ListWebhooks(ctx context.Context, tenant string) ([]*reinv1.Webhook, error) {
	var out []*reinv1.Webhook
	err := s.view(ctx, "the webhooks", func(tx *rtx) error {
		b := tx.Bucket(bucketWebhooks)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			if tenant != "" && !strings.HasPrefix(string(k), tenant+"\x00") {
				return nil
			}
			w := &reinv1.Webhook{}
			if err := unseal(v, w, "webhook "+string(k)); err != nil {
				return err
			}
			out = append(out, w)
			return nil
		})
	})
	return out, err
}

// UpdateWebhook implements store.Webhooks.
func (s *Store) UpdateWebhook(ctx context.Context, tenant, name string, f func(*reinv1.Webhook) error) (*reinv1.Webhook, error) {
	key := []byte(store.WebhookKey(tenant, name))
	var out *reinv1.Webhook
	_, err := s.submit(ctx, &writeReq{op: func(tx *bbolt.Tx) writeRes {
		b := tx.Bucket(bucketWebhooks)
		var v []byte
		if b != nil {
			v = b.Get(key)
		}
		if v == nil {
			return writeRes{err: fmt.Errorf("webhook %q: %w", name, store.ErrNotFound)}
		}
		w := &reinv1.Webhook{}
		if err := unseal(v, w, "webhook "+name); err != nil {
			return writeRes{err: err}
		}
		if err := f(w); err != nil {
			return writeRes{err: err}
		}
		nv, err := seal.Seal(w)
		if err != nil {
			return writeRes{err: err}
		}
		if err := b.Put(key, nv); err != nil {
			return writeRes{err: errTx{err}}
		}
		out = proto.CloneOf(w)
		return writeRes{}
	}})
	return out, err
}

// DeleteWebhook implements store.Webhooks.
func (s *Store) DeleteWebhook(ctx context.Context, tenant, name string) error {
	key := []byte(store.WebhookKey(tenant, name))
	prefix := []byte(store.OutboxPrefix(tenant, name))
	_, err := s.submit(ctx, &writeReq{op: func(tx *bbolt.Tx) writeRes {
		b := tx.Bucket(bucketWebhooks)
		if b == nil || b.Get(key) == nil {
			return writeRes{err: fmt.Errorf("webhook %q: %w", name, store.ErrNotFound)}
		}
		if err := b.Delete(key); err != nil {
			return writeRes{err: errTx{err}}
		}
		if ob := tx.Bucket(bucketOutbox); ob != nil {
			var keys [][]byte
			c := ob.Cursor()
			for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
				keys = append(keys, bytes.Clone(k))
			}
			for _, k := range keys {
				if err := ob.Delete(k); err != nil {
					return writeRes{err: errTx{err}}
				}
			}
		}
		return writeRes{}
	}})
	return err
}

// Deliveries implements store.Webhooks.
func (s *Store) Deliveries(ctx context.Context, tenant, name string, limit int) ([]*reinv1.WebhookDelivery, error) {
	prefix := []byte(store.OutboxPrefix(tenant, name))
	var out []*reinv1.WebhookDelivery
	err := s.view(ctx, "the outbox of webhook "+name, func(tx *rtx) error {
		b := tx.Bucket(bucketOutbox)
		if b == nil {
			return nil
		}
		c := b.Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix) && len(out) < limit; k, v = c.Next() {
			d := &reinv1.WebhookDelivery{}
			if err := unseal(v, d, "webhook delivery of "+name); err != nil {
				return err
			}
			out = append(out, d)
		}
		return nil
	})
	return out, err
}

// UpdateDelivery implements store.Webhooks. Its write is logged, as an
// append's is: the sender's outcomes cost the writer no checkpoint.
func (s *Store) UpdateDelivery(ctx context.Context, d *reinv1.WebhookDelivery, f func(*reinv1.WebhookDelivery) (bool, error)) error {
	key := []byte(store.OutboxKey(d))
	_, err := s.submit(ctx, &writeReq{write: func(w *wtx) writeRes {
		b := w.Bucket(bucketOutbox)
		var v []byte
		if b != nil {
			v = b.Get(key)
		}
		if v == nil {
			return writeRes{err: fmt.Errorf("webhook delivery %s: %w", d.GetId(), store.ErrNotFound)}
		}
		got := &reinv1.WebhookDelivery{}
		if err := unseal(v, got, "webhook delivery "+d.GetId()); err != nil {
			return writeRes{err: err}
		}
		remove, err := f(got)
		if err != nil {
			return writeRes{err: err}
		}
		if remove {
			if err := b.Delete(key); err != nil {
				return writeRes{err: errTx{err}}
			}
			return writeRes{}
		}
		nv, err := seal.Seal(got)
		if err != nil {
			return writeRes{err: err}
		}
		if err := b.Put(key, nv); err != nil {
			return writeRes{err: errTx{err}}
		}
		return writeRes{}
	}})
	return err
}

// DeliveryHeads implements store.Webhooks. It copies out only what it
// returns, and decodes it after the read: the other deliveries are
// counted by their keys, and the writer, which a read holds off, waits
// for no decoding.
func (s *Store) DeliveryHeads(ctx context.Context, tenant, name string, runs, perRun int) ([][]*reinv1.WebhookDelivery, int, error) {
	prefix := []byte(store.OutboxPrefix(tenant, name))
	var raw [][][]byte
	n := 0
	err := s.view(ctx, "the outbox of webhook "+name, func(tx *rtx) error {
		b := tx.Bucket(bucketOutbox)
		if b == nil {
			return nil
		}
		var run []byte
		c := b.Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			n++
			// A key is the prefix, the run, NUL and 8 bytes of sequence.
			r := k[len(prefix) : len(k)-9]
			if run == nil || !bytes.Equal(r, run) {
				if len(raw) == runs {
					continue
				}
				run = bytes.Clone(r)
				raw = append(raw, nil)
			}
			last := &raw[len(raw)-1]
			if len(*last) == perRun {
				continue
			}
			*last = append(*last, bytes.Clone(v))
		}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	out := make([][]*reinv1.WebhookDelivery, len(raw))
	for i, q := range raw {
		out[i] = make([]*reinv1.WebhookDelivery, len(q))
		for j, v := range q {
			d := &reinv1.WebhookDelivery{}
			if err := unseal(v, d, "webhook delivery of "+name); err != nil {
				return nil, 0, err
			}
			out[i][j] = d
		}
	}
	return out, n, nil
}

// RemoveDeliveries implements store.Webhooks. Its deletes are logged, as
// an append's writes are, and join the appends' batch: removing what was
// sent costs the writer no checkpoint. A delivery no longer stored is
// passed over, and not logged.
func (s *Store) RemoveDeliveries(ctx context.Context, ds []*reinv1.WebhookDelivery) error {
	if len(ds) == 0 {
		return nil
	}
	keys := make([][]byte, len(ds))
	for i, d := range ds {
		keys[i] = []byte(store.OutboxKey(d))
	}
	_, err := s.submit(ctx, &writeReq{write: func(w *wtx) writeRes {
		b := w.Bucket(bucketOutbox)
		if b == nil {
			return writeRes{}
		}
		for _, k := range keys {
			if b.Get(k) == nil {
				continue
			}
			if err := b.Delete(k); err != nil {
				return writeRes{err: errTx{err}}
			}
		}
		return writeRes{}
	}})
	return err
}
