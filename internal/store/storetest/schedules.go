package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
)

func schedulesOf(t *testing.T, h *harness) store.Schedules {
	t.Helper()
	s, ok := h.s.(store.Schedules)
	if !ok {
		t.Skip("the store keeps no schedules")
	}
	return s
}

// testSchedules: a schedule is created once per tenant and name, listed by
// tenant, updated, kept across a reopen, and deleted; a refused update
// (its function's error) changes nothing.
func testSchedules(t *testing.T, h *harness) {
	ctx := context.Background()
	sc := schedulesOf(t, h)
	mk := func(tenant, name string) *reinv1.Schedule {
		return &reinv1.Schedule{Name: name, Tenant: tenant, Cron: "@hourly", Contract: &reinv1.TaskContract{Goal: "g"}}
	}
	for _, s := range []*reinv1.Schedule{mk("acme", "a"), mk("acme", "b"), mk("globex", "a")} {
		if err := sc.CreateSchedule(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if err := sc.CreateSchedule(ctx, mk("acme", "a")); !errors.Is(err, store.ErrExists) {
		t.Fatalf("a second acme/a: %v, want ErrExists", err)
	}
	acme, err := sc.ListSchedules(ctx, "acme")
	if err != nil || len(acme) != 2 || acme[0].GetName() != "a" || acme[1].GetName() != "b" {
		t.Fatalf("acme's schedules: %v, %v; want a and b", acme, err)
	}
	if all, err := sc.ListSchedules(ctx, ""); err != nil || len(all) != 3 {
		t.Fatalf("every schedule: %d, %v; want 3", len(all), err)
	}
	refused := errors.New("refused")
	if _, err := sc.UpdateSchedule(ctx, "acme", "a", func(s *reinv1.Schedule) error { s.Paused = true; return refused }); !errors.Is(err, refused) {
		t.Fatalf("a refused update: %v", err)
	}
	up, err := sc.UpdateSchedule(ctx, "acme", "a", func(s *reinv1.Schedule) error { s.LastRunId = "run_1"; return nil })
	if err != nil || up.GetLastRunId() != "run_1" || up.GetPaused() {
		t.Fatalf("update: %v, %v", up, err)
	}
	h.reopen()
	sc = schedulesOf(t, h)
	acme, err = sc.ListSchedules(ctx, "acme")
	if err != nil || len(acme) != 2 || acme[0].GetLastRunId() != "run_1" || acme[0].GetPaused() {
		t.Fatalf("after a reopen: %v, %v; want the update kept and the refused one not", acme, err)
	}
	if _, err := sc.UpdateSchedule(ctx, "acme", "none", func(*reinv1.Schedule) error { return nil }); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("update of no schedule: %v, want ErrNotFound", err)
	}
	if err := sc.DeleteSchedule(ctx, "acme", "a"); err != nil {
		t.Fatal(err)
	}
	if err := sc.DeleteSchedule(ctx, "acme", "a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a second delete: %v, want ErrNotFound", err)
	}
}

// testSchedulesConcurrentUpdates: updates at once each apply once.
func testSchedulesConcurrentUpdates(t *testing.T, h *harness) {
	ctx := context.Background()
	sc := schedulesOf(t, h)
	if err := sc.CreateSchedule(ctx, &reinv1.Schedule{Name: "n", Tenant: "acme", Cron: "@hourly", Contract: &reinv1.TaskContract{Goal: "g"}}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if _, err := sc.UpdateSchedule(ctx, "acme", "n", func(s *reinv1.Schedule) error { s.LastRunId += "x"; return nil }); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	all, err := sc.ListSchedules(ctx, "acme")
	if err != nil || len(all) != 1 || len(all[0].GetLastRunId()) != 20 {
		t.Fatalf("after 20 updates at once: %v, %v; want 20 applied", all, err)
	}
}
