package metrics

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/store/mem"
)

var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

func started(name string) *reinv1.Event {
	return &reinv1.Event{RecordedAt: timestamppb.New(t0), Payload: &reinv1.Event_RunStarted{RunStarted: &reinv1.RunStarted{
		Contract: &reinv1.TaskContract{Model: &reinv1.ModelSpec{Provider: "openai", Name: name}},
	}}}
}

func changed(from, to reinv1.RunStatus, sec int) *reinv1.Event {
	return &reinv1.Event{RecordedAt: timestamppb.New(t0.Add(time.Duration(sec) * time.Second)),
		Payload: &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{From: from, To: to}}}
}

const (
	running  = reinv1.RunStatus_RUN_STATUS_RUNNING
	approval = reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL
	done     = reinv1.RunStatus_RUN_STATUS_COMPLETED
)

// TestObserveRun: one run's events, as its appends publish them, make its
// metrics: a step, a model call with its tokens, cost and duration, a tool
// call, an approval that waited 90s, a committed write, and the run's
// statuses on the way.
func TestObserveRun(t *testing.T) {
	m := New()
	m.Observe("run_a", []*reinv1.Event{started("gpt-test")})
	if got := testutil.ToFloat64(m.runs.WithLabelValues("running")); got != 1 {
		t.Fatalf("running = %v after run_started", got)
	}
	m.Observe("run_a", []*reinv1.Event{
		{Payload: &reinv1.Event_ModelRequested{ModelRequested: &reinv1.ModelRequested{Step: 1}}},
		{Payload: &reinv1.Event_ModelReturned{ModelReturned: &reinv1.ModelReturned{
			Usage: &reinv1.Usage{InputTokens: 120, OutputTokens: 30, CacheWriteInputTokens: 7, CacheReadInputTokens: 900}, CostUsd: 0.25, Duration: durationpb.New(1500 * time.Millisecond)}}},
	})
	m.Observe("run_a", []*reinv1.Event{
		{Payload: &reinv1.Event_ToolReturned{ToolReturned: &reinv1.ToolReturned{Tool: "search", Duration: durationpb.New(20 * time.Millisecond)}}},
		{RecordedAt: timestamppb.New(t0.Add(10 * time.Second)), Payload: &reinv1.Event_ApprovalRequested{ApprovalRequested: &reinv1.ApprovalRequested{}}},
		changed(running, approval, 10),
	})
	if got := testutil.ToFloat64(m.approvalsWaiting); got != 1 {
		t.Fatalf("approvals waiting = %v", got)
	}
	m.Observe("run_a", []*reinv1.Event{
		{RecordedAt: timestamppb.New(t0.Add(100 * time.Second)), Payload: &reinv1.Event_ApprovalDecided{ApprovalDecided: &reinv1.ApprovalDecided{Approved: true}}},
		{Payload: &reinv1.Event_WriteDispatched{WriteDispatched: &reinv1.WriteDispatched{}}},
	})
	m.Observe("run_a", []*reinv1.Event{
		{Payload: &reinv1.Event_WriteCommitted{WriteCommitted: &reinv1.WriteCommitted{}}},
		changed(approval, running, 101),
	})
	m.Observe("run_a", []*reinv1.Event{changed(running, done, 102)})

	for name, c := range map[string]struct{ got, want float64 }{
		"started":        {testutil.ToFloat64(m.runsStarted), 1},
		"ended":          {testutil.ToFloat64(m.runsEnded.WithLabelValues("completed")), 1},
		"running":        {testutil.ToFloat64(m.runs.WithLabelValues("running")), 0},
		"needs_approval": {testutil.ToFloat64(m.runs.WithLabelValues("needs_approval")), 0},
		"steps":          {testutil.ToFloat64(m.steps), 1},
		"model calls":    {testutil.ToFloat64(m.modelCalls.WithLabelValues("openai", "gpt-test")), 1},
		"input tokens":   {testutil.ToFloat64(m.modelTokens.WithLabelValues("openai", "gpt-test", "input")), 120},
		"output tokens":  {testutil.ToFloat64(m.modelTokens.WithLabelValues("openai", "gpt-test", "output")), 30},
		"cache writes":   {testutil.ToFloat64(m.modelTokens.WithLabelValues("openai", "gpt-test", "cache_write")), 7},
		"cache reads":    {testutil.ToFloat64(m.modelTokens.WithLabelValues("openai", "gpt-test", "cache_read")), 900},
		"cost":           {testutil.ToFloat64(m.modelCost.WithLabelValues("openai", "gpt-test")), 0.25},
		"tool calls":     {testutil.ToFloat64(m.toolCalls.WithLabelValues("search", "ok")), 1},
		"writes":         {testutil.ToFloat64(m.writes.WithLabelValues("committed")), 1},
		"waiting":        {testutil.ToFloat64(m.approvalsWaiting), 0},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", name, c.got, c.want)
		}
	}
	if n := testutil.CollectAndCount(m.approvalWait); n != 1 {
		t.Errorf("approval wait has %d series", n)
	}
	if len(m.live) != 0 {
		t.Errorf("%d runs still tracked after the run ended", len(m.live))
	}
}

// The twins: labels stay bounded. A contract's model name is a label only
// for the first maxLabelValues names; a tool the model invented (refused,
// never granted) is "other"; a provider rein does not know is "other".
func TestLabelsAreBounded(t *testing.T) {
	m := New()
	for i := range maxLabelValues + 50 {
		id := fmt.Sprintf("run_%d", i)
		m.Observe(id, []*reinv1.Event{started(fmt.Sprintf("model-%d", i)),
			{Payload: &reinv1.Event_ModelReturned{ModelReturned: &reinv1.ModelReturned{}}},
			{Payload: &reinv1.Event_ToolRefused{ToolRefused: &reinv1.ToolRefused{Tool: fmt.Sprintf("invented-%d", i)}}},
			changed(running, done, 1)})
	}
	if n := testutil.CollectAndCount(m.modelCalls); n != maxLabelValues+1 {
		t.Errorf("model calls has %d series, want %d (the first %d names and other)", n, maxLabelValues+1, maxLabelValues)
	}
	if got := testutil.ToFloat64(m.modelCalls.WithLabelValues("openai", "other")); got != 50 {
		t.Errorf(`model "other" = %v, want 50`, got)
	}
	if n := testutil.CollectAndCount(m.toolCalls); n != 1 {
		t.Errorf("tool calls has %d series, want 1 (refusals of invented tools are all other)", n)
	}
	m.Observe("run_x", []*reinv1.Event{{Payload: &reinv1.Event_RunStarted{RunStarted: &reinv1.RunStarted{
		Contract: &reinv1.TaskContract{Model: &reinv1.ModelSpec{Provider: "made-up", Name: "model-0"}}}}},
		{Payload: &reinv1.Event_ModelReturned{ModelReturned: &reinv1.ModelReturned{}}}})
	if got := testutil.ToFloat64(m.modelCalls.WithLabelValues("other", "model-0")); got != 1 {
		t.Errorf(`provider "other" = %v, want 1`, got)
	}
}

// An approval that ends without a decision (it expired, the run was
// cancelled) leaves the waiting count, but observes no time to decision.
func TestApprovalWithoutDecision(t *testing.T) {
	m := New()
	m.Observe("run_a", []*reinv1.Event{started("gpt-test"),
		{RecordedAt: timestamppb.New(t0), Payload: &reinv1.Event_ApprovalRequested{ApprovalRequested: &reinv1.ApprovalRequested{}}},
		changed(running, approval, 0)})
	m.Observe("run_a", []*reinv1.Event{changed(approval, reinv1.RunStatus_RUN_STATUS_EXPIRED, 3600)})
	if got := testutil.ToFloat64(m.approvalsWaiting); got != 0 {
		t.Errorf("approvals waiting = %v after expiry", got)
	}
	if got := testutil.ToFloat64(m.runsEnded.WithLabelValues("expired")); got != 1 {
		t.Errorf("expired = %v", got)
	}
	if n := testutil.CollectAndCount(m.approvalWait); n != 1 || sampleCount(t, m) != 0 {
		t.Errorf("an expiry was observed as a decision")
	}
}

func sampleCount(t *testing.T, m *Metrics) uint64 {
	t.Helper()
	mf, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range mf {
		if f.GetName() == "rein_approval_decision_seconds" {
			return f.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	t.Fatal("no rein_approval_decision_seconds")
	return 0
}

// A nil *Metrics records nothing and never panics: a node without metrics
// calls it all the same.
func TestNilMetrics(t *testing.T) {
	var m *Metrics
	m.Observe("run_a", []*reinv1.Event{started("x")})
	m.WatchOpened("run")()
	m.WatchLagged("runs")
	if m.Store(nil) != nil {
		t.Error("a nil Metrics wrapped the store")
	}
}

// The store wrapper times the appends that were stored, and counts the
// ones that were not (here a stale version) apart, as errors.
func TestStoreTimesAppends(t *testing.T) {
	m := New()
	s := m.Store(mem.New())
	ctx := context.Background()
	first := started("gpt-test")
	first.RunId, first.Sequence = "run_a", 1
	first.GetRunStarted().Contract.Goal = "g"
	if _, _, err := s.Create(ctx, first); err != nil {
		t.Fatal(err)
	}
	step := func(seq uint64) []*reinv1.Event {
		return []*reinv1.Event{{RunId: "run_a", Sequence: seq, RecordedAt: timestamppb.New(t0),
			Payload: &reinv1.Event_ModelRequested{ModelRequested: &reinv1.ModelRequested{Step: 1}}}}
	}
	if _, err := s.Append(ctx, "run_a", 1, step(2)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "run_a", 1, step(2)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("stale append: %v, want a conflict", err)
	}
	if got := testutil.ToFloat64(m.appendErrors); got != 1 {
		t.Errorf("append errors = %v, want 1", got)
	}
	mf, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range mf {
		if f.GetName() == "rein_store_append_duration_seconds" {
			if n := f.GetMetric()[0].GetHistogram().GetSampleCount(); n != 1 {
				t.Errorf("%d appends timed, want the 1 stored", n)
			}
		}
	}
}

// The GenAI conventions' client metrics are there only when offered (rein
// serve offers them with traces on), and then count each model call.
func TestGenAIMetricsOffered(t *testing.T) {
	names := func(m *Metrics) map[string]bool {
		mf, err := m.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, f := range mf {
			out[f.GetName()] = true
		}
		return out
	}
	call := []*reinv1.Event{started("gpt-test"), {Payload: &reinv1.Event_ModelReturned{ModelReturned: &reinv1.ModelReturned{
		Usage: &reinv1.Usage{InputTokens: 120, OutputTokens: 30}, Duration: durationpb.New(time.Second)}}}}
	off := New()
	off.Observe("run_a", call)
	if names(off)["gen_ai_client_operation_duration_seconds"] {
		t.Error("GenAI metrics registered without OfferGenAI")
	}
	on := New()
	on.OfferGenAI()
	on.Observe("run_a", call)
	if got := testutil.CollectAndCount(on.genAI.tokens); got != 2 {
		t.Errorf("token usage has %d series, want input and output", got)
	}
	if !names(on)["gen_ai_client_operation_duration_seconds"] || !names(on)["gen_ai_client_token_usage"] {
		t.Errorf("GenAI metrics missing: %v", names(on))
	}
}
