package etcd

import (
	"fmt"
	"sync"
	"testing"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// TestTwoServersCreate: two Stores on one prefix (two servers) create runs
// at once. Creates of one request ID under two run IDs make one run, and
// both callers get it; creates of distinct runs all land, and their status
// changes take cursors 1..N, gap-free, each run's creation once, though the
// two servers' Txns raced for every cursor.
func TestTwoServersCreate(t *testing.T) {
	ctx := t.Context()
	prefix := prefixOf(t.TempDir())
	a, b := openShared(t, prefix), openShared(t, prefix)
	defer a.Close()
	defer b.Close()
	servers := []*Store{a, b}

	const rounds = 10
	for round := range rounds {
		var wg sync.WaitGroup
		ids := make([]string, 2)
		created := make([]bool, 2)
		errs := make([]error, 2)
		start := make(chan struct{})
		for i, s := range servers {
			wg.Go(func() {
				ev := started(fmt.Sprintf("run-%02d-%d", round, i))
				ev.GetRunStarted().RequestId = fmt.Sprint("one-request-", round)
				<-start
				st, c, err := s.Create(ctx, ev)
				ids[i], created[i], errs[i] = st.RunID, c, err
			})
		}
		close(start)
		wg.Wait()
		if errs[0] != nil || errs[1] != nil {
			t.Fatalf("round %d: Create: %v, %v", round, errs[0], errs[1])
		}
		if created[0] == created[1] || ids[0] != ids[1] {
			t.Fatalf("round %d: created %v, runs %q: want one run created and both callers given it", round, created, ids)
		}
	}

	const each = 40
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Go(func() {
			for j := range each {
				if _, _, err := s.Create(ctx, started(fmt.Sprintf("run-x-%d-%02d", i, j))); err != nil {
					t.Errorf("Create: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()

	changes, head, err := b.Changes(ctx, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	want := rounds + 2*each
	if head != uint64(want) || len(changes) != want {
		t.Fatalf("%d changes, head %d; want %d of each", len(changes), head, want)
	}
	seen := map[string]bool{}
	for i, c := range changes {
		if c.Cursor != uint64(i+1) {
			t.Fatalf("change %d has cursor %d: the cursors have a gap", i, c.Cursor)
		}
		id := c.Change.GetRunId()
		if seen[id] || c.Change.GetPrevious() != reinv1.RunStatus_RUN_STATUS_UNSPECIFIED {
			t.Fatalf("change %d: run %s from %v again; want each run's creation once", c.Cursor, id, c.Change.GetPrevious())
		}
		seen[id] = true
	}
}
