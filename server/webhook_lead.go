package server

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/reinhq/rein/internal/webhook"
)

// Lead campaigns for the lead of the servers sharing a store and returns
// once this one leads (or with ctx's error): lost is closed when it no
// longer does, and resign gives the lead up. etcdstore.Store.Lead is one.
type Lead func(ctx context.Context) (lost <-chan struct{}, resign func(), err error)

// leadRetry is the wait before a campaign that failed (etcd unreachable)
// is made again.
const leadRetry = time.Second

// sendWhileLeading runs sender while lead says this server leads, until
// ctx ends: exactly one server of those sharing the store sends each
// delivery, and another carries on once its lead ends (it died, or was
// cut off from the store). A server that loses the lead stops its sender
// (its attempts in flight are cut and sent again by the next leader) and
// campaigns again. While it leads, follow (when set) wakes the sender for
// the other servers' commits. docs/webhooks.md, "Delivery guarantees".
func sendWhileLeading(ctx context.Context, sender *webhook.Sender, lead Lead, follow func(context.Context, func()), log *slog.Logger) {
	for ctx.Err() == nil {
		lost, resign, err := lead(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			log.Warn("webhook: campaign to send the webhooks; trying again", "err", err, "retry_in", leadRetry)
			select {
			case <-ctx.Done():
				return
			case <-time.After(leadRetry):
			}
			continue
		}
		log.Info("webhook: this server sends the webhooks now")
		sctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() {
			select {
			case <-lost:
				if ctx.Err() == nil { // not the stop, whose cancel ends the lead too
					log.Warn("webhook: this server lost the lead of the webhook senders (its etcd lease ended); another sends them now")
				}
			case <-sctx.Done():
			}
			cancel()
		})
		if follow != nil {
			wg.Go(func() { follow(sctx, sender.Wake) })
		}
		sender.Run(sctx)
		cancel()
		wg.Wait()
		resign()
	}
}
