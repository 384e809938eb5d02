package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// genAI are the GenAI client metrics of the OpenTelemetry semantic
// conventions (gen_ai.client.operation.duration and
// gen_ai.client.token.usage), in their Prometheus form, with the buckets
// the conventions advise.
type genAI struct {
	duration *prometheus.HistogramVec
	tokens   *prometheus.HistogramVec
}

// OfferGenAI adds the GenAI semantic conventions' client metrics to the
// registry: gen_ai_client_operation_duration_seconds and
// gen_ai_client_token_usage, by gen_ai_operation_name,
// gen_ai_provider_name and gen_ai_request_model (and gen_ai_token_type).
// rein serve offers them when traces are on. Call it once, before
// Observe.
func (m *Metrics) OfferGenAI() {
	if m == nil || m.genAI != nil {
		return
	}
	labels := []string{"gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model"}
	g := &genAI{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gen_ai_client_operation_duration_seconds",
			Help:    "GenAI operation duration (OpenTelemetry semantic conventions: gen_ai.client.operation.duration).",
			Buckets: []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}}, labels),
		tokens: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gen_ai_client_token_usage",
			Help:    "Tokens used per GenAI operation, by type (OpenTelemetry semantic conventions: gen_ai.client.token.usage).",
			Buckets: []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}},
			append(labels, "gen_ai_token_type")),
	}
	m.Registry.MustRegister(g.duration, g.tokens)
	m.mu.Lock()
	m.genAI = g
	m.mu.Unlock()
}

// observe records one answered model call; the caller holds mu.
func (g *genAI) observe(provider, model string, mr *reinv1.ModelReturned) {
	if g == nil {
		return
	}
	if d := mr.GetDuration(); d != nil {
		g.duration.WithLabelValues("chat", provider, model).Observe(d.AsDuration().Seconds())
	}
	g.tokens.WithLabelValues("chat", provider, model, "input").Observe(float64(mr.GetUsage().GetInputTokens()))
	g.tokens.WithLabelValues("chat", provider, model, "output").Observe(float64(mr.GetUsage().GetOutputTokens()))
}
