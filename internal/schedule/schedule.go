// Package schedule starts runs on schedules (docs/design.md §17): at each
// tick of a schedule's cron expression the Scheduler starts a run of its
// contract, exactly once per tick across replicas and restarts. The run's
// request ID is derived from the schedule and the tick, so a tick started
// again (by another replica, or after a crash before the schedule was
// advanced) finds its run instead of starting a second; the schedule's
// last tick is then advanced by compare-and-swap.
package schedule

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/robfig/cron/v3"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
)

// Parse compiles a schedule's cron expression in its time zone: five
// fields (minute hour day month weekday) or a descriptor (@hourly,
// @every 30s).
func Parse(expr, tz string) (cron.Schedule, error) {
	loc := time.UTC
	if tz != "" {
		var err error
		if loc, err = time.LoadLocation(tz); err != nil {
			return nil, fmt.Errorf("time zone %q: %v; give an IANA name such as Europe/Berlin", tz, err)
		}
	}
	s, err := cron.ParseStandard(expr)
	if err != nil {
		return nil, fmt.Errorf("cron %q: %v; give five fields (minute hour day month weekday), such as \"*/5 * * * *\", or a descriptor such as @hourly or @every 30s", expr, err)
	}
	return inZone{s, loc}, nil
}

// inZone reads a schedule in a time zone.
type inZone struct {
	s   cron.Schedule
	loc *time.Location
}

func (z inZone) Next(t time.Time) time.Time { return z.s.Next(t.In(z.loc)) }

// NextTick is sc's next tick after its last (or its creation), or zero
// when its expression does not parse.
func NextTick(sc *reinv1.Schedule) time.Time {
	s, err := Parse(sc.GetCron(), sc.GetTimeZone())
	if err != nil {
		return time.Time{}
	}
	return s.Next(from(sc))
}

func from(sc *reinv1.Schedule) time.Time {
	if t := sc.GetLastTick(); t != nil {
		return t.AsTime()
	}
	return sc.GetCreatedAt().AsTime()
}

// RequestID is the request ID of sc's run at tick: the same for every
// server that starts it.
func RequestID(sc *reinv1.Schedule, tick time.Time) string {
	return "schedule/" + sc.GetName() + "/" + tick.UTC().Format(time.RFC3339Nano)
}

// Config is what a Scheduler needs.
type Config struct {
	Store store.Schedules
	// Runs reads a schedule's last run, for its overlap policy.
	Runs store.Store
	// Start starts sc's run of tick with requestID; the same request ID
	// gives the same run.
	Start func(ctx context.Context, sc *reinv1.Schedule, requestID string, tick time.Time) (runID string, err error)
	// Ticked is told what each tick came to: "started", "skipped" (its
	// schedule's last run was still going), "missed" (no server ran it
	// on time, and the schedule does not catch up) or "refused" (its run
	// could not start); nil tells no one.
	Ticked func(outcome string, n int)
	// Refused reports whether Start's error means the run cannot start as
	// the schedule is (its contract refused), so that the tick is dealt
	// with; any other error leaves it for the next pass. Nil: none is.
	Refused func(error) bool
	// Every is how often a pass runs; 0 means a second. A tick later than
	// Late (0: 5 s) is missed unless its schedule catches up.
	Every, Late time.Duration
	Clock       func() time.Time
	Logger      *slog.Logger
}

// Scheduler starts the runs of the schedules in its store.
type Scheduler struct{ cfg Config }

// New returns a Scheduler; Run makes its passes.
func New(cfg Config) *Scheduler {
	if cfg.Every <= 0 {
		cfg.Every = time.Second
	}
	if cfg.Late <= 0 {
		cfg.Late = 5 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Ticked == nil {
		cfg.Ticked = func(string, int) {}
	}
	return &Scheduler{cfg: cfg}
}

// Run makes a pass every Config.Every until ctx ends.
func (s *Scheduler) Run(ctx context.Context) {
	t := time.NewTicker(s.cfg.Every)
	defer t.Stop()
	for {
		if err := s.Pass(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Error("schedule pass failed; the next pass tries again", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// maxTicks bounds the ticks one pass counts of one schedule (a schedule
// every second that no server ran for a day has 86,400): past it, the
// rest are missed with the others.
const maxTicks = 10_000

// Pass deals with every schedule's ticks that are due: the latest starts
// its run (if on time, or if its schedule catches up, and unless its last
// run is still going and it skips overlaps); the others are missed.
func (s *Scheduler) Pass(ctx context.Context) error {
	all, err := s.cfg.Store.ListSchedules(ctx, "")
	if err != nil {
		return err
	}
	var errs []error
	for _, sc := range all {
		if sc.GetPaused() {
			continue
		}
		if err := s.tick(ctx, sc); err != nil {
			errs = append(errs, fmt.Errorf("schedule %s of tenant %s: %w", sc.GetName(), sc.GetTenant(), err))
		}
	}
	return errors.Join(errs...)
}

// errDone: another server dealt with the tick first.
var errDone = errors.New("the tick was dealt with")

func (s *Scheduler) tick(ctx context.Context, sc *reinv1.Schedule) error {
	cs, err := Parse(sc.GetCron(), sc.GetTimeZone())
	if err != nil {
		return err
	}
	now := s.cfg.Clock()
	var due []time.Time
	for t := cs.Next(from(sc)); !t.IsZero() && !t.After(now); t = cs.Next(t) {
		if len(due) == maxTicks {
			due = due[1:]
		}
		due = append(due, t)
	}
	if len(due) == 0 {
		return nil
	}
	latest := due[len(due)-1]
	missed := len(due) - 1
	start := now.Sub(latest) <= s.cfg.Late || sc.GetCatchUp() == reinv1.ScheduleCatchUp_SCHEDULE_CATCH_UP_ONE
	outcome := "started"
	runID := ""
	switch {
	case !start:
		missed++
		outcome = ""
	case sc.GetOverlap() != reinv1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW && s.going(ctx, sc):
		outcome = "skipped"
	default:
		runID, err = s.cfg.Start(ctx, sc, RequestID(sc, latest), latest)
		switch {
		case err != nil && s.cfg.Refused != nil && s.cfg.Refused(err):
			// The run cannot start as the schedule is (its contract no
			// longer fits this server): the tick is dealt with, and says
			// so once, not every second.
			s.cfg.Logger.Error("a schedule's run was refused; the tick starts nothing", "schedule", sc.GetName(), "tenant", sc.GetTenant(), "tick", latest, "error", err)
			outcome = "refused"
		case err != nil:
			return err
		}
	}
	_, err = s.cfg.Store.UpdateSchedule(ctx, sc.GetTenant(), sc.GetName(), func(cur *reinv1.Schedule) error {
		if t := cur.GetLastTick(); t != nil && !t.AsTime().Before(latest) {
			return errDone
		}
		cur.LastTick = timestamppb.New(latest)
		if runID != "" {
			cur.LastRunId = runID
		}
		return nil
	})
	switch {
	case errors.Is(err, errDone), errors.Is(err, store.ErrNotFound):
		return nil // another server advanced it, or it was deleted meanwhile
	case err != nil:
		return err
	}
	if missed > 0 {
		s.cfg.Ticked("missed", missed)
		s.cfg.Logger.Warn("schedule ticks missed", "schedule", sc.GetName(), "tenant", sc.GetTenant(), "missed", missed, "catch_up", sc.GetCatchUp().String())
	}
	if outcome != "" {
		s.cfg.Ticked(outcome, 1)
	}
	return nil
}

// going reports whether sc's last run has not ended.
func (s *Scheduler) going(ctx context.Context, sc *reinv1.Schedule) bool {
	id := sc.GetLastRunId()
	if id == "" {
		return false
	}
	st, err := s.cfg.Runs.Load(ctx, id)
	return err == nil && !runstate.Terminal(st.Status)
}
