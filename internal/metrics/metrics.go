// Package metrics is what rein tells Prometheus: its own metrics, named by
// Prometheus' conventions (the rein_ prefix, _total for counters, _seconds
// and other base units), and the gRPC server's (go-grpc-middleware's
// Prometheus provider), on one registry that `rein serve --admin-listen`
// serves at /metrics.
//
// rein's run metrics are read off the events each durable append publishes
// (Observe), the same events every watcher gets, so a metric says what the
// log says: a step is counted when its model_requested is stored, a write
// when its write_committed is. The durations come from the log too (each
// model_returned, tool_returned and write_committed records its own), and
// approvals' time to decision from the events' recorded times. The store's
// appends are timed by a wrapper around the store (Store).
//
// Label values are bounded: no run ID, proposal ID or tenant is ever a
// label, and the labels that come from contracts (model, tool) keep at most
// maxLabelValues values each; further ones read "other".
package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/version"
)

// maxLabelValues bounds the values of a label taken from contracts (a
// model's name, a tool's): a server whose runs name more sees "other".
const maxLabelValues = 100

// Metrics is rein's metrics on one registry. A nil *Metrics is valid and
// records nothing.
type Metrics struct {
	// Registry holds every metric below, the Go runtime's and the
	// process's; serve it with promhttp.
	Registry *prometheus.Registry

	runsStarted      prometheus.Counter
	runsEnded        *prometheus.CounterVec
	runs             *prometheus.GaugeVec
	steps            prometheus.Counter
	modelCalls       *prometheus.CounterVec
	modelDuration    *prometheus.HistogramVec
	modelTokens      *prometheus.CounterVec
	modelCost        *prometheus.CounterVec
	modelRetries     *prometheus.CounterVec
	toolCalls        *prometheus.CounterVec
	policyDecisions  *prometheus.CounterVec
	queued           *prometheus.GaugeVec
	queueWait        *prometheus.HistogramVec
	rateWait         *prometheus.HistogramVec
	scheduleTicks    *prometheus.CounterVec
	toolDuration     *prometheus.HistogramVec
	approvalsWaiting prometheus.Gauge
	approvalWait     prometheus.Histogram
	writes           *prometheus.CounterVec
	appendDuration   prometheus.Histogram
	appendEvents     prometheus.Histogram
	appendErrors     prometheus.Counter
	watchStreams     *prometheus.GaugeVec
	watchLagging     *prometheus.CounterVec
	// takeovers, leaseLosses and lookovers exist once TrackLeases is called (a
	// replica); guarded by mu.
	takeovers, leaseLosses prometheus.Counter
	lookovers              *prometheus.HistogramVec
	// webhooks exist once Webhooks is called; guarded by mu.
	webhooks *Webhooks

	// mu guards live and the label sets.
	mu sync.Mutex
	// live is what Observe needs of each run that has not ended: its
	// model's labels, its status, and when its pending approval was asked.
	live    map[string]*liveRun
	models  *labelSet
	tools   *labelSet
	tenants *labelSet
	// genAI, once OfferGenAI is called, are the GenAI conventions' client
	// metrics.
	genAI *genAI
}

// liveRun is a run that has not ended, as Observe tracks it.
type liveRun struct {
	provider, model string
	tenant          string
	status          reinv1.RunStatus
	// asked is when the run's pending approval was requested (unix nanos);
	// 0 when none is pending.
	asked int64
}

// New registers rein's metrics, the Go runtime's and the process's on a new
// registry, with rein_build_info set for this binary.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	f := func(c prometheus.Collector) { reg.MustRegister(c) }
	f(collectors.NewGoCollector())
	f(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := &Metrics{
		Registry: reg,
		runsStarted: prometheus.NewCounter(prometheus.CounterOpts{Name: "rein_runs_started_total",
			Help: "Runs created (started, forked or imported)."}),
		runsEnded: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rein_runs_ended_total",
			Help: "Runs that reached a terminal status, by that status."}, []string{"status"}),
		runs: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rein_runs",
			Help: "Runs that have not ended, by status (running, needs_input, needs_approval)."}, []string{"status"}),
		steps: prometheus.NewCounter(prometheus.CounterOpts{Name: "rein_steps_total",
			Help: "Steps taken: model calls recorded (model_requested), a resent call after a restart included."}),
		modelCalls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rein_model_calls_total",
			Help: "Model calls that answered (model_returned), by provider and model."}, []string{"provider", "model"}),
		modelDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rein_model_call_duration_seconds",
			Help:    "How long model calls took (model_returned.duration), by provider and model.",
			Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 20, 40, 80, 160}}, []string{"provider", "model"}),
		modelTokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rein_model_tokens_total",
			Help: "Tokens the providers reported, by provider, model and type (input: uncached input; cache_write, cache_read: input written to or read from the prompt cache; output)."}, []string{"provider", "model", "type"}),
		modelCost: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rein_model_cost_usd_total",
			Help: "What model calls cost in US dollars, by the server's price table, by provider and model."}, []string{"provider", "model"}),
		modelRetries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rein_model_retries_total",
			Help: "Model calls retried (model_retried), by reason: rate_limited, server_error, transport, retryable."}, []string{"reason"}),
		toolCalls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rein_tool_calls_total",
			Help: "Tool calls, by tool and outcome: ok, error (an observation for the model), refused (not granted, or its arguments broke its schema)."},
			[]string{"tool", "outcome"}),
		policyDecisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rein_policy_decisions_total",
			Help: "Tool calls a policy decided (policy_decided), by effect (allow, ask, deny) and source (contract, server, service); failed says the decision failed closed."},
			[]string{"effect", "source", "failed"}),
		toolDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rein_tool_call_duration_seconds",
			Help:    "How long tool calls took (tool_returned.duration), by tool.",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}}, []string{"tool"}),
		approvalsWaiting: prometheus.NewGauge(prometheus.GaugeOpts{Name: "rein_approvals_waiting",
			Help: "Proposed writes waiting for a person's decision."}),
		approvalWait: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "rein_approval_decision_seconds",
			Help:    "Time from a write's proposal to a person's decision (approve or reject); a policy's approval is not counted.",
			Buckets: []float64{1, 10, 30, 60, 300, 900, 3600, 4 * 3600, 24 * 3600, 7 * 24 * 3600}}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rein_writes_total",
			Help: "Approved writes by outcome: committed, refused (the tool wrote nothing), unknown (left to a person)."}, []string{"outcome"}),
		appendDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "rein_store_append_duration_seconds",
			Help:    "How long the store took to make an append durable (a commit).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}}),
		appendEvents: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "rein_store_append_events",
			Help:    "Events per append.",
			Buckets: []float64{1, 2, 3, 4, 6, 8, 16, 64, 256}}),
		appendErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "rein_store_append_errors_total",
			Help: "Appends the store refused or failed (a conflict, a fenced owner, a full disk, a damaged store)."}),
		watchStreams: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rein_watch_streams",
			Help: "Watch streams open, by kind: run (WatchRun) or runs (WatchRuns)."}, []string{"kind"}),
		watchLagging: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rein_watch_store_reads_total",
			Help: "Times a watcher that fell behind the live tail was served from the store, by kind."}, []string{"kind"}),
		live:    map[string]*liveRun{},
		models:  newLabelSet(maxLabelValues),
		tools:   newLabelSet(maxLabelValues),
		tenants: newLabelSet(maxLabelValues),
		scheduleTicks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rein_schedule_ticks_total",
			Help: "Schedule ticks, by outcome: started (a run), skipped (the schedule's last run was still going), missed (no server ran the tick on time, and the schedule does not catch up), refused (the server refused the run as the schedule is)."},
			[]string{"outcome"}),
		rateWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rein_model_rate_wait_seconds",
			Help:    "How long model calls waited for the shared rate limits (model_throttled), by the kind of bucket that was empty: requests or tokens, of a model or a tenant.",
			Buckets: []float64{.01, .1, .5, 1, 2.5, 5, 10, 30, 60, 120}}, []string{"bucket"}),
		queued: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rein_queued_runs",
			Help: "Runs waiting in a queue for a slot (status queued), by tenant."}, []string{"tenant"}),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rein_queue_wait_seconds",
			Help:    "How long queued runs waited for a slot (run_admitted.waited), by tenant.",
			Buckets: []float64{.01, .1, .5, 1, 5, 15, 60, 300, 900, 3600, 4 * 3600}}, []string{"tenant"}),
	}
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rein_build_info",
		Help: "rein's build: always 1, with the version, VCS revision and Go version as labels."},
		[]string{"version", "revision", "goversion"})
	b := version.Get()
	build.WithLabelValues(b.GetVersion(), b.GetRevision(), b.GetGoVersion()).Set(1)
	for _, c := range []prometheus.Collector{m.runsStarted, m.runsEnded, m.runs, m.steps, m.modelCalls, m.modelDuration,
		m.modelTokens, m.modelCost, m.modelRetries, m.toolCalls, m.policyDecisions, m.queued, m.queueWait, m.rateWait, m.scheduleTicks, m.toolDuration, m.approvalsWaiting, m.approvalWait,
		m.writes, m.appendDuration, m.appendEvents, m.appendErrors, m.watchStreams, m.watchLagging, build} {
		f(c)
	}
	for _, s := range liveStatuses {
		m.runs.WithLabelValues(statusLabel(s)) // present at 0 from the start
	}
	for _, kind := range []string{"run", "runs"} {
		m.watchStreams.WithLabelValues(kind)
		m.watchLagging.WithLabelValues(kind)
	}
	return m
}

// WatchOpened counts a watch stream (kind "run" or "runs") until the
// returned func is called.
func (m *Metrics) WatchOpened(kind string) (closed func()) {
	if m == nil {
		return func() {}
	}
	g := m.watchStreams.WithLabelValues(kind)
	g.Inc()
	return g.Dec
}

// ScheduleTicked counts n schedule ticks that came to outcome. A nil
// Metrics counts nothing.
func (m *Metrics) ScheduleTicked(outcome string, n int) {
	if m != nil {
		m.scheduleTicks.WithLabelValues(outcome).Add(float64(n))
	}
}

// WatchLagged counts a watcher of kind served from the store because it
// fell behind the live tail.
func (m *Metrics) WatchLagged(kind string) {
	if m != nil {
		m.watchLagging.WithLabelValues(kind).Inc()
	}
}

// labelSet keeps at most max values of a label; Get maps any further one
// to "other".
type labelSet struct {
	max  int
	seen map[string]bool
}

func newLabelSet(max int) *labelSet { return &labelSet{max: max, seen: map[string]bool{}} }

// get is v, or "other" once max other values were seen. The caller holds
// Metrics.mu.
func (l *labelSet) get(v string) string {
	if l.seen[v] {
		return v
	}
	if len(l.seen) >= l.max {
		return "other"
	}
	l.seen[v] = true
	return v
}
