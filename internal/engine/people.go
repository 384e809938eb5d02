package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/tools"
)

// Refusals of a person's request. The server answers ErrNotWaiting and
// ErrNoExecutor with FailedPrecondition and ErrForbidden with
// PermissionDenied.
var (
	// ErrNotWaiting: the run is not waiting for this (not paused for it,
	// the proposal was decided, expired, or its hash does not match).
	ErrNotWaiting = errors.New("the run is not waiting for this")
	// ErrForbidden: the run's policy forbids this caller.
	ErrForbidden = errors.New("forbidden by the run's policy")
	// ErrNoExecutor: the approved write's tool is not provided by this
	// server, so its write could not be sent.
	ErrNoExecutor = errors.New("this server has no tool to carry this out")
)

// ProvideInput answers a run that waits for input, then carries it on.
func (e *Engine) ProvideInput(ctx context.Context, runID, text, principal string) (runstate.State, error) {
	return e.againIfFenced(func() (runstate.State, error) { return e.provideInput(ctx, runID, text, principal) })
}

// againIfFenced runs a person's decision (or a cancel) once more, on a
// replica, if its commit was fenced: this engine held a lease on the run
// that another server took since (a paused run is driven by no one, and a
// decision may be sent to any replica), and commit forgot it, so the
// second try takes the run (store.WithAcquire) on the state as it is now;
// the shared store refuses that with store.ErrOwned while another server
// drives the run. A single server's fenced decision is refused: nothing
// tells it whether the owner that fenced it is alive.
func (e *Engine) againIfFenced(decide func() (runstate.State, error)) (runstate.State, error) {
	st, err := decide()
	if e.cfg.Replica && errors.Is(err, store.ErrFenced) {
		return decide()
	}
	return st, err
}

func (e *Engine) provideInput(ctx context.Context, runID, text, principal string) (runstate.State, error) {
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
	// A run paused because a tool changed resumes on the definitions
	// served now.
	adopted, err := e.adoptOnResume(ctx, st)
	if err != nil {
		return st, err
	}
	evs := append([]*reinv1.Event{{Payload: &reinv1.Event_InputProvided{InputProvided: &reinv1.InputProvided{Text: text}}}}, adopted...)
	next, err := e.commit(ctx, st, "principal:"+principal, append(evs, &reinv1.Event{Payload: &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{
		From: st.Status, To: reinv1.RunStatus_RUN_STATUS_RUNNING, Reason: "input_provided",
	}}}))
	if err != nil {
		return st, err
	}
	e.disarm(runID)
	e.schedule(runID)
	return next, nil
}

// Verdict is a person's decision on a proposed write (not to be confused
// with the model's reinv1.Decision).
type Verdict struct {
	RunID, ProposalID, ProposalHash string
	Approve                         bool
	Reason                          string
	// EndRun, with a rejection, ends the run as denied.
	EndRun    bool
	Principal string
	// Arguments, when set, revise the proposal instead of deciding on it
	// (Revise): Approve and EndRun are not read.
	Arguments *structpb.Struct
}

// DecideApproval applies a person's verdict to the run's pending proposal.
// A rejection is an observation for the model and the run goes on (or, with
// EndRun, ends denied). An approval stores write_dispatched, whose operation
// ID is the write's idempotency key, before the commit is sent; the run goes
// on only after the tool's receipt (write_committed). A commit that fails
// leaves the outcome unknown (write_outcome_unknown): the run stays paused
// for a person, and rein never dispatches the write blindly again. The
// approved write is committed by the run's driver, registered like every
// other step, so a cancel or a shutdown waits for it.
//
// Of concurrent decisions on one proposal exactly one wins; the others get
// ErrNotWaiting or store.ErrConflict and change nothing.
func (e *Engine) DecideApproval(ctx context.Context, v Verdict) (runstate.State, error) {
	return e.againIfFenced(func() (runstate.State, error) { return e.decideApproval(ctx, v) })
}

func (e *Engine) decideApproval(ctx context.Context, v Verdict) (runstate.State, error) {
	st, err := e.cfg.Store.Load(ctx, v.RunID)
	if err != nil {
		return st, err
	}
	if err := e.checkVerdict(st, v); err != nil {
		return st, err
	}
	if v.Arguments != nil {
		return e.revise(ctx, st, v)
	}
	if !v.Approve {
		return e.reject(ctx, st, v)
	}
	// A proposal whose tool changed since it was previewed is never
	// committed on its hash, nor counted approved.
	if _, changed, next, err := e.proposalTool(ctx, st, v); changed {
		return next, err
	}
	if runstate.Needed(st.Pending.GetProposal()) > 1 {
		next, counted, err := e.giveApproval(ctx, st, v)
		if counted || err != nil {
			return next, err
		}
		st = next
	}
	if err := e.checkProvided(ctx, st); err != nil {
		return st, err
	}
	// The run is loaded again only when it may have moved: after a wait
	// for its driver to leave, and when the decision's commit conflicts.
	check := func(ctx context.Context) error {
		loaded, err := e.cfg.Store.Load(ctx, v.RunID)
		if err != nil {
			return err
		}
		if err := e.checkVerdict(loaded, v); err != nil {
			return err
		}
		st = loaded
		return nil
	}
	return e.asDriver(ctx, v.RunID, check, func(ctx context.Context) (runstate.State, error) {
		return e.approveAsDriver(ctx, st, v)
	})
}

// checkVerdict refuses a verdict the run is not waiting for, or that its
// policy forbids.
func (e *Engine) checkVerdict(st runstate.State, v Verdict) error {
	p := st.Pending.GetProposal()
	switch {
	case st.Status != reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL:
		return fmt.Errorf("%w: run %s is %s; it has no proposal waiting for a decision", ErrNotWaiting, v.RunID, runstate.StatusName(st.Status))
	case p == nil || p.GetProposalId() != v.ProposalID:
		return fmt.Errorf("%w: proposal %s is not pending on run %s (it was decided, or is not this run's); see the run's pending action", ErrNotWaiting, v.ProposalID, v.RunID)
	case p.GetHash() != v.ProposalHash:
		return fmt.Errorf("%w: proposal %s has hash %s, not %s; review the proposal as it stands and decide again", ErrNotWaiting, v.ProposalID, p.GetHash(), v.ProposalHash)
	case !e.cfg.Clock().Before(p.GetExpiresAt().AsTime()):
		return fmt.Errorf("%w: proposal %s expired at %s", ErrNotWaiting, v.ProposalID, p.GetExpiresAt().AsTime().Format(time.RFC3339))
	case v.Approve && v.Arguments == nil && st.Contract.GetApproval().GetForbidSelfApproval() && v.Principal == st.Principal:
		return fmt.Errorf("%w: run %s forbids approving a write of a run one started; ask another approver", ErrForbidden, v.RunID)
	case v.Approve && v.Arguments == nil && runstate.Needed(p) > 1 && v.Principal == st.Principal:
		return fmt.Errorf("%w: proposal %s needs %d approvers, and the run's starter is never one of them; ask another approver", ErrForbidden, v.ProposalID, runstate.Needed(p))
	case v.Approve && v.Arguments == nil && e.cfg.ApprovalsNeedTwo && p.GetRevisedBy() != "" && p.GetRevisedBy() == v.Principal:
		return fmt.Errorf("%w: you revised proposal %s, and this server has another approver approve a revision (--approvals-need-two); ask another approver", ErrForbidden, v.ProposalID)
	}
	return e.beforeDeadline(st)
}

// giveApproval records v, an approval of a proposal that needs several,
// unless it is the last one the proposal needs (counted is false: the
// caller approves, with the state as it is now) or its principal approved
// already (counted once, and nothing is recorded). Approvals given at
// once by several people are recorded one after the other: an append
// that lost the race to another is tried again on the state it left.
func (e *Engine) giveApproval(ctx context.Context, st runstate.State, v Verdict) (next runstate.State, counted bool, err error) {
	again := false
	err = store.RetryOnConflict(ctx, v.RunID, "approve proposal "+v.ProposalID+" of", func() error {
		if again {
			// The append lost the race to another: look again.
			loaded, err := e.cfg.Store.Load(ctx, v.RunID)
			st, next, counted = loaded, loaded, true
			if err != nil {
				return err
			}
			if err := e.checkVerdict(st, v); err != nil {
				return err
			}
		}
		again = true
		next, counted = st, true
		p := st.Pending.GetProposal()
		switch {
		case slices.Contains(p.GetApprovedBy(), v.Principal):
			return nil
		case len(p.GetApprovedBy())+1 >= runstate.Needed(p):
			counted = false
			return nil
		}
		next, err = e.commit(ctx, st, "principal:"+v.Principal, []*reinv1.Event{{Payload: &reinv1.Event_ApprovalGiven{ApprovalGiven: &reinv1.ApprovalGiven{
			ProposalId: p.GetProposalId(), Given: uint32(len(p.GetApprovedBy()) + 1), Needed: uint32(runstate.Needed(p)),
		}}}})
		return err
	})
	return next, counted, err
}

// checkProvided refuses, before anything is stored, an approval whose write
// no executor of this engine provides (a server started without the flags
// the run was started with): the write could not be sent, so recording it
// dispatched would leave a known outcome unknown. A tool whose executor
// cannot list its tools now (a tool server that is down) is not refused:
// its write is dispatched, and its outcome settled by lookup.
func (e *Engine) checkProvided(ctx context.Context, st runstate.State) error {
	p := st.Pending.GetProposal()
	lctx, cancel := context.WithTimeoutCause(ctx, e.cfg.ToolTimeout, e.toolTimedOut("listing"))
	defer cancel()
	missing, err := tools.Unlisted(lctx, e.executor(), []string{p.GetTool()})
	if len(missing) == 0 || err != nil {
		return nil
	}
	return fmt.Errorf("%w: proposal %s of run %s writes with tool %q, which no executor of this server provides; nothing was recorded: approve it on a server given the tool (%s), or reject it",
		ErrNoExecutor, p.GetProposalId(), st.RunID, p.GetTool(), ToolFlags)
}

func decidedEvent(v Verdict) *reinv1.Event {
	return &reinv1.Event{Payload: &reinv1.Event_ApprovalDecided{ApprovalDecided: &reinv1.ApprovalDecided{
		ProposalId: v.ProposalID, Approved: v.Approve, Reason: v.Reason, EndRun: v.EndRun && !v.Approve,
	}}}
}

// reject records a rejection: an observation for the model, and the run
// goes on, or ends denied with EndRun.
func (e *Engine) reject(ctx context.Context, st runstate.State, v Verdict) (runstate.State, error) {
	to, reason := reinv1.RunStatus_RUN_STATUS_RUNNING, "write_rejected"
	if v.EndRun {
		to, reason = reinv1.RunStatus_RUN_STATUS_DENIED, "write_rejected_run_ended"
	}
	next, err := e.commit(ctx, st, "principal:"+v.Principal, []*reinv1.Event{
		decidedEvent(v),
		{Payload: &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{From: st.Status, To: to, Reason: reason}}},
	})
	if err != nil {
		return st, err
	}
	e.disarm(v.RunID)
	if to == reinv1.RunStatus_RUN_STATUS_RUNNING {
		e.schedule(v.RunID)
	}
	return next, nil
}

// approveAsDriver records an approval and has the write sent; it runs as
// the run's driver. st is the run as last loaded and checked: when it has
// moved since, the decision's commit conflicts, and the run is loaded and
// the verdict checked again on it, as often as store.RetryOnConflict
// allows.
func (e *Engine) approveAsDriver(ctx context.Context, st runstate.State, v Verdict) (runstate.State, error) {
	var send sendMode
	decided, fresh := false, true // st is as the caller loaded and checked it
	err := store.RetryOnConflict(ctx, v.RunID, "approve proposal "+v.ProposalID+" of", func() error {
		if !fresh {
			loaded, err := e.cfg.Store.Load(ctx, v.RunID)
			st = loaded
			if err != nil {
				return err
			}
			if err := e.checkVerdict(st, v); err != nil {
				return err
			}
		}
		fresh = false
		if slices.Contains(st.Pending.GetProposal().GetApprovedBy(), v.Principal) {
			return nil // approved already, by an approval that raced this one: counted once
		}
		adopt, changed, next, err := e.proposalTool(ctx, st, v)
		if changed {
			st = next
			return err
		}
		if st, send, err = e.recordApproval(ctx, st, v, adopt); err != nil {
			return err
		}
		decided = true
		return nil
	})
	if err != nil || !decided {
		return st, err
	}
	return e.commitWrite(ctx, st, send)
}

// recordApproval commits a person's approval of the pending write, and
// says how commitWrite is to send it: a write dispatched now (its
// write_dispatched is in this commit) is sent; one whose earlier dispatch
// has an unknown outcome is looked up first.
//
// adopt, when set, is the tool_adopted of a proposal previewed again on its
// tool's new definition: the approval moves the run there, in its commit.
func (e *Engine) recordApproval(ctx context.Context, st runstate.State, v Verdict, adopt *reinv1.Event) (runstate.State, sendMode, error) {
	actor := "principal:" + v.Principal
	var adopted []*reinv1.Event
	if adopt != nil {
		adopted = append(adopted, adopt)
	}
	// An earlier dispatch of this write has an unknown outcome: a tool that
	// can look writes up is asked before the write is sent again (it may
	// have been applied). Without a lookup, the person's approval is the
	// word that it was not, and the write is sent again with the same key.
	if st.WriteOperationID != "" {
		next, err := e.commit(ctx, st, actor, append(adopted, decidedEvent(v)))
		if err != nil {
			return st, 0, err
		}
		e.disarm(v.RunID)
		return next, sendApprovedAgain, nil
	}
	// The key is the proposal's: a second dispatch of the same write (after
	// an unknown outcome) reuses it.
	opID := "op_" + v.ProposalID
	next, err := e.commit(ctx, st, actor, append(adopted,
		decidedEvent(v),
		&reinv1.Event{Payload: &reinv1.Event_WriteDispatched{WriteDispatched: &reinv1.WriteDispatched{ProposalId: v.ProposalID, OperationId: opID}}},
	))
	if err != nil {
		return st, 0, err
	}
	e.disarm(v.RunID)
	return next, sendDispatched, nil
}

// beforeDeadline refuses a person's action on a run whose deadline passed
// (its timer ends it budget_exhausted).
func (e *Engine) beforeDeadline(st runstate.State) error {
	if !st.Deadline.IsZero() && !e.cfg.Clock().Before(st.Deadline) {
		return fmt.Errorf("%w: run %s's deadline %s has passed; it ends budget_exhausted", ErrNotWaiting, st.RunID, st.Deadline.Format(time.RFC3339))
	}
	return nil
}

func (e *Engine) executor() tools.Executor {
	if e.cfg.Tools == nil {
		return noTools{}
	}
	return e.cfg.Tools
}

// noTools is the executor of an engine configured without tools.
type noTools struct{}

func (noTools) List(context.Context) ([]tools.Spec, error) { return nil, nil }
func (noTools) Read(_ context.Context, c tools.Call) (*structpb.Value, error) {
	return nil, fmt.Errorf("%w: %q is granted, but this server has no tool by that name", tools.ErrNoTool, c.Tool)
}
func (n noTools) Propose(ctx context.Context, c tools.Call) (*structpb.Value, error) {
	return n.Read(ctx, c)
}
func (n noTools) Commit(ctx context.Context, c tools.Call, _ string) (*structpb.Value, error) {
	return n.Read(ctx, c)
}
