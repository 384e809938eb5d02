package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestLifecycleMetrics: an archive that fails raises rein_archive_unreachable
// and counts the failure; the next run archived lowers it again.
func TestLifecycleMetrics(t *testing.T) {
	m := New()
	l := m.NewLifecycle()
	l.Failed()
	if got := testutil.ToFloat64(l.unreachable); got != 1 {
		t.Fatalf("rein_archive_unreachable after a failure = %v, want 1", got)
	}
	if got := testutil.ToFloat64(l.failures); got != 1 {
		t.Fatalf("rein_archive_failures_total = %v, want 1", got)
	}
	l.Archived(1000)
	if got := testutil.ToFloat64(l.unreachable); got != 0 {
		t.Fatalf("rein_archive_unreachable after a success = %v, want 0", got)
	}
	if got := testutil.ToFloat64(l.archived); got != 1 {
		t.Fatalf("rein_runs_archived_total = %v, want 1", got)
	}
	if got := testutil.ToFloat64(l.archBytes); got != 1000 {
		t.Fatalf("rein_archive_bytes_total = %v, want 1000", got)
	}
	l.Deleted("policy")
	l.Deleted("request")
	l.Deleted("request")
	if got := testutil.ToFloat64(l.deleted.WithLabelValues("request")); got != 2 {
		t.Fatalf("rein_runs_deleted_total{by=request} = %v, want 2", got)
	}
	// Registered on the node's registry, so /metrics shows them.
	n, err := testutil.GatherAndCount(m.Registry, "rein_runs_archived_total", "rein_archive_unreachable", "rein_runs_deleted_total")
	if err != nil || n != 4 {
		t.Fatalf("gathered %d lifecycle series, %v; want 4", n, err)
	}
	// A nil Lifecycle (no metrics) records nothing and does not panic.
	var none *Lifecycle
	none.Failed()
	none.Archived(1)
	none.Deleted("policy")
}
