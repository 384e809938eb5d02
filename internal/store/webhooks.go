package store

import (
	"context"
	"encoding/binary"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
)

// Webhooks is a store that keeps webhook subscriptions (internal/webhook)
// and their outbox: the deliveries each must still send. A delivery is
// put in the outbox by the append that commits the event causing it, in
// the same transaction (Outbox), so a crash between the commit and the
// send loses nothing, and nothing is sent that was never committed.
// Errors: a name taken is ErrExists, a subscription or delivery not
// stored ErrNotFound, each wrapped with the name.
type Webhooks interface {
	// CreateWebhook stores w, new, its secrets with it.
	CreateWebhook(ctx context.Context, w *reinv1.Webhook) error
	// ListWebhooks is tenant's subscriptions ("" for every tenant's), by
	// tenant then name, secrets included.
	ListWebhooks(ctx context.Context, tenant string) ([]*reinv1.Webhook, error)
	// UpdateWebhook gives the stored subscription to f and stores what f
	// leaves, atomically against every other update of it; an error of f
	// stores nothing and is returned.
	UpdateWebhook(ctx context.Context, tenant, name string, f func(*reinv1.Webhook) error) (*reinv1.Webhook, error)
	// DeleteWebhook removes the subscription and its outbox.
	DeleteWebhook(ctx context.Context, tenant, name string) error
	// Deliveries is up to limit of the subscription's deliveries, in
	// OutboxKey order (by run, then sequence).
	Deliveries(ctx context.Context, tenant, name string, limit int) ([]*reinv1.WebhookDelivery, error)
	// DeliveryHeads is the first perRun deliveries of each run in the
	// subscription's outbox, in order (the run's first is the one its
	// order lets the sender send), for up to runs runs, and how many
	// deliveries the outbox holds in all.
	DeliveryHeads(ctx context.Context, tenant, name string, runs, perRun int) (heads [][]*reinv1.WebhookDelivery, queued int, err error)
	// RemoveDeliveries removes the deliveries (each by its tenant,
	// webhook, run and sequence) in one commit; those no longer stored are
	// passed over.
	RemoveDeliveries(ctx context.Context, ds []*reinv1.WebhookDelivery) error
	// UpdateDelivery gives the stored delivery (tenant, webhook, run and
	// sequence of d) to f and stores what f leaves, or removes it when f
	// returns remove. A delivery no longer stored (its subscription was
	// deleted) is ErrNotFound.
	UpdateDelivery(ctx context.Context, d *reinv1.WebhookDelivery, f func(d *reinv1.WebhookDelivery) (remove bool, err error)) error
}

// Outbox is what a store with webhooks calls in each append's
// transaction: given the subscriptions of the run's tenant (secrets
// included; never empty) and the append (the state before it, the state
// after it and its events), it returns the deliveries to put in the outbox
// with the events. It is a pure function of its arguments: a store may call
// it again for the same append when it recovers from its log.
type Outbox func(subs []*reinv1.Webhook, before, after *runstate.State, events []*reinv1.Event) []*reinv1.WebhookDelivery

// WebhookKey is the key of tenant's subscription name in a store: the
// tenant and the name, which a name's pattern keeps free of NUL.
func WebhookKey(tenant, name string) string { return tenant + "\x00" + name }

// OutboxPrefix is the prefix of the keys of a subscription's deliveries.
func OutboxPrefix(tenant, name string) string { return tenant + "\x00" + name + "\x00" }

// OutboxKey is the key of a delivery: its subscription's OutboxPrefix,
// the run's ID, NUL, and the sequence big-endian, so that a run's
// deliveries sort in the order of its events.
func OutboxKey(d *reinv1.WebhookDelivery) string {
	k := make([]byte, 0, 64)
	k = append(k, OutboxPrefix(d.GetTenant(), d.GetWebhook())...)
	k = append(append(k, d.GetRunId()...), 0)
	return string(binary.BigEndian.AppendUint64(k, d.GetSequence()))
}
