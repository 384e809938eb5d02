package harness

import (
	"context"

	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
)

// create is how a run comes to be, started or forked: it validates the
// contract against this engine (its tools' workspace, its models, its
// prices), records run_started (started, with the contract, its defaults
// and its deadline filled in), then the events carried over from a parent,
// and schedules the run, or arms a paused one's deadlines. A request ID the
// tenant used before returns that run with created=false, and stores
// nothing.
func (e *Engine) create(ctx context.Context, c *reinv1.TaskContract, started *reinv1.RunStarted, carried []*reinv1.Event) (runstate.State, bool, error) {
	if err := ValidateContract(c); err != nil {
		return runstate.State{}, false, err
	}
	if err := e.checkWorkspace(c.GetChecks()); err != nil {
		return runstate.State{}, false, err
	}
	if _, err := e.cfg.Models(c.GetModel()); err != nil {
		return runstate.State{}, false, &FieldError{"contract.model.provider", err.Error()}
	}
	if err := e.checkPrice(c); err != nil {
		return runstate.State{}, false, err
	}
	now := e.cfg.Clock()
	started.Contract = withDefaults(c)
	if t := started.Contract.GetBudget().GetTimeout(); t != nil {
		started.Deadline = timestamppb.New(now.Add(t.AsDuration()))
	}
	first := &reinv1.Event{
		RunId:      e.newID("run_", now),
		Sequence:   1,
		RecordedAt: timestamppb.New(now),
		Actor:      "principal:" + started.GetPrincipal(),
		Payload:    &reinv1.Event_RunStarted{RunStarted: started},
	}
	st, created, err := e.cfg.Store.Create(ctx, first)
	if err != nil {
		return runstate.State{}, false, err
	}
	if created {
		e.cfg.Published(st, []*reinv1.Event{first})
		if len(carried) > 0 {
			for _, ev := range carried {
				ev.RunId = st.RunID
			}
			if st, err = e.commit(ctx, st, "", carried); err != nil {
				return st, true, err
			}
		}
	}
	if st.Status == reinv1.RunStatus_RUN_STATUS_RUNNING {
		e.schedule(st.RunID)
	} else {
		e.Arm(st)
	}
	return st, created, nil
}
