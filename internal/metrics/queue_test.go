package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/durationpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// TestQueueMetrics: a queued run counts in rein_queued_runs for its
// tenant until it is admitted, when its wait is observed; a run started
// at once (the twin) never counts as queued.
func TestQueueMetrics(t *testing.T) {
	m := New()
	start := func(queued bool) *reinv1.Event {
		ev := started("gpt-test")
		ev.GetRunStarted().Tenant, ev.GetRunStarted().Queued = "acme", queued
		return ev
	}
	m.Observe("run_a", []*reinv1.Event{start(true)})
	m.Observe("run_b", []*reinv1.Event{start(false)})
	if got := testutil.ToFloat64(m.queued.WithLabelValues("acme")); got != 1 {
		t.Fatalf("rein_queued_runs{acme} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.runs.WithLabelValues("queued")); got != 1 {
		t.Fatalf("rein_runs{queued} = %v, want 1", got)
	}
	m.Observe("run_a", []*reinv1.Event{
		{Payload: &reinv1.Event_RunAdmitted{RunAdmitted: &reinv1.RunAdmitted{Waited: durationpb.New(2 * time.Second)}}},
		changed(reinv1.RunStatus_RUN_STATUS_QUEUED, running, 2),
	})
	if got := testutil.ToFloat64(m.queued.WithLabelValues("acme")); got != 0 {
		t.Errorf("rein_queued_runs{acme} = %v after the start, want 0", got)
	}
	if got := testutil.ToFloat64(m.runs.WithLabelValues("running")); got != 2 {
		t.Errorf("rein_runs{running} = %v, want 2", got)
	}
	if n := testutil.CollectAndCount(m.queueWait); n != 1 {
		t.Errorf("rein_queue_wait_seconds has %d series, want acme's", n)
	}
}
