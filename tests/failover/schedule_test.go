package failover_test

import (
	"context"
	"testing"
	"time"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// TestScheduleAcrossReplicaKills: a schedule every second on three
// replicas sharing etcd, for 20 s, with two replicas killed and started
// again: no tick starts two runs, and the ticks keep coming through the
// kills (a replica that survives runs them).
func TestScheduleAcrossReplicaKills(t *testing.T) {
	if testing.Short() {
		t.Skip("three etcd members and three rein servers for 20 s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	reps, _, cl := threeReplicas(t)
	c := readContract(0, 0)
	if err := retry(ctx, func(ctx context.Context) error {
		_, err := cl.Runs.CreateSchedule(ctx, &reinv1.CreateScheduleRequest{Schedule: &reinv1.Schedule{
			Name: "every-second", Cron: "@every 1s", Contract: c, Overlap: reinv1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW,
		}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	for _, victim := range reps[:2] {
		select {
		case <-time.After(6 * time.Second):
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
		victim.kill(t)
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
		}
		victim.start(t)
	}
	select {
	case <-time.After(20*time.Second - time.Since(begin)):
	case <-ctx.Done():
	}
	if err := retry(ctx, func(ctx context.Context) error {
		_, err := cl.Runs.PauseSchedule(ctx, &reinv1.PauseScheduleRequest{Name: "every-second"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var runs []*reinv1.Run
	if err := retry(ctx, func(ctx context.Context) error {
		resp, err := cl.Runs.ListRuns(ctx, &reinv1.ListRunsRequest{Labels: map[string]string{"schedule": "every-second"}, PageSize: 1000})
		runs = resp.GetRuns()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	ticks := map[string]string{}
	for _, r := range runs {
		tick := r.GetContract().GetLabels()["schedule_tick"]
		if other, dup := ticks[tick]; dup {
			t.Errorf("tick %s started two runs: %s and %s", tick, other, r.GetRunId())
		}
		ticks[tick] = r.GetRunId()
	}
	// 20 ticks in 20 s; a tick a pass found behind a later one is missed
	// (catch-up none), as are a few around each kill at most.
	if len(ticks) < 12 || len(ticks) > 21 {
		t.Errorf("%d ticks started runs in 20 s, want about 20 (at least 12)", len(ticks))
	}
}
