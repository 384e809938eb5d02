package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
)

// testOutboxGoesWithAnErasedRun: deleting a run deletes its deliveries,
// pending and failed, in every subscription of its tenant, and no other
// run's, not even one whose ID the deleted run's is a prefix of; a run
// that may not be deleted (it is live) keeps its deliveries. The same
// after a reopen.
func testOutboxGoesWithAnErasedRun(t *testing.T, h *hookHarness) {
	ctx := context.Background()
	if _, ok := h.s.(store.Lifecycle); !ok {
		t.Skipf("%T does not implement store.Lifecycle", h.s)
	}
	for _, name := range []string{"oncall", "audit"} {
		mustCreateWebhook(t, h.s, subscription("acme", name))
	}
	r1 := newSpec(1)
	r10 := spec{id: r1.id + "0", tenant: "acme", requestID: "req-10", goal: "goal 10"}
	live := newSpec(2)
	// r1 and r10 end; live stays running.
	for _, sp := range []spec{r1, r10} {
		mustStart(t, h.s, sp)
		mustAppend(t, h.s, sp.id, 1, statusChanged(sp.id, 2, running, completed))
	}
	mustStart(t, h.s, live)

	// One of r1's deliveries failed: a failed delivery goes too.
	ds, err := h.s.Deliveries(ctx, "acme", "oncall", 100)
	if err != nil || len(ds) != 5 {
		t.Fatalf("deliveries = %v, %v; want r1's, r10's and live's", ds, err)
	}
	if ds[0].GetRunId() != r1.id {
		t.Fatalf("the first delivery is of run %s, want %s", ds[0].GetRunId(), r1.id)
	}
	if err := h.s.UpdateDelivery(ctx, ds[0], func(d *reinv1.WebhookDelivery) (bool, error) {
		d.State = reinv1.WebhookDeliveryState_WEBHOOK_DELIVERY_STATE_FAILED
		return false, nil
	}); err != nil {
		t.Fatalf("UpdateDelivery: %v", err)
	}
	runsOf := func() string {
		t.Helper()
		got := map[string]int{}
		for _, name := range []string{"oncall", "audit"} {
			ds, err := h.s.Deliveries(ctx, "acme", name, 100)
			if err != nil {
				t.Fatalf("Deliveries(acme/%s): %v", name, err)
			}
			for _, d := range ds {
				got[d.GetRunId()]++
			}
		}
		return fmt.Sprint(got) // fmt sorts a map's keys
	}
	del := func(id string) error {
		lc := h.s.(store.Lifecycle)
		_, _, err := lc.Delete(ctx, &reinv1.RunDeletion{
			RunId: id, DeletedBy: "principal:test", DeletedAt: timestamppb.New(epoch.Add(48 * time.Hour)), Reason: "test",
		})
		return err
	}

	// The twin: a live run's delete is refused and its deliveries stay.
	if err := del(live.id); !errors.Is(err, store.ErrLive) {
		t.Fatalf("deleting a live run: %v, want ErrLive", err)
	}
	before := fmt.Sprint(map[string]int{r1.id: 4, r10.id: 4, live.id: 2})
	if got := runsOf(); got != before {
		t.Fatalf("deliveries by run after a refused delete = %s, want %s", got, before)
	}

	if err := del(r1.id); err != nil {
		t.Fatalf("Delete(%s): %v", r1.id, err)
	}
	want := fmt.Sprint(map[string]int{r10.id: 4, live.id: 2})
	if got := runsOf(); got != want {
		t.Fatalf("deliveries by run after deleting %s = %s, want %s", r1.id, got, want)
	}
	h.reopen()
	if got := runsOf(); got != want {
		t.Fatalf("deliveries by run after a reopen = %s, want %s", got, want)
	}
}
