package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Lifecycle are the archive's and retention's metrics, registered by
// NewLifecycle on a Metrics' registry.
type Lifecycle struct {
	archived    prometheus.Counter
	archBytes   prometheus.Counter
	failures    prometheus.Counter
	unreachable prometheus.Gauge
	deleted     *prometheus.CounterVec
}

// NewLifecycle registers the lifecycle's metrics: rein_runs_archived_total,
// rein_archive_bytes_total, rein_archive_failures_total,
// rein_archive_unreachable (1 while the last attempt failed) and
// rein_runs_deleted_total by reason (policy or request). A nil m gives a
// Lifecycle that records nothing.
func (m *Metrics) NewLifecycle() *Lifecycle {
	l := &Lifecycle{
		archived: prometheus.NewCounter(prometheus.CounterOpts{Name: "rein_runs_archived_total",
			Help: "Runs moved from the live store to the archive."}),
		archBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "rein_archive_bytes_total",
			Help: "Bytes of exports written to the archive."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "rein_archive_failures_total",
			Help: "Attempts to archive or delete a run that the archive refused or did not answer; the run stays where it was and is retried."}),
		unreachable: prometheus.NewGauge(prometheus.GaugeOpts{Name: "rein_archive_unreachable",
			Help: "1 while the archive's last answer was a failure, 0 once it answers again."}),
		deleted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rein_runs_deleted_total",
			Help: "Runs erased, by why: retention (policy) or DeleteRun (request)."}, []string{"by"}),
	}
	if m != nil {
		m.Registry.MustRegister(l.archived, l.archBytes, l.failures, l.unreachable, l.deleted)
	}
	return l
}

// Archived records a run archived, its export size bytes.
func (l *Lifecycle) Archived(bytes int) {
	if l == nil {
		return
	}
	l.archived.Inc()
	l.archBytes.Add(float64(bytes))
	l.unreachable.Set(0)
}

// Failed records an attempt the archive failed.
func (l *Lifecycle) Failed() {
	if l == nil {
		return
	}
	l.failures.Inc()
	l.unreachable.Set(1)
}

// Deleted records a run erased, by "policy" or "request".
func (l *Lifecycle) Deleted(by string) {
	if l == nil {
		return
	}
	l.deleted.WithLabelValues(by).Inc()
}
