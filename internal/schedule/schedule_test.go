package schedule

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store/mem"
)

var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// starts is a Start that, like the engine, starts one run per request ID.
type starts struct {
	mu      sync.Mutex
	byReq   map[string]string
	created int
}

func (s *starts) start(_ context.Context, _ *reinv1.Schedule, requestID string, _ time.Time) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id, ok := s.byReq[requestID]; ok {
		return id, nil
	}
	s.created++
	id := fmt.Sprintf("run_%d", s.created)
	s.byReq[requestID] = id
	return id, nil
}

func setup(t *testing.T, sc *reinv1.Schedule) (*mem.Store, *clock, *starts, map[string]int) {
	t.Helper()
	st := mem.New()
	sc.Tenant, sc.CreatedAt = "acme", timestamppb.New(t0)
	sc.Contract = &reinv1.TaskContract{Goal: "tick"}
	if err := st.CreateSchedule(context.Background(), sc); err != nil {
		t.Fatal(err)
	}
	return st, &clock{now: t0}, &starts{byReq: map[string]string{}}, map[string]int{}
}

func scheduler(st *mem.Store, c *clock, s *starts, ticked map[string]int, mu *sync.Mutex) *Scheduler {
	return New(Config{Store: st, Runs: st, Start: s.start, Clock: c.Now, Ticked: func(o string, n int) {
		mu.Lock()
		ticked[o] += n
		mu.Unlock()
	}})
}

// TestOncePerTickAcrossSchedulers: two schedulers on one store (two
// replicas) passing at once, every second for 20 ticks, start one run per
// tick, no tick twice.
func TestOncePerTickAcrossSchedulers(t *testing.T) {
	st, c, s, ticked := setup(t, &reinv1.Schedule{Name: "every-second", Cron: "@every 1s", Overlap: reinv1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW})
	var mu sync.Mutex
	a, b := scheduler(st, c, s, ticked, &mu), scheduler(st, c, s, ticked, &mu)
	ctx := context.Background()
	for range 20 {
		c.add(time.Second)
		var wg sync.WaitGroup
		for _, sch := range []*Scheduler{a, b} {
			wg.Go(func() {
				if err := sch.Pass(ctx); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	}
	if s.created != 20 || ticked["started"] != 20 || ticked["missed"] != 0 {
		t.Fatalf("%d runs created, ticks %v; want 20 runs, 20 started, none missed", s.created, ticked)
	}
}

// TestCatchUp: with no pass for 68 s, a schedule every 10 s has 6 ticks
// due, the latest 8 s late: one that catches up starts that one and misses
// the 5 before; one that does not misses all 6.
func TestCatchUp(t *testing.T) {
	for _, tc := range []struct {
		catchUp reinv1.ScheduleCatchUp
		runs    int
		missed  int
	}{{reinv1.ScheduleCatchUp_SCHEDULE_CATCH_UP_ONE, 1, 5}, {reinv1.ScheduleCatchUp_SCHEDULE_CATCH_UP_NONE, 0, 6}} {
		st, c, s, ticked := setup(t, &reinv1.Schedule{Name: "s", Cron: "@every 10s", CatchUp: tc.catchUp})
		var mu sync.Mutex
		c.add(68 * time.Second)
		if err := scheduler(st, c, s, ticked, &mu).Pass(context.Background()); err != nil {
			t.Fatal(err)
		}
		if s.created != tc.runs || ticked["missed"] != tc.missed {
			t.Errorf("%v: %d runs, %v; want %d runs and %d missed", tc.catchUp, s.created, ticked, tc.runs, tc.missed)
		}
	}
}

// TestOverlapSkip: while the last run has not ended a tick is skipped;
// the twin, overlap allowed, starts it.
func TestOverlapSkip(t *testing.T) {
	for _, overlap := range []reinv1.ScheduleOverlap{reinv1.ScheduleOverlap_SCHEDULE_OVERLAP_SKIP, reinv1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW} {
		st, c, s, ticked := setup(t, &reinv1.Schedule{Name: "s", Cron: "@every 1s", Overlap: overlap})
		ctx := context.Background()
		running, _, err := st.Create(ctx, &reinv1.Event{RunId: "run_going", Sequence: 1, RecordedAt: timestamppb.New(t0), Actor: "principal:a",
			Payload: &reinv1.Event_RunStarted{RunStarted: &reinv1.RunStarted{Contract: &reinv1.TaskContract{Goal: "g"}, Tenant: "acme", RequestId: "r"}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.UpdateSchedule(ctx, "acme", "s", func(sc *reinv1.Schedule) error { sc.LastRunId = running.RunID; return nil }); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		c.add(time.Second)
		if err := scheduler(st, c, s, ticked, &mu).Pass(ctx); err != nil {
			t.Fatal(err)
		}
		want := map[bool]int{true: 0, false: 1}[overlap == reinv1.ScheduleOverlap_SCHEDULE_OVERLAP_SKIP]
		if s.created != want {
			t.Errorf("%v with the last run going: %d runs started, want %d (%v)", overlap, s.created, want, ticked)
		}
	}
}

// TestParse: what a schedule's expression and zone may be.
func TestParse(t *testing.T) {
	if _, err := Parse("*/5 * * * *", "Europe/Berlin"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][2]string{{"* * *", ""}, {"@every 1s", "Mars/Olympus"}, {"61 * * * *", ""}} {
		if _, err := Parse(bad[0], bad[1]); err == nil {
			t.Errorf("%q in %q: parsed", bad[0], bad[1])
		}
	}
}

// TestRefusedRunAdvances: a tick whose run the server refuses (its
// contract no longer fits) is dealt with once, not tried every pass; a
// run that fails for the moment (the twin) leaves the tick for the next.
func TestRefusedRunAdvances(t *testing.T) {
	for _, refused := range []bool{true, false} {
		st, c, _, ticked := setup(t, &reinv1.Schedule{Name: "s", Cron: "@every 1s"})
		var mu sync.Mutex
		calls := 0
		sch := New(Config{Store: st, Runs: st, Clock: c.Now, Refused: func(error) bool { return refused },
			Start: func(context.Context, *reinv1.Schedule, string, time.Time) (string, error) {
				calls++
				return "", fmt.Errorf("refused")
			},
			Ticked: func(o string, n int) { mu.Lock(); ticked[o] += n; mu.Unlock() }})
		c.add(time.Second)
		_ = sch.Pass(context.Background())
		_ = sch.Pass(context.Background())
		want := map[bool]int{true: 1, false: 2}[refused]
		if calls != want || refused && ticked["refused"] != 1 {
			t.Errorf("refused=%v: %d starts in two passes, ticks %v; want %d", refused, calls, ticked, want)
		}
	}
}
