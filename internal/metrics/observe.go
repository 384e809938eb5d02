package metrics

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/eventkind"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
)

// liveStatuses are the statuses of runs that have not ended.
var liveStatuses = []reinv1.RunStatus{
	reinv1.RunStatus_RUN_STATUS_RUNNING, reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT, reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL,
	reinv1.RunStatus_RUN_STATUS_NEEDS_BUDGET, reinv1.RunStatus_RUN_STATUS_QUEUED,
}

// bucketKind is a rate bucket's name as a bounded label: its scope and
// what it counts, "model/requests" for "model/openai/gpt-4o/requests".
func bucketKind(name string) string {
	scope, _, _ := strings.Cut(name, "/")
	what := name[strings.LastIndexByte(name, '/')+1:]
	switch {
	case scope != "model" && scope != "tenant", what != "requests" && what != "tokens":
		return "other"
	}
	return scope + "/" + what
}

// tenantLabel is tenant as a label value: the first tenants seen, then
// "other", so that the label stays bounded. The caller holds m.mu.
func (m *Metrics) tenantLabel(tenant string) string { return m.tenants.get(tenant) }

// live says whether s is the status of a run that has not ended.
func live(s reinv1.RunStatus) bool {
	return s == reinv1.RunStatus_RUN_STATUS_RUNNING || s == reinv1.RunStatus_RUN_STATUS_QUEUED || runstate.Paused(s)
}

// statusLabel is a status as a label value: "needs_approval".
func statusLabel(s reinv1.RunStatus) string { return runstate.StatusName(s) }

// Seed counts the runs the store holds that have not ended, so that
// rein_runs and rein_approvals_waiting start from what is stored rather
// than from 0 when a server starts on a store it used before. Call it once,
// before the engine carries runs on.
func (m *Metrics) Seed(ctx context.Context, s store.Store) error {
	if m == nil {
		return nil
	}
	f := store.Filter{Statuses: liveStatuses, Limit: 500}
	for {
		page, err := s.List(ctx, f)
		if err != nil {
			return fmt.Errorf("metrics: count the stored runs: %w", err)
		}
		m.mu.Lock()
		for _, st := range page.Runs {
			if _, ok := m.live[st.RunID]; ok {
				continue
			}
			r := &liveRun{status: st.Status, tenant: st.Tenant}
			r.provider, r.model = m.modelLabels(st.Contract.GetModel())
			if st.Status == reinv1.RunStatus_RUN_STATUS_QUEUED {
				m.queued.WithLabelValues(m.tenantLabel(st.Tenant)).Inc()
			}
			if st.Pending.GetProposal() != nil {
				r.asked = st.UpdatedAt.UnixNano()
				m.approvalsWaiting.Inc()
			}
			m.live[st.RunID] = r
			m.runs.WithLabelValues(statusLabel(st.Status)).Inc()
		}
		m.mu.Unlock()
		if page.Next == "" {
			return nil
		}
		f.After = page.Next
	}
}

// modelLabels are a model's provider and name as labels; the caller holds
// mu.
func (m *Metrics) modelLabels(spec *reinv1.ModelSpec) (provider, model string) {
	provider = spec.GetProvider()
	switch provider {
	case "openai", "anthropic", "script":
	default:
		provider = "other"
	}
	return provider, m.models.get(spec.GetName())
}

// Observe counts what one durable append of a run recorded: each event as
// its kind's declaration says it counts (internal/eventkind). It is the
// engine's publish hook's second reader, beside the watch hub: it never
// blocks for long and never fails.
func (m *Metrics) Observe(runID string, evs []*reinv1.Event) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.live[runID]
	for _, ev := range evs {
		metric := eventkind.Of(ev).Metric
		switch metric.Counts {
		case eventkind.RunStart:
			rs := ev.GetRunStarted()
			r = &liveRun{status: reinv1.RunStatus_RUN_STATUS_RUNNING, tenant: rs.GetTenant()}
			if rs.GetQueued() {
				r.status = reinv1.RunStatus_RUN_STATUS_QUEUED
				m.queued.WithLabelValues(m.tenantLabel(r.tenant)).Inc()
			}
			r.provider, r.model = m.modelLabels(rs.GetContract().GetModel())
			m.live[runID] = r
			m.runsStarted.Inc()
			m.runs.WithLabelValues(statusLabel(r.status)).Inc()
		case eventkind.Throttled:
			mt := ev.GetModelThrottled()
			m.rateWait.WithLabelValues(bucketKind(mt.GetBucket())).Observe(mt.GetWait().AsDuration().Seconds())
		case eventkind.Admitted:
			tenant := ""
			if r != nil {
				tenant = r.tenant
			}
			m.queueWait.WithLabelValues(m.tenantLabel(tenant)).Observe(ev.GetRunAdmitted().GetWaited().AsDuration().Seconds())
		case eventkind.Step:
			m.steps.Inc()
		case eventkind.ModelCall:
			mr := ev.GetModelReturned()
			provider, model := "other", "other"
			if r != nil {
				provider, model = r.provider, r.model
			}
			m.modelCalls.WithLabelValues(provider, model).Inc()
			if d := mr.GetDuration(); d != nil {
				m.modelDuration.WithLabelValues(provider, model).Observe(d.AsDuration().Seconds())
			}
			m.modelTokens.WithLabelValues(provider, model, "input").Add(float64(mr.GetUsage().GetInputTokens()))
			m.modelTokens.WithLabelValues(provider, model, "output").Add(float64(mr.GetUsage().GetOutputTokens()))
			m.modelTokens.WithLabelValues(provider, model, "cache_write").Add(float64(mr.GetUsage().GetCacheWriteInputTokens()))
			m.modelTokens.WithLabelValues(provider, model, "cache_read").Add(float64(mr.GetUsage().GetCacheReadInputTokens()))
			if c := mr.GetCostUsd(); c > 0 {
				m.modelCost.WithLabelValues(provider, model).Add(c)
			}
			m.genAI.observe(provider, model, mr)
		case eventkind.ModelRetry:
			m.modelRetries.WithLabelValues(retryLabel(ev.GetModelRetried().GetReason())).Inc()
		case eventkind.ToolCall:
			tr := ev.GetToolReturned()
			tool := m.tools.get(tr.GetTool())
			outcome := "ok"
			if tr.GetError() != "" {
				outcome = "error"
			}
			m.toolCalls.WithLabelValues(tool, outcome).Inc()
			if d := tr.GetDuration(); d != nil {
				m.toolDuration.WithLabelValues(tool).Observe(d.AsDuration().Seconds())
			}
		case eventkind.ToolRefusal:
			// The model names the tool, granted or not: only a name this
			// server already labels is kept.
			tool := "other"
			if name := ev.GetToolRefused().GetTool(); m.tools.seen[name] {
				tool = name
			}
			m.toolCalls.WithLabelValues(tool, "refused").Inc()
		case eventkind.ApprovalAsked:
			if r != nil {
				r.asked = ev.GetRecordedAt().AsTime().UnixNano()
			}
			m.approvalsWaiting.Inc()
		case eventkind.ApprovalDecided:
			// A policy's approval is no person's decision: it leaves the
			// waiting count, and no wait is observed.
			m.settleApproval(r, ev, !strings.HasPrefix(ev.GetActor(), "policy:"))
		case eventkind.PolicyDecision:
			pd := ev.GetPolicyDecided()
			m.policyDecisions.WithLabelValues(eventkind.EffectName(pd.GetEffect()), eventkind.SourceName(pd.GetSource()),
				strconv.FormatBool(pd.GetError() != "")).Inc()
		case eventkind.Write:
			m.writes.WithLabelValues(metric.Outcome).Inc()
		case eventkind.StatusChange:
			sc := ev.GetStatusChanged()
			if sc.GetFrom() == reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL && r != nil && r.asked != 0 {
				// Expired, cancelled, or moved on without a decision event.
				m.settleApproval(r, ev, false)
			}
			if live(sc.GetFrom()) {
				m.runs.WithLabelValues(statusLabel(sc.GetFrom())).Dec()
			}
			if sc.GetFrom() == reinv1.RunStatus_RUN_STATUS_QUEUED && r != nil {
				m.queued.WithLabelValues(m.tenantLabel(r.tenant)).Dec()
			}
			if runstate.Terminal(sc.GetTo()) {
				m.runsEnded.WithLabelValues(statusLabel(sc.GetTo())).Inc()
				delete(m.live, runID)
				r = nil
				continue
			}
			m.runs.WithLabelValues(statusLabel(sc.GetTo())).Inc()
			if r != nil {
				r.status = sc.GetTo()
			}
		}
	}
}

// settleApproval takes the run's pending approval off the waiting count
// and, for a person's decision, observes how long it waited.
func (m *Metrics) settleApproval(r *liveRun, ev *reinv1.Event, decided bool) {
	if r == nil || r.asked == 0 {
		return
	}
	m.approvalsWaiting.Dec()
	if decided {
		if waited := ev.GetRecordedAt().AsTime().UnixNano() - r.asked; waited >= 0 {
			m.approvalWait.Observe(float64(waited) / 1e9)
		}
	}
	r.asked = 0
}

// retryLabel is model_retried's reason as a label: one of the few words
// the harness records, else "other".
func retryLabel(reason string) string {
	switch reason = strings.TrimSpace(reason); reason {
	case "rate_limited", "server_error", "transport", "retryable":
		return reason
	case "":
		return "retryable"
	}
	return "other"
}
