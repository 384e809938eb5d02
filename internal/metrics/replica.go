package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Replicas: a server sharing an etcd store with others holds an etcd lease
// and, under it, the leases of the runs it drives; it takes over the runs
// of servers whose leases end.

// TrackLeases reports, at each scrape, how many runs' leases this server
// holds (rein_leases_held) and whether it holds its own etcd lease
// (rein_replica_lease_held, 1 or 0).
func (m *Metrics) TrackLeases(runs func() int, holding func() bool) {
	if m == nil {
		return
	}
	m.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "rein_leases_held",
			Help: "Runs whose lease this server holds: the runs it drives or drove last."},
			func() float64 { return float64(runs()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "rein_replica_lease_held",
			Help: "1 while this server holds its etcd lease (it may drive runs), else 0."},
			func() float64 {
				if holding() {
					return 1
				}
				return 0
			}),
	)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.takeovers == nil {
		m.takeovers = prometheus.NewCounter(prometheus.CounterOpts{Name: "rein_takeovers_total",
			Help: "Runs this server carried on after the server that held them stopped (or, once per run, after a restart)."})
		m.leaseLosses = prometheus.NewCounter(prometheus.CounterOpts{Name: "rein_lease_losses_total",
			Help: "Times this server lost its etcd lease and stopped driving its runs."})
		m.lookovers = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rein_lookover_seconds",
			Help:    "Looks for runs to carry on, by kind: every_live_run (at start, after a new lease or a missed watch), unowned (the runs no server took, once per TTL), left (the runs of a server whose lease ended), own (this server's runs it does not tend, once per TTL).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10)}, []string{"kind"})
		m.Registry.MustRegister(m.takeovers, m.leaseLosses, m.lookovers)
	}
}

// TookOver counts a run this server carried on from another owner.
func (m *Metrics) TookOver() {
	if m == nil {
		return
	}
	m.mu.Lock()
	c := m.takeovers
	m.mu.Unlock()
	if c != nil {
		c.Inc()
	}
}

// LostLease counts a loss of this server's etcd lease.
func (m *Metrics) LostLease() {
	if m == nil {
		return
	}
	m.mu.Lock()
	c := m.leaseLosses
	m.mu.Unlock()
	if c != nil {
		c.Inc()
	}
}

// LookedOver records a look for runs to carry on of kind (internal/
// replica's Look kinds) that took d.
func (m *Metrics) LookedOver(kind string, d time.Duration) {
	if m == nil {
		return
	}
	m.mu.Lock()
	h := m.lookovers
	m.mu.Unlock()
	if h != nil {
		h.WithLabelValues(kind).Observe(d.Seconds())
	}
}
