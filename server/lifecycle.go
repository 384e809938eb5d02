package server

import (
	"context"
	"log/slog"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
)

// logLifecycle writes a run's lifecycle lines from an append's events:
// started, paused, resumed (a person's answer or decision carried it on),
// taken over (a server carried it on after a restart or another's lease ended)
// and ended, each with the run's ID, trace ID, tenant and principal. What the run
// was asked or answered is never logged: a goal or an answer may hold what
// an operator must not read.
func logLifecycle(log *slog.Logger, st runstate.State, evs []*reinv1.Event) {
	ctx := context.Background()
	if !log.Enabled(ctx, slog.LevelInfo) {
		return
	}
	for _, ev := range evs {
		switch p := ev.GetPayload().(type) {
		case *reinv1.Event_RunStarted:
			m := p.RunStarted.GetContract().GetModel()
			attrs := []any{"run_id", st.RunID, "trace_id", st.TraceID, "tenant", st.Tenant, "principal", st.Principal,
				"model", m.GetProvider() + "/" + m.GetName()}
			if parent := p.RunStarted.GetParentRunId(); parent != "" {
				attrs = append(attrs, "forked_from", parent, "at", p.RunStarted.GetParentSequence())
			}
			log.Info("run started", attrs...)
		case *reinv1.Event_RunTaken:
			log.Info("run taken over", "run_id", st.RunID, "trace_id", st.TraceID, "tenant", st.Tenant, "principal", st.Principal,
				"owner", p.RunTaken.GetOwner(), "epoch", p.RunTaken.GetEpoch())
		case *reinv1.Event_StatusChanged:
			sc := p.StatusChanged
			attrs := []any{"run_id", st.RunID, "trace_id", st.TraceID, "tenant", st.Tenant, "principal", st.Principal,
				"status", runstate.StatusName(sc.GetTo()), "reason", sc.GetReason()}
			switch {
			case runstate.Terminal(sc.GetTo()):
				attrs = append(attrs, "steps", st.Steps, "tokens", st.InputTokens+st.OutputTokens, "cost_usd", st.CostUSD)
				if sc.GetTo() == reinv1.RunStatus_RUN_STATUS_FAILED {
					log.Warn("run ended", append(attrs, "error", sc.GetError())...)
					continue
				}
				log.Info("run ended", attrs...)
			case runstate.Paused(sc.GetTo()):
				log.Info("run paused", attrs...)
			case runstate.Paused(sc.GetFrom()):
				log.Info("run resumed", attrs...)
			}
		}
	}
}
