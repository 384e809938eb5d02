package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestTrackStoreFormat: rein_store_format reports the active format and
// the build's newest, apart while a finalization is pending. Its twin: a
// nil Metrics tracks nothing and does not panic.
func TestTrackStoreFormat(t *testing.T) {
	m := New()
	active := 6
	m.TrackStoreFormat(func() int { return active }, 7)
	want := `
# HELP rein_store_format The store format: kind=active is the store's active format, what this server writes now; kind=build_max the newest its build writes.
# TYPE rein_store_format gauge
rein_store_format{kind="active"} 6
rein_store_format{kind="build_max"} 7
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), "rein_store_format"); err != nil {
		t.Fatal(err)
	}
	active = 7
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(strings.Replace(want, `"active"} 6`, `"active"} 7`, 1)), "rein_store_format"); err != nil {
		t.Fatal(err)
	}
	var none *Metrics
	none.TrackStoreFormat(func() int { return 0 }, 0)
}
