// Package replay is test replay (docs/design.md §8): a recorded run's model replies,
// tool results and people's decisions are fed, in order and on the recorded
// clock, through the current harness into an in-memory log, and the new
// events are compared with the recorded ones. No model and no tool is
// called. The first event where the two logs part is reported.
//
// Supported recordings: runs driven by the harness from start to their end
// or last pause, with people's inputs, approvals, rejections, cancels of
// paused runs and timer expiries in between. Not supported: a recording cut
// by a crash (a resumed model call, a run taken after a restart or from
// another server), a write whose outcome was unknown, and
// a cancel of a running run (its timing is the canceller's, not the log's).
package replay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/engine"
	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/policy"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/step"
)

// Divergence is where the replayed log parts from the recorded one.
type Divergence struct {
	Sequence uint64
	// Expected is the recorded event; nil when the replay made more events.
	Expected *reinv1.Event
	// Got is the replayed event; nil when the replay stopped short.
	Got *reinv1.Event
	// Field is the path to the first field where the two events differ, in
	// the order their messages declare fields ("model_requested.input_hash",
	// "tool_requested.tier"); "" when one of them is missing.
	Field string
}

func (d *Divergence) Error() string {
	field := ""
	if d.Field != "" {
		field = " (first differing field: " + d.Field + ")"
	}
	return fmt.Sprintf("the runs part at sequence %d%s: expected %s, got %s", d.Sequence, field, describe(d.Expected), describe(d.Got))
}

func describe(ev *reinv1.Event) string {
	if ev == nil {
		return "no event"
	}
	return runstate.PayloadName(ev) + " " + strings.TrimSpace(fmt.Sprint(ev))
}

// Result is one run's replay.
type Result struct {
	RunID string
	// Events is how many events the recording has.
	Events int
	// Divergence is nil when every event matched.
	Divergence *Divergence
}

// Options change how a recording is replayed.
type Options struct {
	// Blobs are the recording's blobs by hash (an export's). A recording
	// whose proposals are stored apart (preview_blob, arguments_blob) needs
	// them: the replay proposes and commits the whole preview.
	Blobs map[string][]byte
	// Children are the recorded logs of the runs the recording delegated
	// to, by run ID (an export's children, rein export --tree): a replay
	// of a delegating run reads its children's results from them, as the
	// run read them from the store, and never drives them. Replay each
	// child on its own to check it.
	Children map[string][]*reinv1.Event
	// Policy, when set, are the server's policy rules to replay under
	// (rein replay --policy FILE), in place of the decisions the server's
	// rules made when the run was recorded: the first event where they
	// decide otherwise is the divergence.
	Policy *policy.Holder
}

// TreeChildren are the recorded logs of x's children, by run ID, for
// Options.Children.
func TreeChildren(x *reinv1.RunExport) map[string][]*reinv1.Event {
	if len(x.GetChildren()) == 0 {
		return nil
	}
	out := map[string][]*reinv1.Event{}
	for _, c := range x.GetChildren() {
		out[c.GetRunId()] = c.GetEvents()
	}
	return out
}

// ErrUnsupported is returned for a recording replay cannot drive.
var ErrUnsupported = errors.New("recording not supported by replay")

// Run replays one recorded run. An error means the replay could not be
// made (a malformed or unsupported recording, a log that refused what the
// harness appended, ctx done); a divergence is in Result.
//
// The run is stepped by a synchronous engine (engine.NewSync) on the
// caller's goroutine: the harness's own step code, with no driver goroutine
// to start or wait for. Its log folds every event it is given, as a store
// does, and compares it with the recorded one as it is appended.
func Run(ctx context.Context, recorded []*reinv1.Event, o Options) (Result, error) {
	if len(recorded) == 0 || recorded[0].GetRunStarted() == nil {
		return Result{}, fmt.Errorf("%w: a recording starts with run_started", ErrUnsupported)
	}
	recorded = upgrade(recorded)
	l := newRunLog(recorded, o.Blobs)
	if err := l.addChildren(o.Children); err != nil {
		return Result{}, err
	}
	rec, err := newRecording(ctx, recorded, l)
	if err != nil {
		return Result{}, err
	}
	if err := rec.check(); err != nil {
		return Result{}, err
	}
	eng := engine.NewSync(engine.Config{
		Store:  l,
		Models: func(*reinv1.ModelSpec) (model.Model, error) { return rec, nil },
		Tools:  rec,
		Clock:  rec.clock,
		Published: func(_ runstate.State, evs []*reinv1.Event) {
			rec.version = evs[len(evs)-1].GetSequence()
		},
		NewID:    rec.newID,
		Policy:   newRecordedPolicy(recorded).checker(o.Policy),
		Rates:    rec,
		NoTimers: true,
		Owner:    "replay",
		// What the server did when a tool changed under the run.
		OnToolChange: recordedAction(recorded),
		Prices:       rec.prices(),
		// A recorded retry waited; its replay does not.
		Wait: func(context.Context, time.Duration) error { return nil },
	})
	defer eng.Close()

	started := recorded[0].GetRunStarted()
	principal := strings.TrimPrefix(recorded[0].GetActor(), "principal:")
	sr := engine.StartRequest{
		RequestID: started.GetRequestId(), Contract: started.GetContract(),
		Principal: principal, Tenant: started.GetTenant(),
		TraceID: started.GetTraceId(), TraceParent: started.GetTraceParentSpanId(),
		DelegatedBy: started.GetDelegatedBy(),
	}
	if started.GetDelegatedBy() != nil && started.GetDeadline() != nil {
		// A child's deadline is its parent's, when that comes first.
		sr.Deadline = started.GetDeadline().AsTime()
	}
	if _, _, err := eng.Start(ctx, sr); err != nil {
		return Result{}, fmt.Errorf("replay run %s: start: %w", rec.runID, err)
	}
	woke := uint64(0) // the version a child's end woke the run at
	for {
		if err := eng.StepWhileRunning(ctx, rec.runID); err != nil {
			return Result{}, fmt.Errorf("replay run %s: %w", rec.runID, err)
		}
		if err := ctx.Err(); err != nil {
			return Result{}, err // the steps stopped where ctx ended
		}
		cur := l.st
		if cur.Version >= uint64(len(recorded)) || runstate.Terminal(cur.Status) {
			break
		}
		next := recorded[cur.Version]
		if next.GetDelegationReturned() != nil && cur.Waiting() {
			// A child the run waits for ended since its last step (the
			// replay shows it ended now, runLog.child): the run is woken,
			// as a live engine wakes a parent. Once per version: a step
			// that does not take the report has parted from the recording.
			if woke == cur.Version {
				break
			}
			woke = cur.Version
			continue
		}
		acted, err := act(ctx, eng, cur, next, rec)
		if err != nil {
			return Result{}, fmt.Errorf("replay run %s at sequence %d: %w", rec.runID, next.GetSequence(), err)
		}
		if !acted {
			break // the replay stopped where the recording went on
		}
	}
	return Result{RunID: rec.runID, Events: len(recorded), Divergence: l.divergence()}, nil
}

// recordedAction is the --on-tool-change the recording was made under, as
// its events tell: fail or adopt when a tool_changed or a tool_adopted
// says so, else pause.
func recordedAction(events []*reinv1.Event) step.ToolChangeAction {
	for _, ev := range events {
		if ev.GetToolChanged().GetAction() == "fail" {
			return step.ToolChangeFail
		}
		if ev.GetToolAdopted().GetBy() == "adopt" {
			return step.ToolChangeAdopt
		}
	}
	return step.ToolChangePause
}

// act replays what a person (or a timer) did next in the recording; false
// when the next recorded event is not such an action.
func act(ctx context.Context, eng *engine.Engine, cur runstate.State, next *reinv1.Event, rec *recording) (bool, error) {
	who := strings.TrimPrefix(next.GetActor(), "principal:")
	var err error
	switch p := next.GetPayload().(type) {
	case *reinv1.Event_InputProvided:
		_, err = eng.ProvideInput(ctx, cur.RunID, p.InputProvided.GetText(), who)
	case *reinv1.Event_ApprovalDecided:
		d := p.ApprovalDecided
		_, err = eng.DecideApproval(ctx, engine.Verdict{
			RunID: cur.RunID, ProposalID: d.GetProposalId(), ProposalHash: cur.Pending.GetProposal().GetHash(),
			Approve: d.GetApproved(), Reason: d.GetReason(), EndRun: d.GetEndRun(), Principal: who,
		})
	case *reinv1.Event_ApprovalGiven:
		_, err = eng.DecideApproval(ctx, engine.Verdict{
			RunID: cur.RunID, ProposalID: p.ApprovalGiven.GetProposalId(), ProposalHash: cur.Pending.GetProposal().GetHash(),
			Approve: true, Principal: who,
		})
	case *reinv1.Event_BudgetReached:
		eng.Expire(ctx, cur.RunID)
	case *reinv1.Event_ProposalRevised:
		pr := p.ProposalRevised
		_, err = eng.DecideApproval(ctx, engine.Verdict{
			RunID: cur.RunID, ProposalID: pr.GetSupersededProposalId(), ProposalHash: cur.Pending.GetProposal().GetHash(),
			Principal: who, Arguments: rec.revisions[pr.GetProposal().GetProposalId()].GetArguments(),
		})
	case *reinv1.Event_BudgetRaised:
		br := p.BudgetRaised
		req := &reinv1.RaiseBudgetRequest{
			RunId: cur.RunID, AddSteps: br.GetAddSteps(), AddTokens: br.GetAddTokens(), AddCostUsd: br.GetAddCostUsd(),
			AddToolCalls: br.GetAddToolCalls(), ExtendDeadline: br.GetExtendDeadline(), Reason: br.GetReason(),
		}
		if cur.DelegatedBy != nil {
			// A child's raise is lent by its parent, raised at the root.
			_, err = eng.GiveLentRaise(ctx, cur.RunID, req, next.GetActor())
		} else {
			_, err = eng.RaiseBudget(ctx, req, who)
		}
	case *reinv1.Event_RunSteered:
		_, _, err = eng.Steer(ctx, cur.RunID, p.RunSteered.GetText(), p.RunSteered.GetRequestId(), who)
	case *reinv1.Event_ToolChanged, *reinv1.Event_ToolAdopted:
		// A person's approval found the pending proposal's tool changed
		// (the proposal is previewed again, or the run fails), or approved
		// a proposal previewed again (the run moves to the new definition,
		// then the approval is recorded: its reason follows).
		if cur.Status != reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL || !strings.HasPrefix(next.GetActor(), "principal:") {
			return false, nil
		}
		v := engine.Verdict{RunID: cur.RunID, ProposalID: cur.Pending.GetProposal().GetProposalId(), ProposalHash: cur.Pending.GetProposal().GetHash(),
			Approve: true, Principal: who}
		if i := int(next.GetSequence()); i < len(rec.events) {
			v.Reason = rec.events[i].GetApprovalDecided().GetReason()
		}
		_, err = eng.DecideApproval(ctx, v)
		if errors.Is(err, engine.ErrNotWaiting) {
			err = nil // the approval was refused as recorded: the proposal was not committed
		}
	case *reinv1.Event_StatusChanged:
		switch p.StatusChanged.GetTo() {
		case reinv1.RunStatus_RUN_STATUS_CANCELLED:
			_, err = eng.Cancel(ctx, cur.RunID, p.StatusChanged.GetReason(), next.GetActor())
		case reinv1.RunStatus_RUN_STATUS_EXPIRED:
			eng.Expire(ctx, cur.RunID)
		default:
			return false, nil
		}
	default:
		return false, nil
	}
	// A refused action stops the replay; the comparison says where the
	// logs part.
	return err == nil, nil
}
