package etcd

import (
	"fmt"
	"slices"
	"testing"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
)

// TestListAcrossBatches: over more runs than one batch of the listing
// indexes, in three statuses, pages of every filter come newest first,
// each run once, none missing, merged across the status ranges; a key in an
// index that names no run is reported Damaged and hides no run.
func TestListAcrossBatches(t *testing.T) {
	ctx := t.Context()
	prefix := prefixOf(t.TempDir())
	s := openShared(t, prefix)
	defer s.Close()
	const runs = 3*listBatch + 5
	running, needsIn, failed := reinv1.RunStatus_RUN_STATUS_RUNNING, reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT, reinv1.RunStatus_RUN_STATUS_FAILED
	statusOf := map[string]reinv1.RunStatus{}
	var ids []string
	for i := range runs {
		id := fmt.Sprintf("run-%04d", i)
		mustCreate(t, s, id)
		statusOf[id] = running
		var to reinv1.RunStatus
		switch {
		case i%3 == 1 || (i > 100 && i < 180): // long stretches of one status
			to = failed
		case i%7 == 2:
			to = needsIn
		}
		if to != 0 {
			ev := step(id, 2)
			ev.Payload = &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{From: running, To: to, Reason: "test", Error: "quota"}}
			if to == needsIn {
				ev.Payload = &reinv1.Event_InputRequested{InputRequested: &reinv1.InputRequested{Question: &reinv1.Question{Text: "which?"}}}
				sc := step(id, 3)
				sc.Payload = &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{From: running, To: to, Reason: "test"}}
				if _, err := s.Append(ctx, id, 1, []*reinv1.Event{ev, sc}); err != nil {
					t.Fatal(err)
				}
			} else if _, err := s.Append(ctx, id, 1, []*reinv1.Event{ev}); err != nil {
				t.Fatal(err)
			}
			statusOf[id] = to
		}
		ids = append(ids, id)
	}
	slices.Reverse(ids)
	// A foreign key in the failed index, between runs.
	if _, err := shared.Put(ctx, s.keys.statuses(failed)+invert("run-0150")+"x", ""); err != nil {
		t.Fatal(err)
	}
	for _, statuses := range [][]reinv1.RunStatus{nil, {running}, {failed}, {running, failed}, {needsIn, running, failed, needsIn}} {
		var want, got []string
		for _, id := range ids {
			if len(statuses) == 0 || slices.Contains(statuses, statusOf[id]) {
				want = append(want, id)
			}
		}
		damagedSeen := 0
		f := store.Filter{Statuses: statuses, Limit: 7}
		for pages := 0; ; pages++ {
			if pages > runs {
				t.Fatalf("%v: paging does not end", statuses)
			}
			page, err := s.List(ctx, f)
			if err != nil {
				t.Fatalf("%v: List: %v", statuses, err)
			}
			damagedSeen += len(page.Damaged)
			for _, st := range page.Runs {
				got = append(got, st.RunID)
			}
			if page.Next == "" {
				break
			}
			f.After = page.Next
		}
		if !slices.Equal(got, want) {
			t.Errorf("%v: listed %d runs, want %d:\n got  %v\n want %v", statuses, len(got), len(want), got, want)
		}
		if wantDamaged := slices.Contains(statuses, failed); (damagedSeen > 0) != wantDamaged {
			t.Errorf("%v: %d damaged reported; want some only when the failed index is read", statuses, damagedSeen)
		}
	}
}
