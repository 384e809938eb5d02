// Package webhook sends a tenant's webhook subscriptions their deliveries
// (docs/webhooks.md). A Matcher makes each append's deliveries, which the
// store puts in its outbox in the append's own commit (store.Outbox), so
// that a delivery exists iff its event does; a Sender sends them, at least
// once and in order per run, signed as Standard Webhooks (sign.go), with
// backoff and a subscription paused after RetryFor of failures; and the
// client it sends with refuses private, loopback and metadata addresses
// unless allowed (safety.go).
package webhook
