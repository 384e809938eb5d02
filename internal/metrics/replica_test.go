package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestLookedOver: a replica's looks for runs to carry on are counted by
// kind once it tracks its leases; before that, and on nil Metrics, a look
// records nothing and panics nowhere.
func TestLookedOver(t *testing.T) {
	var none *Metrics
	none.LookedOver("unowned", time.Millisecond) // nil: nothing, no panic

	m := New()
	m.LookedOver("unowned", time.Millisecond) // not a replica yet: nothing
	m.TrackLeases(func() int { return 0 }, func() bool { return true })
	m.LookedOver("unowned", 3*time.Millisecond)
	m.LookedOver("unowned", 5*time.Millisecond)
	m.LookedOver("left", time.Millisecond)
	n, err := testutil.GatherAndCount(m.Registry, "rein_lookover_seconds")
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("rein_lookover_seconds has %d series, want 2 (unowned, left)", n)
	}
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != "rein_lookover_seconds" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			counts[mt.GetLabel()[0].GetValue()] = mt.GetHistogram().GetSampleCount()
		}
	}
	if counts["unowned"] != 2 || counts["left"] != 1 {
		t.Fatalf("rein_lookover_seconds counts %v; want 2 looks of kind unowned and 1 of kind left", counts)
	}
}
