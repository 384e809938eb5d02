package admission

import (
	"fmt"
	"testing"
	"time"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
)

var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

func queuedRun(tenant string, i int, priority int32) runstate.State {
	return runstate.State{RunID: fmt.Sprintf("run_%s_%03d", tenant, i), Tenant: tenant, Status: reinv1.RunStatus_RUN_STATUS_QUEUED,
		CreatedAt: t0.Add(time.Duration(i) * time.Second), Contract: &reinv1.TaskContract{Priority: priority}}
}

// fill takes slots from s until total slots are taken or none may be,
// and returns how many each tenant got, in the order given.
func fill(s *shares, total int) (map[string]int, []string) {
	got, order := map[string]int{}, []string(nil)
	for s.total < total {
		t := s.next()
		if t == nil {
			break
		}
		w := t.queued[0]
		s.run(w.id, w.tenant)
		got[t.name]++
		order = append(order, w.id)
	}
	return got, order
}

// TestWeightedShares: tenants with queued runs share the slots in
// proportion to their weights; a tenant's own limit caps it; the twin,
// equal weights, share equally.
func TestWeightedShares(t *testing.T) {
	for _, tc := range []struct {
		name    string
		weights map[string]float64
		max     map[string]int
		slots   int
		want    map[string]int
	}{
		{"2 to 1", map[string]float64{"a": 2, "b": 1}, nil, 9, map[string]int{"a": 6, "b": 3}},
		{"equal", map[string]float64{"a": 1, "b": 1}, nil, 8, map[string]int{"a": 4, "b": 4}},
		{"a capped", map[string]float64{"a": 5, "b": 1}, map[string]int{"a": 2}, 8, map[string]int{"a": 2, "b": 6}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newShares(func(tenant string) (int, float64) { return tc.max[tenant], tc.weights[tenant] }, nil)
			for i := range 50 {
				s.queue(waitingOf(queuedRun("a", i, 0)))
				s.queue(waitingOf(queuedRun("b", i, 0)))
			}
			got, _ := fill(s, tc.slots)
			if got["a"] != tc.want["a"] || got["b"] != tc.want["b"] {
				t.Errorf("slots %v, want %v", got, tc.want)
			}
		})
	}
}

// TestOrderWithinTenant: a tenant's runs start by priority, then by
// arrival; a newcomer tenant with one run goes before a tenant already
// running more.
func TestOrderWithinTenant(t *testing.T) {
	s := newShares(func(string) (int, float64) { return 0, 1 }, []runstate.State{
		{RunID: "r1", Tenant: "a"}, {RunID: "r2", Tenant: "a"}, {RunID: "r3", Tenant: "a"},
	})
	s.queue(waitingOf(queuedRun("a", 1, 0)))
	s.queue(waitingOf(queuedRun("a", 2, 5)))
	s.queue(waitingOf(queuedRun("a", 0, 0)))
	s.queue(waitingOf(queuedRun("b", 9, 0)))
	_, order := fill(s, 7)
	want := []string{"run_b_009", "run_a_002", "run_a_000", "run_a_001"}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Errorf("started %v, want %v", order, want)
	}
}
