package metrics

import "github.com/prometheus/client_golang/prometheus"

// TrackStoreFormat reports the store format on /metrics:
// rein_store_format{kind="active"} is the store's active format (what the
// server writes now), kind="build_max" the newest its build writes; the
// two differ while a finalization is pending (docs/upgrading.md).
func (m *Metrics) TrackStoreFormat(active func() int, buildMax int) {
	if m == nil {
		return
	}
	m.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "rein_store_format", ConstLabels: prometheus.Labels{"kind": "active"},
			Help: "The store format: kind=active is the store's active format, what this server writes now; kind=build_max the newest its build writes."},
			func() float64 { return float64(active()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "rein_store_format", ConstLabels: prometheus.Labels{"kind": "build_max"},
			Help: "The store format: kind=active is the store's active format, what this server writes now; kind=build_max the newest its build writes."},
			func() float64 { return float64(buildMax) }),
	)
}
