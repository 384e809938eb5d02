package harness

import (
	"context"
	"errors"
	"fmt"
	"time"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/failpoint"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/tools"
	"google.golang.org/protobuf/types/known/structpb"
)

// Refusals of a person's request. The server answers ErrNotWaiting with
// FailedPrecondition and ErrForbidden with PermissionDenied.
var (
	// ErrNotWaiting: the run is not waiting for this (not paused for it,
	// the proposal was decided, expired, or its hash does not match).
	ErrNotWaiting = errors.New("the run is not waiting for this")
	// ErrForbidden: the run's policy forbids this caller.
	ErrForbidden = errors.New("forbidden by the run's policy")
)

// ProvideInput answers a run that waits for input, then carries it on.
func (e *Engine) ProvideInput(ctx context.Context, runID, text, principal string) (runstate.State, error) {
	st, err := e.cfg.Store.Load(ctx, runID)
	if err != nil {
		return st, err
	}
	if st.Status != reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT {
		return st, fmt.Errorf("%w: run %s is %s; only a needs_input run takes input", ErrNotWaiting, runID, runstate.StatusName(st.Status))
	}
	if err := e.beforeDeadline(st); err != nil {
		return st, err
	}
	next, err := e.appendEvents(ctx, st, "principal:"+principal,
		&reinv1.Event{Payload: &reinv1.Event_InputProvided{InputProvided: &reinv1.InputProvided{Text: text}}},
		&reinv1.Event{Payload: &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{
			From: st.Status, To: reinv1.RunStatus_RUN_STATUS_RUNNING, Reason: "input_provided",
		}}})
	if err != nil {
		return st, err
	}
	e.disarm(runID)
	e.schedule(runID)
	return next, nil
}

// errEarlierUnknown is why a re-approved write is looked up before it is
// sent again.
var errEarlierUnknown = errors.New("an earlier dispatch of this write has an unknown outcome")

// Decision is a person's decision on a proposed write.
type Decision struct {
	RunID, ProposalID, ProposalHash string
	Approve                         bool
	Reason                          string
	// EndRun, with a rejection, ends the run as denied.
	EndRun    bool
	Principal string
}

// DecideApproval applies a person's decision to the run's pending proposal.
// A rejection is an observation for the model and the run goes on (or, with
// EndRun, ends denied). An approval stores write_dispatched, whose operation
// ID is the write's idempotency key, before the commit is sent; the run goes
// on only after the tool's receipt (write_committed). A commit that fails
// leaves the outcome unknown (write_outcome_unknown): the run stays paused
// for a person, and rein never dispatches the write blindly again.
//
// Of concurrent decisions on one proposal exactly one wins; the others get
// ErrNotWaiting or store.ErrConflict and change nothing.
func (e *Engine) DecideApproval(ctx context.Context, d Decision) (runstate.State, error) {
	st, err := e.cfg.Store.Load(ctx, d.RunID)
	if err != nil {
		return st, err
	}
	p := st.Pending.GetProposal()
	switch {
	case st.Status != reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL:
		return st, fmt.Errorf("%w: run %s is %s; it has no proposal waiting for a decision", ErrNotWaiting, d.RunID, runstate.StatusName(st.Status))
	case p == nil || p.GetProposalId() != d.ProposalID:
		return st, fmt.Errorf("%w: proposal %s is not pending on run %s (it was decided, or is not this run's); see the run's pending action", ErrNotWaiting, d.ProposalID, d.RunID)
	case p.GetHash() != d.ProposalHash:
		return st, fmt.Errorf("%w: proposal %s has hash %s, not %s; review the proposal as it stands and decide again", ErrNotWaiting, d.ProposalID, p.GetHash(), d.ProposalHash)
	case !e.cfg.Clock().Before(p.GetExpiresAt().AsTime()):
		return st, fmt.Errorf("%w: proposal %s expired at %s", ErrNotWaiting, d.ProposalID, p.GetExpiresAt().AsTime().Format(time.RFC3339))
	case d.Approve && st.Contract.GetApproval().GetForbidSelfApproval() && d.Principal == st.Principal:
		return st, fmt.Errorf("%w: run %s forbids approving a write of a run one started; ask another approver", ErrForbidden, d.RunID)
	}
	if err := e.beforeDeadline(st); err != nil {
		return st, err
	}
	actor := "principal:" + d.Principal
	decided := &reinv1.Event{Payload: &reinv1.Event_ApprovalDecided{ApprovalDecided: &reinv1.ApprovalDecided{
		ProposalId: p.GetProposalId(), Approved: d.Approve, Reason: d.Reason, EndRun: d.EndRun && !d.Approve,
	}}}
	if !d.Approve {
		to, reason := reinv1.RunStatus_RUN_STATUS_RUNNING, "write_rejected"
		if d.EndRun {
			to, reason = reinv1.RunStatus_RUN_STATUS_DENIED, "write_rejected_run_ended"
		}
		next, err := e.appendEvents(ctx, st, actor, decided, &reinv1.Event{Payload: &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{
			From: st.Status, To: to, Reason: reason,
		}}})
		if err != nil {
			return st, err
		}
		e.disarm(d.RunID)
		if to == reinv1.RunStatus_RUN_STATUS_RUNNING {
			e.schedule(d.RunID)
		}
		return next, nil
	}

	// An earlier dispatch of this write has an unknown outcome: a tool that
	// can look writes up is asked before the write is sent again (it may
	// have been applied). Without a lookup, the person's approval is the
	// word that it was not, and the write is sent again with the same key.
	if st.WriteOperationID != "" {
		next, err := e.appendEvents(ctx, st, actor, decided)
		if err != nil {
			return st, err
		}
		e.disarm(d.RunID)
		return e.commitWrite(ctx, next, errEarlierUnknown)
	}
	// The key is the proposal's: a second dispatch of the same write (after
	// an unknown outcome) reuses it.
	opID := "op_" + p.GetProposalId()
	next, err := e.appendEvents(ctx, st, actor, decided, &reinv1.Event{Payload: &reinv1.Event_WriteDispatched{WriteDispatched: &reinv1.WriteDispatched{
		ProposalId: p.GetProposalId(), OperationId: opID,
	}}})
	if err != nil {
		return st, err
	}
	e.disarm(d.RunID)
	return e.commitWrite(ctx, next, nil)
}

// commitWrite sends the run's dispatched write to its tool and records the
// outcome: the receipt (then the run goes on), or, when the commit does not
// answer, whatever the tool's lookup says. cause, when set, is why an
// earlier attempt's outcome is unknown (a crash): then the lookup comes
// first, and the write is sent again only if the lookup says it was not
// applied. Never a blind second dispatch.
func (e *Engine) commitWrite(ctx context.Context, st runstate.State, cause error) (runstate.State, error) {
	p, opID := st.ApprovedWrite, st.WriteOperationID
	index, err := e.callIndex(ctx, st.RunID, p)
	if err != nil {
		return st, err
	}
	call := tools.Call{RunID: st.RunID, CallID: p.GetCallId(), Tool: p.GetTool(), Args: p.GetArguments(), Index: index,
		Preview: p.GetPreview()}
	actor := "tool:" + p.GetTool()
	wctx := context.WithoutCancel(ctx)
	if cause == nil {
		failpoint.Inject(failpoint.WriteAfterDispatch)
		receipt, err := e.commitOnce(wctx, call, opID)
		if err == nil {
			failpoint.Inject(failpoint.WriteAfterCommit)
			return e.writeCommitted(ctx, st, actor, receipt)
		}
		if errors.Is(err, tools.ErrRefused) {
			return e.writeRefused(ctx, st, actor, err)
		}
		cause = err
	}
	receipt, applied, lerr := e.lookup(wctx, call, opID)
	switch {
	case errors.Is(lerr, tools.ErrNoLookup) && cause == errEarlierUnknown:
		// A person approved again a write no lookup can settle: send it
		// again, with the same key, below.
	case errors.Is(lerr, tools.ErrNoLookup):
		return e.writeUnknown(ctx, st, actor, fmt.Errorf("%v; the tool cannot look writes up", cause))
	case lerr != nil:
		return e.writeUnknown(ctx, st, actor, fmt.Errorf("%v; looking the write up failed too: %v", cause, lerr))
	case applied:
		return e.writeCommitted(ctx, st, actor, receipt)
	}
	// The tool says the write was not applied: send it again, with the same
	// key, and record that it was sent.
	st, err = e.appendEvents(ctx, st, "harness", &reinv1.Event{Payload: &reinv1.Event_WriteDispatched{WriteDispatched: &reinv1.WriteDispatched{
		ProposalId: p.GetProposalId(), OperationId: opID,
	}}})
	if err != nil {
		return st, err
	}
	failpoint.Inject(failpoint.WriteAfterDispatch)
	receipt, err = e.commitOnce(wctx, call, opID)
	if err != nil {
		// A refusal of a write sent again is no proof that nothing was
		// written: the first send may have been applied before the world
		// moved. Only a person can tell.
		return e.writeUnknown(ctx, st, actor, err)
	}
	failpoint.Inject(failpoint.WriteAfterCommit)
	return e.writeCommitted(ctx, st, actor, receipt)
}

// lookup asks the tool whether the write with key opID was applied;
// tools.ErrNoLookup when it cannot tell.
func (e *Engine) lookup(ctx context.Context, call tools.Call, opID string) (*structpb.Value, bool, error) {
	looker, ok := e.executor().(tools.Looker)
	if !ok {
		return nil, false, tools.ErrNoLookup
	}
	lctx, cancel := context.WithTimeout(ctx, e.cfg.ToolTimeout)
	defer cancel()
	return looker.Lookup(lctx, call, opID)
}

func (e *Engine) commitOnce(ctx context.Context, call tools.Call, opID string) (*structpb.Value, error) {
	cctx, cancel := context.WithTimeout(ctx, e.cfg.ToolTimeout)
	defer cancel()
	return e.executor().Commit(cctx, call, opID)
}

// writeCommitted records a write's receipt and carries the run on.
func (e *Engine) writeCommitted(ctx context.Context, st runstate.State, actor string, receipt *structpb.Value) (runstate.State, error) {
	p := st.ApprovedWrite
	next, err := e.appendEvents(ctx, st, actor,
		&reinv1.Event{Payload: &reinv1.Event_WriteCommitted{WriteCommitted: &reinv1.WriteCommitted{
			ProposalId: p.GetProposalId(), OperationId: st.WriteOperationID, Receipt: receipt,
		}}},
		&reinv1.Event{Actor: "harness", Payload: &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{
			From: reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL, To: reinv1.RunStatus_RUN_STATUS_RUNNING, Reason: "write_committed",
		}}})
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
	next, err := e.appendEvents(ctx, st, actor,
		&reinv1.Event{Payload: &reinv1.Event_WriteRefused{WriteRefused: &reinv1.WriteRefused{
			ProposalId: st.ApprovedWrite.GetProposalId(), OperationId: st.WriteOperationID, Reason: cause.Error(),
		}}},
		&reinv1.Event{Actor: "harness", Payload: &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{
			From: reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL, To: reinv1.RunStatus_RUN_STATUS_RUNNING, Reason: "write_refused",
		}}})
	if err != nil {
		return st, err
	}
	e.schedule(st.RunID)
	return next, nil
}

// writeUnknown records that a write's outcome is unknown: the proposal
// waits for a person again (approve sends it again with the same key).
func (e *Engine) writeUnknown(ctx context.Context, st runstate.State, actor string, cause error) (runstate.State, error) {
	next, err := e.appendEvents(ctx, st, actor, &reinv1.Event{Payload: &reinv1.Event_WriteOutcomeUnknown{WriteOutcomeUnknown: &reinv1.WriteOutcomeUnknown{
		ProposalId: st.ApprovedWrite.GetProposalId(), OperationId: st.WriteOperationID,
		Error: fmt.Sprintf("whether the write happened is unknown: %v; check the system of record for operation %s, then approve again (the same key is reused), reject, or cancel the run",
			cause, st.WriteOperationID),
	}}})
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
	if st.Status != reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL || st.ApprovedWrite == nil || st.WriteOperationID == "" || st.Pending != nil {
		return st, nil
	}
	return e.commitWrite(ctx, st, errors.New("the process stopped between the write's dispatch and its receipt"))
}

// beforeDeadline refuses a person's action on a run whose deadline passed
// (its timer ends it budget_exhausted).
func (e *Engine) beforeDeadline(st runstate.State) error {
	if !st.Deadline.IsZero() && !e.cfg.Clock().Before(st.Deadline) {
		return fmt.Errorf("%w: run %s's deadline %s has passed; it ends budget_exhausted", ErrNotWaiting, st.RunID, st.Deadline.Format(time.RFC3339))
	}
	return nil
}

// callIndex is the Call.Index of a proposal's tool call: how many calls to
// its tool the run made before it.
func (e *Engine) callIndex(ctx context.Context, runID string, p *reinv1.Proposal) (int, error) {
	n := 0
	for after := uint64(0); after < p.GetRunVersion(); {
		evs, err := e.cfg.Store.Events(ctx, runID, after, eventPage)
		if err != nil {
			return 0, err
		}
		if len(evs) == 0 {
			break
		}
		for _, ev := range evs {
			if ev.GetSequence() > p.GetRunVersion() {
				break
			}
			if ev.GetToolRequested().GetTool() == p.GetTool() {
				n++
			}
		}
		after = evs[len(evs)-1].GetSequence()
	}
	return max(n-1, 0), nil
}

func (e *Engine) executor() tools.Executor {
	if e.cfg.Tools == nil {
		return noTools{}
	}
	return e.cfg.Tools
}
