package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Webhooks are the webhook sender's metrics (internal/webhook): attempts
// by outcome, how long after its event a delivery arrived, and how many
// wait per subscription. A subscription is named by tenant and name,
// never by run.
type Webhooks struct {
	attempts *prometheus.CounterVec
	lag      prometheus.Histogram
	depth    *prometheus.GaugeVec
	mu       sync.Mutex
	seen     map[[2]string]bool // the depth series set, to zero those gone
}

// Webhooks registers the webhook metrics once and returns them; nil on a
// nil Metrics, whose methods do nothing.
func (m *Metrics) Webhooks() *Webhooks {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.webhooks == nil {
		w := &Webhooks{
			attempts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rein_webhook_deliveries_total",
				Help: "Webhook delivery attempts, by outcome: delivered (2xx), failed (an error or another status; retried), gave_up (failed past --webhook-retry-for; its subscription paused)."},
				[]string{"outcome"}),
			lag: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "rein_webhook_lag_seconds",
				Help:    "From an event's commit to its delivery's 2xx.",
				Buckets: prometheus.ExponentialBuckets(0.01, 4, 12)}),
			depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rein_webhook_queue_depth",
				Help: "Deliveries waiting to be sent, by subscription (tenant, webhook)."},
				[]string{"tenant", "webhook"}),
			seen: map[[2]string]bool{},
		}
		m.Registry.MustRegister(w.attempts, w.lag, w.depth)
		m.webhooks = w
	}
	return m.webhooks
}

// Attempted counts one attempt's outcome: "delivered", "failed" or
// "gave_up".
func (w *Webhooks) Attempted(outcome string) {
	if w != nil {
		w.attempts.WithLabelValues(outcome).Inc()
	}
}

// Delivered records the lag of a delivery that arrived.
func (w *Webhooks) Delivered(lag time.Duration) {
	if w != nil {
		w.lag.Observe(lag.Seconds())
	}
}

// Depths sets the queue depth of every subscription, from one scan: a
// subscription missing from depths (deleted) is dropped.
func (w *Webhooks) Depths(depths map[[2]string]int) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for k := range w.seen {
		if _, ok := depths[k]; !ok {
			w.depth.DeleteLabelValues(k[0], k[1])
			delete(w.seen, k)
		}
	}
	for k, n := range depths {
		w.depth.WithLabelValues(k[0], k[1]).Set(float64(n))
		w.seen[k] = true
	}
}
