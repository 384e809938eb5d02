package server

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// scheduledRuns are the runs schedule name started, by their tick label.
func scheduledRuns(t *testing.T, s *tcpServer, name string) map[string]string {
	t.Helper()
	resp, err := s.client.ListRuns(context.Background(), &reinv1.ListRunsRequest{Labels: map[string]string{"schedule": name}, PageSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, r := range resp.GetRuns() {
		tick := r.GetContract().GetLabels()["schedule_tick"]
		if prev, dup := out[tick]; dup {
			t.Fatalf("tick %s started two runs: %s and %s", tick, prev, r.GetRunId())
		}
		out[tick] = r.GetRunId()
	}
	return out
}

// TestSchedules: a schedule every second starts a run each tick, labelled
// with the schedule and the tick, one per tick; paused, it starts none;
// triggered, it starts one now; deleted, it is gone. A bad expression is
// refused with nothing stored.
func TestSchedules(t *testing.T) {
	s := newTCPServer(t, Config{Resume: true})
	ctx := context.Background()
	_, err := s.client.CreateSchedule(ctx, &reinv1.CreateScheduleRequest{Schedule: &reinv1.Schedule{Name: "bad", Cron: "every minute", Contract: contract(nil, final("x"))}})
	wantCode(t, err, codes.InvalidArgument)
	created, err := s.client.CreateSchedule(ctx, &reinv1.CreateScheduleRequest{Schedule: &reinv1.Schedule{
		Name: "tick", Cron: "@every 1s", Contract: contract(nil, final("ticked")), Overlap: reinv1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW,
	}})
	if err != nil {
		t.Fatal(err)
	}
	if created.GetSchedule().GetNextTick() == nil || created.GetSchedule().GetTenant() == "" {
		t.Fatalf("created %v, want its next tick and tenant", created.GetSchedule())
	}
	_, err = s.client.CreateSchedule(ctx, &reinv1.CreateScheduleRequest{Schedule: &reinv1.Schedule{Name: "tick", Cron: "@hourly", Contract: contract(nil, final("x"))}})
	wantCode(t, err, codes.AlreadyExists)
	waitFor(t, 20*time.Second, "three ticks' runs", func() bool { return len(scheduledRuns(t, s, "tick")) >= 3 })

	if _, err := s.client.PauseSchedule(ctx, &reinv1.PauseScheduleRequest{Name: "tick"}); err != nil {
		t.Fatal(err)
	}
	paused := len(scheduledRuns(t, s, "tick"))
	// For 2.5 s (two passes and more) no more runs start; a tick the pass
	// in progress was dealing with may still land.
	hold := time.NewTimer(2500 * time.Millisecond)
	tick := time.NewTicker(100 * time.Millisecond)
	for held := false; !held; {
		select {
		case <-hold.C:
			held = true
		case <-tick.C:
			if n := len(scheduledRuns(t, s, "tick")); n > paused+1 {
				t.Fatalf("paused, the schedule started %d more runs", n-paused)
			}
		}
	}
	tick.Stop()
	trig, err := s.client.TriggerSchedule(ctx, &reinv1.TriggerScheduleRequest{Name: "tick", RequestId: "now-1"})
	if err != nil {
		t.Fatal(err)
	}
	again, err := s.client.TriggerSchedule(ctx, &reinv1.TriggerScheduleRequest{Name: "tick", RequestId: "now-1"})
	if err != nil || again.GetRun().GetRunId() != trig.GetRun().GetRunId() {
		t.Fatalf("the same trigger again: %v, run %s; want the same run %s", err, again.GetRun().GetRunId(), trig.GetRun().GetRunId())
	}
	list, err := s.client.ListSchedules(ctx, &reinv1.ListSchedulesRequest{})
	if err != nil || len(list.GetSchedules()) != 1 || !list.GetSchedules()[0].GetPaused() || list.GetSchedules()[0].GetLastRunId() == "" {
		t.Fatalf("ListSchedules: %v %v; want the one paused schedule with its last run", list.GetSchedules(), err)
	}
	if _, err := s.client.DeleteSchedule(ctx, &reinv1.DeleteScheduleRequest{Name: "tick"}); err != nil {
		t.Fatal(err)
	}
	_, err = s.client.DeleteSchedule(ctx, &reinv1.DeleteScheduleRequest{Name: "tick"})
	wantCode(t, err, codes.NotFound)
}

// TestSchedulesNeedAServer: a node that does not carry runs on (a
// command's embedded server) keeps schedules but starts none of their
// runs; the twin is TestSchedules, on a node that does.
func TestSchedulesNeedAServer(t *testing.T) {
	s := newTCPServer(t, Config{})
	ctx := context.Background()
	if _, err := s.client.CreateSchedule(ctx, &reinv1.CreateScheduleRequest{Schedule: &reinv1.Schedule{
		Name: "tick", Cron: "@every 1s", Contract: contract(nil, final("ticked")), Overlap: reinv1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW,
	}}); err != nil {
		t.Fatal(err)
	}
	hold := time.NewTimer(2500 * time.Millisecond)
	defer hold.Stop()
	<-hold.C
	if n := len(scheduledRuns(t, s, "tick")); n != 0 {
		t.Errorf("a node without Resume started %d scheduled runs", n)
	}
}
