package server

// Admission through the API (docs/design.md §17): runs over a limit are
// queued, durable, started in their turn and fairly across tenants.

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
)

// slowFinal is a one-step contract whose model answers after delay.
func slowFinal(delay time.Duration) *reinv1.TaskContract {
	r := final("done")
	r.DelayMs = uint32(delay / time.Millisecond)
	return contract(nil, r)
}

func limits(max int) *AdmissionConfig {
	return &AdmissionConfig{Tenant: func(string) (int, float64) { return 0, 1 }, MaxRunning: max, Every: 50 * time.Millisecond}
}

// countStatus is how many of the store's runs have status.
func countStatus(t *testing.T, st store.Store, status reinv1.RunStatus) int {
	t.Helper()
	n := 0
	f := store.Filter{Statuses: []reinv1.RunStatus{status}, Limit: 1000}
	for {
		page, err := st.List(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		n += len(page.Runs)
		if page.Next == "" {
			return n
		}
		f.After = page.Next
	}
}

// waitFor polls cond every 10ms until it holds, or fails after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("%s: not within %s", what, d)
		}
	}
}

// TestNoisyNeighbour: tenant acme queues 500 runs on a server that runs 4
// at once; globex then starts one, which starts at the next slot that
// frees, not after acme's 500. GetRun says a queued run's place.
func TestNoisyNeighbour(t *testing.T) {
	s := newTCPServer(t, Config{Directory: testDirectory(t), Admission: limits(4)})
	ctx := context.Background()
	var last *reinv1.Run
	for i := range 500 {
		resp, err := s.client.StartRun(ctx, &reinv1.StartRunRequest{RequestId: fmt.Sprintf("a-%d", i), Contract: slowFinal(time.Second)}, as("a-operator"))
		if err != nil {
			t.Fatal(err)
		}
		last = resp.GetRun()
	}
	waitFor(t, 10*time.Second, "acme's first 4 runs start", func() bool { return countStatus(t, s.node.Store, stRunning) == 4 })
	// The last run's place is the number of acme's runs queued, itself
	// included, as it stood when GetRun read it: between two counts.
	before := countStatus(t, s.node.Store, reinv1.RunStatus_RUN_STATUS_QUEUED)
	got, err := s.client.GetRun(ctx, &reinv1.GetRunRequest{RunId: last.GetRunId()}, as("a-operator"))
	if err != nil {
		t.Fatal(err)
	}
	after := countStatus(t, s.node.Store, reinv1.RunStatus_RUN_STATUS_QUEUED)
	if pos := int(got.GetRun().GetQueuePosition()); got.GetRun().GetStatus() != reinv1.RunStatus_RUN_STATUS_QUEUED || pos < after || pos > before || pos < 100 {
		t.Fatalf("acme's last run is %s at place %d, want queued, last of the %d to %d queued", got.GetRun().GetStatus(), pos, after, before)
	}
	queuedAtB := countStatus(t, s.node.Store, reinv1.RunStatus_RUN_STATUS_QUEUED)
	b, err := s.client.StartRun(ctx, &reinv1.StartRunRequest{RequestId: "b-1", Contract: slowFinal(0)}, as("b-operator"))
	if err != nil {
		t.Fatal(err)
	}
	if b.GetRun().GetStatus() != reinv1.RunStatus_RUN_STATUS_QUEUED || b.GetRun().GetQueuePosition() != 1 {
		t.Fatalf("globex's run is %s at place %d, want queued at 1", b.GetRun().GetStatus(), b.GetRun().GetQueuePosition())
	}
	var aStarted int
	waitFor(t, 10*time.Second, "globex's run starts", func() bool {
		st, err := s.node.Store.Load(ctx, b.GetRun().GetRunId())
		if err != nil {
			t.Fatal(err)
		}
		if st.Status == reinv1.RunStatus_RUN_STATUS_QUEUED {
			return false
		}
		aStarted = queuedAtB - countStatus(t, s.node.Store, reinv1.RunStatus_RUN_STATUS_QUEUED)
		return true
	})
	// At most the slots that freed with its own, in the pass that started
	// it (acme's runs started together, and end together): not the 496
	// queued before it.
	if aStarted > 4 {
		t.Errorf("%d of acme's runs started after globex's one was queued and before it started; want it to start at the next slot that freed", aStarted)
	}
	if n := countStatus(t, s.node.Store, stRunning); n > 4 {
		t.Errorf("%d runs running at once, over the limit of 4", n)
	}
}

// TestQueuedSurvivesRestart: queued runs stay queued across a restart, and
// each is started once, in order; its twin, a cancelled queued run, never
// starts.
func TestQueuedSurvivesRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rein.db")
	s := serveTCP(t, Config{Store: boltAt(t, path), Admission: limits(1)})
	ctx := context.Background()
	var ids []string
	for i := range 5 {
		resp, err := s.client.StartRun(ctx, &reinv1.StartRunRequest{RequestId: fmt.Sprintf("r-%d", i), Contract: slowFinal(100 * time.Millisecond)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, resp.GetRun().GetRunId())
	}
	if _, err := s.client.CancelRun(ctx, &reinv1.CancelRunRequest{RunId: ids[4], Reason: "not needed"}); err != nil {
		t.Fatalf("cancel a queued run: %v", err)
	}
	s.node.Close() // at once, mid-run
	s = serveTCP(t, Config{Store: boltAt(t, path), Admission: limits(1), Resume: true})
	for _, id := range ids[:4] {
		waitFor(t, 20*time.Second, "run "+id+" ends", func() bool {
			st, err := s.node.Store.Load(ctx, id)
			return err == nil && runstate.Terminal(st.Status)
		})
	}
	for i, id := range ids {
		resp, err := s.client.ListEvents(ctx, &reinv1.ListEventsRequest{RunId: id, PageSize: 1000})
		if err != nil {
			t.Fatal(err)
		}
		evs := resp.GetEvents()
		admitted := countPayload(evs, "run_admitted")
		want := 1
		if i == 4 {
			want = 0
		}
		if admitted != want {
			t.Errorf("run %d was admitted %d times, want %d\n%s", i, admitted, want, logText(evs))
		}
	}
}

// TestQueuedDeadlineAndList: ListRuns gives each queued run its place; a
// queued run whose timeout counts from its submission ends
// budget_exhausted when it passes in the queue, while one whose timeout
// counts from its start (the twin) keeps waiting.
func TestQueuedDeadlineAndList(t *testing.T) {
	s := newTCPServer(t, Config{Admission: limits(1)})
	ctx := context.Background()
	start := func(id string, c *reinv1.TaskContract) string {
		resp, err := s.client.StartRun(ctx, &reinv1.StartRunRequest{RequestId: id, Contract: c})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetRun().GetRunId()
	}
	busy := start("busy", slowFinal(time.Minute)) // holds the one slot
	fromSubmission := slowFinal(0)
	fromSubmission.Budget = &reinv1.Budget{Timeout: durationpb.New(300 * time.Millisecond), TimeoutFromSubmission: true}
	fromStart := slowFinal(0)
	fromStart.Budget = &reinv1.Budget{Timeout: durationpb.New(300 * time.Millisecond)}
	late := start("late", fromSubmission)
	waiting := start("waiting", fromStart)
	list, err := s.client.ListRuns(ctx, &reinv1.ListRunsRequest{Statuses: []reinv1.RunStatus{reinv1.RunStatus_RUN_STATUS_QUEUED}})
	if err != nil {
		t.Fatal(err)
	}
	places := map[string]uint32{}
	for _, r := range list.GetRuns() {
		places[r.GetRunId()] = r.GetQueuePosition()
	}
	if places[late] != 1 || places[waiting] != 2 || len(places) != 2 {
		t.Fatalf("ListRuns places %v, want %s at 1 and %s at 2", places, late, waiting)
	}
	waitFor(t, 10*time.Second, "the run whose deadline counts from its submission ends", func() bool {
		st, err := s.node.Store.Load(ctx, late)
		return err == nil && st.Status == reinv1.RunStatus_RUN_STATUS_BUDGET_EXHAUSTED
	})
	st, err := s.node.Store.Load(ctx, waiting)
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != reinv1.RunStatus_RUN_STATUS_QUEUED || !st.Deadline.IsZero() {
		t.Errorf("the run whose deadline counts from its start is %s with deadline %v; want queued with none yet", runstate.StatusName(st.Status), st.Deadline)
	}
	if _, err := s.client.CancelRun(ctx, &reinv1.CancelRunRequest{RunId: busy}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the waiting run starts and ends", func() bool {
		st, err := s.node.Store.Load(ctx, waiting)
		return err == nil && runstate.Terminal(st.Status)
	})
	if st, _ := s.node.Store.Load(ctx, waiting); st.Status != reinv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Errorf("the waiting run is %s, want completed within its timeout from its start", runstate.StatusName(st.Status))
	}
}
