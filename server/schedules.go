package server

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/engine"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/schedule"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/taskcontract"
)

// schedules is the node's schedules: the store's, when it keeps them.
func (s *runService) schedulesStore() (store.Schedules, error) {
	if s.schedules == nil {
		return nil, status.Error(codes.Unimplemented, "this server's store keeps no schedules; serve on the bbolt file or on etcd")
	}
	return s.schedules, nil
}

// scheduleRefused reports whether a schedule's run was refused for what
// the schedule is (its contract), not for the moment (a store that is
// down): the tick is then dealt with.
func scheduleRefused(err error) bool {
	var fe *taskcontract.FieldError
	return errors.As(err, &fe)
}

// withNext is sc as the API gives it, with its next tick.
func withNext(sc *reinv1.Schedule) *reinv1.Schedule {
	if t := schedule.NextTick(sc); !t.IsZero() {
		sc.NextTick = timestamppb.New(t)
	}
	return sc
}

func (s *runService) CreateSchedule(ctx context.Context, req *reinv1.CreateScheduleRequest) (*reinv1.CreateScheduleResponse, error) {
	st, err := s.schedulesStore()
	if err != nil {
		return nil, err
	}
	id := s.identity(ctx)
	sc := proto.CloneOf(req.GetSchedule())
	if _, err := schedule.Parse(sc.GetCron(), sc.GetTimeZone()); err != nil {
		return nil, invalidArgument("schedule.cron", err.Error())
	}
	if err := taskcontract.Validate(sc.GetContract()); err != nil {
		return nil, toStatus(s.log, "CreateSchedule", err)
	}
	sc.Tenant, sc.CreatedBy, sc.CreatedAt = id.Tenant, id.ID, timestamppb.New(time.Now())
	sc.LastTick, sc.LastRunId, sc.NextTick, sc.Paused = nil, "", nil, false
	if sc.Overlap == reinv1.ScheduleOverlap_SCHEDULE_OVERLAP_UNSPECIFIED {
		sc.Overlap = reinv1.ScheduleOverlap_SCHEDULE_OVERLAP_SKIP
	}
	if sc.CatchUp == reinv1.ScheduleCatchUp_SCHEDULE_CATCH_UP_UNSPECIFIED {
		sc.CatchUp = reinv1.ScheduleCatchUp_SCHEDULE_CATCH_UP_NONE
	}
	if err := st.CreateSchedule(ctx, sc); err != nil {
		return nil, toStatus(s.log, "CreateSchedule", err)
	}
	return &reinv1.CreateScheduleResponse{Schedule: withNext(sc)}, nil
}

func (s *runService) ListSchedules(ctx context.Context, _ *reinv1.ListSchedulesRequest) (*reinv1.ListSchedulesResponse, error) {
	st, err := s.schedulesStore()
	if err != nil {
		return nil, err
	}
	all, err := st.ListSchedules(ctx, s.identity(ctx).Tenant)
	if err != nil {
		return nil, toStatus(s.log, "ListSchedules", err)
	}
	for _, sc := range all {
		withNext(sc)
	}
	return &reinv1.ListSchedulesResponse{Schedules: all}, nil
}

// setPaused pauses or resumes a schedule; a resumed one goes on from now.
func (s *runService) setPaused(ctx context.Context, name string, paused bool) (*reinv1.Schedule, error) {
	st, err := s.schedulesStore()
	if err != nil {
		return nil, err
	}
	sc, err := st.UpdateSchedule(ctx, s.identity(ctx).Tenant, name, func(sc *reinv1.Schedule) error {
		if !paused && sc.GetPaused() {
			sc.LastTick = timestamppb.New(time.Now()) // the ticks missed while paused are not run
		}
		sc.Paused = paused
		return nil
	})
	if err != nil {
		return nil, toStatus(s.log, "PauseSchedule", err)
	}
	return withNext(sc), nil
}

func (s *runService) PauseSchedule(ctx context.Context, req *reinv1.PauseScheduleRequest) (*reinv1.PauseScheduleResponse, error) {
	sc, err := s.setPaused(ctx, req.GetName(), true)
	if err != nil {
		return nil, err
	}
	return &reinv1.PauseScheduleResponse{Schedule: sc}, nil
}

func (s *runService) ResumeSchedule(ctx context.Context, req *reinv1.ResumeScheduleRequest) (*reinv1.ResumeScheduleResponse, error) {
	sc, err := s.setPaused(ctx, req.GetName(), false)
	if err != nil {
		return nil, err
	}
	return &reinv1.ResumeScheduleResponse{Schedule: sc}, nil
}

func (s *runService) DeleteSchedule(ctx context.Context, req *reinv1.DeleteScheduleRequest) (*reinv1.DeleteScheduleResponse, error) {
	st, err := s.schedulesStore()
	if err != nil {
		return nil, err
	}
	if err := st.DeleteSchedule(ctx, s.identity(ctx).Tenant, req.GetName()); err != nil {
		return nil, toStatus(s.log, "DeleteSchedule", err)
	}
	return &reinv1.DeleteScheduleResponse{}, nil
}

func (s *runService) TriggerSchedule(ctx context.Context, req *reinv1.TriggerScheduleRequest) (*reinv1.TriggerScheduleResponse, error) {
	st, err := s.schedulesStore()
	if err != nil {
		return nil, err
	}
	tenant := s.identity(ctx).Tenant
	all, err := st.ListSchedules(ctx, tenant)
	if err != nil {
		return nil, toStatus(s.log, "TriggerSchedule", err)
	}
	for _, sc := range all {
		if sc.GetName() != req.GetName() {
			continue
		}
		run, _, err := s.startScheduled(ctx, sc, "schedule/"+sc.GetName()+"/trigger/"+req.GetRequestId(), time.Now())
		if err != nil {
			return nil, toStatus(s.log, "TriggerSchedule", err)
		}
		return &reinv1.TriggerScheduleResponse{Run: s.withPosition(ctx, run)}, nil
	}
	return nil, status.Errorf(codes.NotFound, "schedule %q not found; rein schedule list lists your tenant's", req.GetName())
}

// startScheduled starts sc's run of tick: its contract, labelled with the
// schedule and the tick, as its creator in its tenant (queued where a
// limit applies).
func (s *runService) startScheduled(ctx context.Context, sc *reinv1.Schedule, requestID string, tick time.Time) (runstate.State, bool, error) {
	c := proto.CloneOf(sc.GetContract())
	if c.Labels == nil {
		c.Labels = map[string]string{}
	}
	c.Labels["schedule"] = sc.GetName()
	c.Labels["schedule_tick"] = tick.UTC().Format(time.RFC3339)
	return s.engine.Start(ctx, engine.StartRequest{
		RequestID: requestID, Contract: c, Principal: sc.GetCreatedBy(), Tenant: sc.GetTenant(),
		Queued: s.admission.Queues(sc.GetTenant()),
	})
}
