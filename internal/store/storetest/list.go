package storetest

import (
	"fmt"
	"slices"
	"testing"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
)

// listRun is one run of the List fixture.
type listRun struct {
	id     string
	tenant string
	labels map[string]string
	status reinv1.RunStatus
}

func testList(t *testing.T, h *harness) {
	const n = 24
	var fixture []listRun
	for i := 1; i <= n; i++ {
		sp := newSpec(i)
		sp.tenant = "acme"
		if i%3 == 0 {
			sp.tenant = "globex"
		}
		sp.labels = map[string]string{"team": "blue"}
		if i%2 == 0 {
			sp.labels["team"] = "red"
		}
		if i%5 == 0 {
			sp.labels["env"] = "prod"
		}
		mustCreate(t, h.s, runStarted(sp))
		var rest []*reinv1.Event
		status := running
		switch i % 4 {
		case 1:
			rest = steps(sp.id, 2, 2)
		case 2:
			status = needsIn
			rest = []*reinv1.Event{inputRequested(sp.id, 2), statusChanged(sp.id, 3, running, needsIn)}
		case 3:
			status = completed
			rest = []*reinv1.Event{step(sp.id, 2), step(sp.id, 3), statusChanged(sp.id, 4, running, completed)}
		case 0:
			status = failed
			rest = []*reinv1.Event{statusChanged(sp.id, 2, running, failed)}
		}
		mustAppend(t, h.s, sp.id, 1, rest...)
		fixture = append(fixture, listRun{id: sp.id, tenant: sp.tenant, labels: sp.labels, status: status})
	}

	filters := []struct {
		name string
		f    store.Filter
	}{
		{"all", store.Filter{}},
		{"status_running", store.Filter{Statuses: []reinv1.RunStatus{running}}},
		{"status_completed", store.Filter{Statuses: []reinv1.RunStatus{completed}}},
		{"statuses_paused_or_failed", store.Filter{Statuses: []reinv1.RunStatus{needsIn, failed}}},
		{"statuses_three", store.Filter{Statuses: []reinv1.RunStatus{running, completed, failed}}},
		{"status_none_match", store.Filter{Statuses: []reinv1.RunStatus{cancelled}}},
		{"label_red", store.Filter{Labels: map[string]string{"team": "red"}}},
		{"labels_both", store.Filter{Labels: map[string]string{"team": "blue", "env": "prod"}}},
		{"label_value_mismatch", store.Filter{Labels: map[string]string{"team": "green"}}},
		{"label_missing_key", store.Filter{Labels: map[string]string{"owner": "bob"}}},
		{"tenant_acme", store.Filter{Tenant: "acme"}},
		{"tenant_globex", store.Filter{Tenant: "globex"}},
		{"tenant_unknown", store.Filter{Tenant: "initech"}},
		{"tenant_and_status", store.Filter{Tenant: "globex", Statuses: []reinv1.RunStatus{completed, needsIn}}},
		{"tenant_and_label", store.Filter{Tenant: "acme", Labels: map[string]string{"team": "red"}}},
		{"status_and_label", store.Filter{Statuses: []reinv1.RunStatus{failed}, Labels: map[string]string{"env": "prod"}}},
		{"all_three", store.Filter{
			Tenant:   "acme",
			Statuses: []reinv1.RunStatus{running, completed},
			Labels:   map[string]string{"team": "blue"},
		}},
	}
	for _, tc := range filters {
		want := matching(fixture, tc.f)
		if tc.name == "all" && len(want) != n {
			t.Fatalf("fixture: %d runs, want %d", len(want), n)
		}
		for _, limit := range []int{1, 2, 5, n - 1, n, 100} {
			f := tc.f
			f.Limit = limit
			t.Run(fmt.Sprintf("%s/limit_%d", tc.name, limit), func(t *testing.T) {
				assertRuns(t, h.s, f, want)
			})
		}
	}

	// The runs List returns are the runs' states.
	page, err := h.s.List(t.Context(), store.Filter{Limit: n})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	for _, st := range page.Runs {
		assertState(t, "List vs Load", st, mustLoad(t, h.s, st.RunID))
	}
}

// matching is the fixture's runs that f keeps, newest first.
func matching(fixture []listRun, f store.Filter) []string {
	var ids []string
	for _, r := range slices.Backward(fixture) {
		if len(f.Statuses) > 0 && !slices.Contains(f.Statuses, r.status) {
			continue
		}
		if f.Tenant != "" && r.tenant != f.Tenant {
			continue
		}
		keep := true
		for k, v := range f.Labels {
			if got, ok := r.labels[k]; !ok || got != v {
				keep = false
			}
		}
		if keep {
			ids = append(ids, r.id)
		}
	}
	return ids
}

// assertRuns pages through List with f (f.Limit set) and fails unless the
// pages hold exactly want in order, each page at most f.Limit long, every
// page but the last full with a Next, and the last with no Next.
func assertRuns(t *testing.T, s store.Store, f store.Filter, want []string) {
	t.Helper()
	var got []string
	pages := 0
	for {
		pages++
		if pages > len(want)+2 {
			t.Fatalf("List(%+v): more than %d pages; Next never empties", f, len(want)+2)
		}
		page, err := s.List(t.Context(), f)
		if err != nil {
			t.Fatalf("List(%+v): %v", f, err)
		}
		if len(page.Runs) > f.Limit {
			t.Fatalf("List(%+v): %d runs, more than the limit", f, len(page.Runs))
		}
		for _, st := range page.Runs {
			got = append(got, st.RunID)
			if f.Tenant != "" && st.Tenant != f.Tenant {
				t.Errorf("List(%+v): run %s of tenant %q", f, st.RunID, st.Tenant)
			}
			if len(f.Statuses) > 0 && !slices.Contains(f.Statuses, st.Status) {
				t.Errorf("List(%+v): run %s is %v", f, st.RunID, st.Status)
			}
			for k, v := range f.Labels {
				if st.Contract.GetLabels()[k] != v {
					t.Errorf("List(%+v): run %s labels %v", f, st.RunID, st.Contract.GetLabels())
				}
			}
		}
		if page.Next == "" {
			break
		}
		if len(page.Runs) < f.Limit {
			t.Errorf("List(%+v): a short page of %d with Next %q", f, len(page.Runs), page.Next)
		}
		f.After = page.Next
	}
	if !slices.Equal(got, want) {
		t.Errorf("List(%+v) pages hold\n %v\nwant\n %v", f, got, want)
	}
	if wantPages := max(1, (len(want)+f.Limit-1)/f.Limit); pages != wantPages {
		t.Errorf("List(%+v): %d pages for %d runs, want %d: Next must be empty on the last page",
			f, pages, len(want), wantPages)
	}
}

func testListRejectsBadLimit(t *testing.T, h *harness) {
	mustCreate(t, h.s, runStarted(newSpec(1)))
	for _, limit := range []int{0, -1} {
		if _, err := h.s.List(t.Context(), store.Filter{Limit: limit}); err == nil {
			t.Errorf("List(Limit: %d): err = nil, want an error", limit)
		}
	}
	assertRuns(t, h.s, store.Filter{Limit: 1}, []string{runID(1)})
}
