package telemetry

import (
	"context"
	"crypto/sha256"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/eventkind"
	"github.com/reinhq/rein/internal/runstate"
)

// Tracer turns a run's published events into its spans. A run can pause
// for days, so a run is not one open span: each stretch of work (from an
// append that finds the run idle to the append that pauses or ends it) is
// an invoke_agent span in the run's trace (run_started.trace_id), under the
// caller's span when StartRun carried one. Inside it, each model call is a
// "chat {model}" span and each tool call an "execute_tool {tool}" span,
// timed by the durations the log records; refusals, budget limits,
// approvals, writes, checks and compactions are span events. What each
// kind of event adds is its declaration's Span (internal/eventkind). A stretch cut
// by a crash is never ended, so it is not exported; the run's next stretch,
// after its restart, is in the same trace.
//
// No prompt, reply, argument or tool output goes into a span: only names,
// counts, IDs and outcomes.
type Tracer struct {
	tracer trace.Tracer

	mu   sync.Mutex
	runs map[string]*stretch
}

// stretch is a run's open invoke_agent span and the calls it waits to see
// answered.
type stretch struct {
	span trace.Span
	ctx  context.Context
	end  time.Time
	// model is the open model call (its model_requested), tools the open
	// tool calls' starts by call ID.
	model *reinv1.ModelRequested
	at    time.Time
	tools map[string]time.Time
}

// NewTracer builds spans with tp's tracer.
func NewTracer(tp trace.TracerProvider) *Tracer {
	return &Tracer{tracer: tp.Tracer("github.com/reinhq/rein", trace.WithInstrumentationVersion(SemconvVersion)), runs: map[string]*stretch{}}
}

// Observe adds an append's events to the run's spans; st is the run's
// state after them. A nil Tracer does nothing.
func (t *Tracer) Observe(st runstate.State, evs []*reinv1.Event) {
	if t == nil || len(evs) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.runs[st.RunID]
	if s == nil {
		s = t.open(st, evs[0])
		t.runs[st.RunID] = s
	}
	m := st.Contract.GetModel()
	for _, ev := range evs {
		at := ev.GetRecordedAt().AsTime()
		s.stretchTo(at)
		span := eventkind.Of(ev).Span
		switch span.Call {
		case eventkind.ModelCallStart:
			s.model, s.at = ev.GetModelRequested(), at
		case eventkind.ModelCallEnd:
			t.chat(s, m, ev.GetModelReturned(), at)
		case eventkind.ToolCallStart:
			s.tools[ev.GetToolRequested().GetCallId()] = at
		case eventkind.ToolCallEnd:
			t.tool(s, ev.GetToolReturned(), at)
		}
		if span.Event != "" {
			opts := []trace.EventOption{trace.WithTimestamp(at)}
			if span.Attributes != nil {
				opts = append(opts, trace.WithAttributes(span.Attributes(ev)...))
			}
			s.span.AddEvent(span.Event, opts...)
		}
		if span.Ends != nil && span.Ends(ev) {
			t.close(st, s, ev.GetStatusChanged())
			delete(t.runs, st.RunID)
			if ev != evs[len(evs)-1] {
				// More after a pause in one append (a decision and the
				// write's dispatch): a new stretch takes them.
				s = t.open(st, ev)
				t.runs[st.RunID] = s
			}
		}
	}
}

// open starts a stretch of st's run at first's time.
func (t *Tracer) open(st runstate.State, first *reinv1.Event) *stretch {
	parent := context.Background()
	if sc, ok := runSpanContext(st); ok {
		parent = trace.ContextWithRemoteSpanContext(parent, sc)
	}
	at := first.GetRecordedAt().AsTime()
	name := st.Contract.GetLabels()["agent"]
	if name == "" {
		name = "rein"
	}
	ctx, span := t.tracer.Start(parent, "invoke_agent "+name, trace.WithTimestamp(at), trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(
			attribute.String("gen_ai.operation.name", "invoke_agent"),
			attribute.String("gen_ai.agent.id", st.RunID),
			attribute.String("gen_ai.agent.name", name),
			attribute.String("gen_ai.provider.name", st.Contract.GetModel().GetProvider()),
			attribute.String("gen_ai.request.model", st.Contract.GetModel().GetName()),
			attribute.String("rein.run.id", st.RunID),
			attribute.String("rein.tenant", st.Tenant),
			attribute.String("rein.principal", st.Principal),
		))
	return &stretch{span: span, ctx: ctx, end: at, tools: map[string]time.Time{}}
}

// close ends a stretch where the run paused or ended.
func (t *Tracer) close(st runstate.State, s *stretch, sc *reinv1.StatusChanged) {
	s.span.SetAttributes(attribute.String("rein.status", runstate.StatusName(sc.GetTo())),
		attribute.Int64("gen_ai.usage.input_tokens", int64(st.InputTokens)), attribute.Int64("gen_ai.usage.output_tokens", int64(st.OutputTokens)),
		attribute.Int64("gen_ai.usage.cache_creation.input_tokens", int64(st.CacheWriteTokens)),
		attribute.Int64("gen_ai.usage.cache_read.input_tokens", int64(st.CacheReadTokens)),
		attribute.Int("rein.steps", int(st.Steps)), attribute.Float64("rein.cost_usd", st.CostUSD))
	if sc.GetTo() == reinv1.RunStatus_RUN_STATUS_FAILED {
		s.span.SetStatus(codes.Error, "the run failed: "+sc.GetReason())
	}
	s.span.End(trace.WithTimestamp(s.end))
}

// chat is a model call's span: from its model_requested for as long as its
// model_returned says it took.
func (t *Tracer) chat(s *stretch, m *reinv1.ModelSpec, mr *reinv1.ModelReturned, at time.Time) {
	start := at
	if s.model != nil {
		start = s.at
	}
	end := start.Add(mr.GetDuration().AsDuration())
	attrs := []attribute.KeyValue{
		attribute.String("gen_ai.operation.name", "chat"),
		attribute.String("gen_ai.provider.name", m.GetProvider()),
		attribute.String("gen_ai.request.model", m.GetName()),
		attribute.Int64("gen_ai.usage.input_tokens", int64(mr.GetUsage().GetInputTokens())),
		attribute.Int64("gen_ai.usage.output_tokens", int64(mr.GetUsage().GetOutputTokens())),
		// OpenTelemetry's GenAI names for the prompt cache's input;
		// input_tokens is the input billed at the input price.
		attribute.Int64("gen_ai.usage.cache_creation.input_tokens", int64(mr.GetUsage().GetCacheWriteInputTokens())),
		attribute.Int64("gen_ai.usage.cache_read.input_tokens", int64(mr.GetUsage().GetCacheReadInputTokens())),
		attribute.Float64("rein.cost_usd", mr.GetCostUsd()),
	}
	if s.model != nil {
		attrs = append(attrs, attribute.Int("rein.step", int(s.model.GetStep())), attribute.Bool("rein.resumed", s.model.GetResumed()))
		if mo := s.model.GetMaxOutputTokens(); mo > 0 {
			attrs = append(attrs, attribute.Int64("gen_ai.request.max_tokens", int64(mo)))
		}
	}
	if f := mr.GetFinishReason(); f != "" {
		attrs = append(attrs, attribute.StringSlice("gen_ai.response.finish_reasons", []string{f}))
	}
	if id := mr.GetResponseId(); id != "" {
		attrs = append(attrs, attribute.String("gen_ai.response.id", id))
	}
	name := "chat"
	if m.GetName() != "" {
		name += " " + m.GetName()
	}
	_, span := t.tracer.Start(s.ctx, name, trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	if mr.GetDecision() == nil {
		span.SetStatus(codes.Error, "the reply was not a decision")
	}
	span.End(trace.WithTimestamp(end))
	s.stretchTo(end)
	s.model = nil
}

// tool is a tool call's span, from its tool_requested for as long as its
// tool_returned says it took.
func (t *Tracer) tool(s *stretch, tr *reinv1.ToolReturned, at time.Time) {
	start, ok := s.tools[tr.GetCallId()]
	if !ok {
		start = at
	}
	delete(s.tools, tr.GetCallId())
	end := start.Add(tr.GetDuration().AsDuration())
	_, span := t.tracer.Start(s.ctx, "execute_tool "+tr.GetTool(), trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(
			attribute.String("gen_ai.operation.name", "execute_tool"),
			attribute.String("gen_ai.tool.name", tr.GetTool()),
			attribute.String("gen_ai.tool.call.id", tr.GetCallId()),
			attribute.String("gen_ai.tool.type", "function"),
			attribute.Int64("rein.output_bytes", int64(tr.GetOutputBytes())),
		))
	if tr.GetError() != "" {
		span.SetStatus(codes.Error, "the tool returned an error")
	}
	span.End(trace.WithTimestamp(end))
	s.stretchTo(end)
}

func (s *stretch) stretchTo(t time.Time) {
	if t.After(s.end) {
		s.end = t
	}
}

// runSpanContext is the remote parent of a run's spans: its trace, under
// the caller's span when StartRun carried one, else under a span ID made
// from the trace ID (no span has it: the run's stretches are the trace's
// top). ok is false for a run with no trace ID.
func runSpanContext(st runstate.State) (trace.SpanContext, bool) {
	tid, err := trace.TraceIDFromHex(st.TraceID)
	if err != nil {
		return trace.SpanContext{}, false
	}
	sid, err := trace.SpanIDFromHex(st.TraceParent)
	if err != nil {
		sum := sha256.Sum256(tid[:])
		copy(sid[:], sum[:8])
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true}), true
}
