package harness

import (
	"context"
	"errors"
	"fmt"
	"time"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/tools"
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

	opID := "op_" + p.GetProposalId()
	next, err := e.appendEvents(ctx, st, actor, decided, &reinv1.Event{Payload: &reinv1.Event_WriteDispatched{WriteDispatched: &reinv1.WriteDispatched{
		ProposalId: p.GetProposalId(), OperationId: opID,
	}}})
	if err != nil {
		return st, err
	}
	e.disarm(d.RunID)
	index, err := e.callIndex(ctx, st.RunID, p)
	if err != nil {
		return next, err
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.ToolTimeout)
	defer cancel()
	call := tools.Call{RunID: st.RunID, CallID: p.GetCallId(), Tool: p.GetTool(), Args: p.GetArguments(), Index: index}
	receipt, cerr := e.executor().Commit(cctx, call, opID)
	tool := "tool:" + p.GetTool()
	if cerr != nil {
		return e.appendEvents(ctx, next, tool, &reinv1.Event{Payload: &reinv1.Event_WriteOutcomeUnknown{WriteOutcomeUnknown: &reinv1.WriteOutcomeUnknown{
			ProposalId: p.GetProposalId(), OperationId: opID,
			Error: fmt.Sprintf("the commit failed, so whether the write happened is unknown: %v; check the system of record for operation %s, then cancel the run or carry on", cerr, opID),
		}}})
	}
	next, err = e.appendEvents(ctx, next, tool,
		&reinv1.Event{Payload: &reinv1.Event_WriteCommitted{WriteCommitted: &reinv1.WriteCommitted{
			ProposalId: p.GetProposalId(), OperationId: opID, Receipt: receipt,
		}}},
		&reinv1.Event{Actor: "harness", Payload: &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{
			From: reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL, To: reinv1.RunStatus_RUN_STATUS_RUNNING, Reason: "write_committed",
		}}})
	if err != nil {
		return next, err
	}
	e.schedule(d.RunID)
	return next, nil
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
