package server

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/etcdtest"
	etcdstore "github.com/reinhq/rein/internal/store/etcd"
)

// TestSteerOnAnotherServer: two servers share one etcd store; a message
// sent to the one that does not drive the run is recorded at once (its
// watchers see it) and read by the driving server's next model call. The
// twin: a raise sent there for a run that is not paused on its budget is
// refused on either server alike.
func TestSteerOnAnotherServer(t *testing.T) {
	c := etcdtest.Start(t, 1)
	driver := etcdServer(t, c, "/rein/", etcdstore.Options{Timeout: 5 * time.Second})
	other := etcdServer(t, c, "/rein/", etcdstore.Options{Timeout: 5 * time.Second})
	ctx := context.Background()
	resp, err := driver.client.StartRun(ctx, &reinv1.StartRunRequest{RequestId: rand.Text(),
		Contract: contract(nil, lookupCall(2*time.Second), final("done"))}, as("a-operator"))
	if err != nil {
		t.Fatal(err)
	}
	runID := resp.GetRun().GetRunId()
	got, err := other.client.SteerRun(ctx, &reinv1.SteerRunRequest{RunId: runID, Text: "use the EUR ledger", RequestId: "m-1"}, as("a-operator"))
	if err != nil || !got.GetCreated() {
		t.Fatalf("SteerRun on the other server: created %v, %v", got.GetCreated(), err)
	}
	if run := driver.waitRest(t, "a-viewer", runID, 0); run.GetStatus() != reinv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Fatalf("run is %v, want completed", run.GetStatus())
	}
	evs, err := other.client.ListEvents(ctx, &reinv1.ListEventsRequest{RunId: runID}, as("a-viewer"))
	if err != nil {
		t.Fatal(err)
	}
	var steered, requested int
	var afterSteer bool
	for _, ev := range evs.GetEvents() {
		switch {
		case ev.GetRunSteered() != nil:
			steered++
			afterSteer = true
		case ev.GetModelRequested() != nil && afterSteer:
			requested++
		}
	}
	if steered != 1 || requested != 1 {
		t.Errorf("log: %d messages and %d model calls after them, want 1 and 1:\n%v", steered, requested, evs.GetEvents())
	}
	if _, err := other.client.RaiseBudget(ctx, &reinv1.RaiseBudgetRequest{RunId: runID, AddSteps: 1}, as("a-operator")); err == nil {
		t.Error("a raise of a completed run was accepted")
	}
}
