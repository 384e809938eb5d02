package engine

// Sending an approved write to its tool and recording its outcome: the
// receipt, a refusal, or an outcome only a lookup (or a person) can
// settle. rein never sends a write blindly a second time.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/failpoint"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/step"
	"github.com/reinhq/rein/internal/tools"
)

// sendMode is what commitWrite knows of a dispatched write before it
// sends it.
type sendMode int

const (
	// sendDispatched: the write was dispatched just now. It is sent; only
	// when the send does not answer is it looked up.
	sendDispatched sendMode = iota
	// sendApprovedAgain: a person approved again a write whose earlier
	// dispatch has an unknown outcome. It is looked up first; a tool that
	// cannot look writes up has it sent again, with the same key, on the
	// person's word that it was not applied.
	sendApprovedAgain
	// sendSettling: the process stopped between the write's dispatch and
	// its receipt (SettleWrite). It is looked up first; a tool that
	// cannot look writes up leaves its outcome unknown, for a person.
	sendSettling
)

// unknownWhy is why the outcome of a write sent in mode m is unknown
// before it is looked up; nil for sendDispatched, whose send says.
func (m sendMode) unknownWhy() error {
	switch m {
	case sendApprovedAgain:
		return errors.New("an earlier dispatch of this write has an unknown outcome")
	case sendSettling:
		return errors.New("the process stopped between the write's dispatch and its receipt")
	}
	return nil
}

// commitWrite sends the run's dispatched write to its tool and records the
// outcome: the receipt (then the run goes on), or, when the commit does not
// answer, whatever the tool's lookup says. A write whose earlier attempt's
// outcome is unknown (send is not sendDispatched) is looked up first, and
// sent again only if the lookup says it was not applied, or, with no
// lookup, on a person's word (sendApprovedAgain). Never a blind second
// dispatch.
func (e *Engine) commitWrite(ctx context.Context, st runstate.State, send sendMode) (runstate.State, error) {
	p, opID := st.ApprovedWrite, st.WriteOperationID
	// The tool is given the whole preview and arguments, which the
	// proposal's hash binds, read back when they were stored apart.
	whole, err := step.WholeProposal(ctx, e.cfg.Store, st.RunID, p)
	if err != nil {
		return st, err
	}
	// The write's call was the last of its tool: the run paused at it.
	index := max(int(st.CallsByTool[p.GetTool()])-1, 0)
	call := tools.Call{RunID: st.RunID, CallID: p.GetCallId(), Tool: p.GetTool(), Args: whole.GetArguments(), Index: index,
		Preview: whole.GetPreview()}
	actor := "tool:" + p.GetTool()
	wctx := context.WithoutCancel(ctx)
	if p.GetTier() == reinv1.ToolTier_TOOL_TIER_READ {
		return e.approvedRead(wctx, st, actor, call)
	}
	// cause is why the write's outcome is unknown, once it is.
	cause := send.unknownWhy()
	if send == sendDispatched {
		failpoint.Inject(failpoint.WriteAfterDispatch)
		start := time.Now()
		receipt, err := e.commitOnce(wctx, call, opID)
		if err == nil {
			failpoint.Inject(failpoint.WriteAfterCommit)
			return e.writeCommitted(ctx, st, actor, receipt, time.Since(start))
		}
		if errors.Is(err, tools.ErrRefused) {
			return e.writeRefused(ctx, st, actor, err)
		}
		cause = err
	}
	start := time.Now()
	receipt, applied, lerr := e.lookup(wctx, call, opID)
	switch {
	case errors.Is(lerr, tools.ErrNoLookup) && send == sendApprovedAgain:
		// A person approved again a write no lookup can settle: send it
		// again, with the same key, below.
	case errors.Is(lerr, tools.ErrNoLookup):
		return e.writeUnknown(ctx, st, actor, fmt.Errorf("%v; the tool cannot look writes up", cause))
	case lerr != nil:
		return e.writeUnknown(ctx, st, actor, fmt.Errorf("%v; looking the write up failed too: %v", cause, lerr))
	case applied:
		return e.writeCommitted(ctx, st, actor, receipt, time.Since(start))
	}
	// The tool says the write was not applied: send it again, with the same
	// key, and record that it was sent.
	st, err = e.commit(ctx, st, "harness", []*reinv1.Event{{Payload: &reinv1.Event_WriteDispatched{WriteDispatched: &reinv1.WriteDispatched{
		ProposalId: p.GetProposalId(), OperationId: opID,
	}}}})
	if err != nil {
		return st, err
	}
	failpoint.Inject(failpoint.WriteAfterDispatch)
	start = time.Now()
	receipt, err = e.commitOnce(wctx, call, opID)
	if err != nil {
		// A refusal of a write sent again is no proof that nothing was
		// written: the first send may have been applied before the world
		// moved. Only a person can tell.
		return e.writeUnknown(ctx, st, actor, err)
	}
	failpoint.Inject(failpoint.WriteAfterCommit)
	return e.writeCommitted(ctx, st, actor, receipt, time.Since(start))
}

// approvedRead runs a read a policy paused, once approved: a read has no
// side effects, so one a crash cut is simply run again. Its output is the
// receipt the model reads; an error is an observation too.
func (e *Engine) approvedRead(ctx context.Context, st runstate.State, actor string, call tools.Call) (runstate.State, error) {
	rctx, cancel := context.WithTimeoutCause(ctx, e.cfg.ToolTimeout, e.toolTimedOut("read"))
	defer cancel()
	start := time.Now()
	out, err := step.Await(rctx, e.stepped, func(ctx context.Context) (*structpb.Value, error) { return e.executor().Read(ctx, call) })
	if err != nil {
		return e.writeRefused(ctx, st, actor, fmt.Errorf("the approved read failed: %w", err))
	}
	return e.writeCommitted(ctx, st, actor, out, time.Since(start))
}

// lookup asks the tool whether the write with key opID was applied;
// tools.ErrNoLookup when it cannot tell.
func (e *Engine) lookup(ctx context.Context, call tools.Call, opID string) (*structpb.Value, bool, error) {
	looker, ok := e.executor().(tools.Looker)
	if !ok {
		return nil, false, tools.ErrNoLookup
	}
	lctx, cancel := context.WithTimeoutCause(ctx, e.cfg.ToolTimeout, e.toolTimedOut("lookup"))
	defer cancel()
	type found struct {
		receipt *structpb.Value
		applied bool
	}
	f, err := step.Await(lctx, e.stepped, func(ctx context.Context) (found, error) {
		receipt, applied, err := looker.Lookup(ctx, call, opID)
		return found{receipt, applied}, err
	})
	return f.receipt, f.applied, err
}

// commitOnce sends the write once. ctx is not cancelled by a cancel or a
// shutdown (a write that started must finish), but the tool timeout cuts
// it even when the tool does not return: then the outcome is unknown.
func (e *Engine) commitOnce(ctx context.Context, call tools.Call, opID string) (*structpb.Value, error) {
	cctx, cancel := context.WithTimeoutCause(ctx, e.cfg.ToolTimeout, e.toolTimedOut("commit"))
	defer cancel()
	return step.Await(cctx, e.stepped, func(ctx context.Context) (*structpb.Value, error) { return e.executor().Commit(ctx, call, opID) })
}

func (e *Engine) toolTimedOut(what string) error {
	return fmt.Errorf("the tool's %s did not answer within its timeout of %s", what, e.cfg.ToolTimeout)
}

// writeCommitted records a write's receipt, and how long the commit (or
// the lookup that found it) took, and carries the run on.
func (e *Engine) writeCommitted(ctx context.Context, st runstate.State, actor string, receipt *structpb.Value, took time.Duration) (runstate.State, error) {
	p := st.ApprovedWrite
	if proto.Size(receipt) > step.MaxInlinePayload {
		receipt = step.Summarize(receipt) // a receipt is the tool's to make: bounded
	}
	next, err := e.commit(ctx, st, actor, []*reinv1.Event{{Payload: &reinv1.Event_WriteCommitted{WriteCommitted: &reinv1.WriteCommitted{
		ProposalId: p.GetProposalId(), OperationId: st.WriteOperationID, Receipt: receipt, Duration: durationpb.New(took),
	}}}, {Actor: "harness", Payload: &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{
		From: reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL, To: reinv1.RunStatus_RUN_STATUS_RUNNING, Reason: "write_committed",
	}}}})
	if err != nil {
		return st, err
	}
	e.schedule(st.RunID)
	return next, nil
}

// writeRefused records a write its tool refused, having written nothing:
// the outcome is known, so it is an observation for the model (which may
// propose again) and the run goes on.
func (e *Engine) writeRefused(ctx context.Context, st runstate.State, actor string, cause error) (runstate.State, error) {
	next, err := e.commit(ctx, st, actor, []*reinv1.Event{{Payload: &reinv1.Event_WriteRefused{WriteRefused: &reinv1.WriteRefused{
		ProposalId: st.ApprovedWrite.GetProposalId(), OperationId: st.WriteOperationID, Reason: step.CutText(cause.Error(), step.MaxInlineText),
	}}}, {Actor: "harness", Payload: &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{
		From: reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL, To: reinv1.RunStatus_RUN_STATUS_RUNNING, Reason: "write_refused",
	}}}})
	if err != nil {
		return st, err
	}
	e.schedule(st.RunID)
	return next, nil
}

// writeUnknown records that a write's outcome is unknown: the proposal
// waits for a person again (approve sends it again with the same key).
func (e *Engine) writeUnknown(ctx context.Context, st runstate.State, actor string, cause error) (runstate.State, error) {
	next, err := e.commit(ctx, st, actor, []*reinv1.Event{{Payload: &reinv1.Event_WriteOutcomeUnknown{WriteOutcomeUnknown: &reinv1.WriteOutcomeUnknown{
		ProposalId: st.ApprovedWrite.GetProposalId(), OperationId: st.WriteOperationID,
		Error: fmt.Sprintf("whether the write happened is unknown: %s; check the system of record for operation %s, then approve again (the same key is reused), reject, or cancel the run",
			step.CutText(cause.Error(), step.MaxInlineText), st.WriteOperationID),
	}}}})
	if err != nil {
		return st, err
	}
	e.Arm(next)
	return next, nil
}

// SettleWrite finishes a write that was dispatched when the process stopped
// (write_dispatched with no outcome): the tool's lookup decides. The server
// calls it at start for every such run.
func (e *Engine) SettleWrite(ctx context.Context, runID string) (runstate.State, error) {
	st, err := e.cfg.Store.Load(ctx, runID)
	if err != nil {
		return st, err
	}
	if st.Status != reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL || !st.WriteInFlight() {
		return st, nil
	}
	return e.asDriver(ctx, runID, nil, func(ctx context.Context) (runstate.State, error) {
		st, err := e.cfg.Store.Load(ctx, runID)
		if err != nil || !st.WriteInFlight() {
			return st, err
		}
		return e.commitWrite(ctx, st, sendSettling)
	})
}
