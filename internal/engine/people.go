package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/failpoint"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/step"
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

// againIfFenced runs a person's decision (or a cancel) once more, on a replica, if its
// commit was fenced: this engine held a lease on the run that another
// server took since (a paused run is driven by no one, and a decision may
// be sent to any replica), and commit forgot it, so the second try takes
// the run (store.WithAcquire) on the state as it is now; the shared store
// refuses that with store.ErrOwned while another server drives the run.
// A single server's fenced decision is refused: nothing tells it whether
// the owner that fenced it is alive.
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

// errEarlierUnknown is why a re-approved write is looked up before it is
// sent again.
var errEarlierUnknown = errors.New("an earlier dispatch of this write has an unknown outcome")

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
	check := func(ctx context.Context) error {
		st, err := e.cfg.Store.Load(ctx, v.RunID)
		if err != nil {
			return err
		}
		return e.checkVerdict(st, v)
	}
	return e.asDriver(ctx, v.RunID, check, func(ctx context.Context) (runstate.State, error) {
		st, err := e.cfg.Store.Load(ctx, v.RunID)
		if err != nil {
			return st, err
		}
		if err := e.checkVerdict(st, v); err != nil {
			return st, err
		}
		if slices.Contains(st.Pending.GetProposal().GetApprovedBy(), v.Principal) {
			return st, nil // approved already, by an approval that raced this one: counted once
		}
		adopt, changed, next, err := e.proposalTool(ctx, st, v)
		if changed {
			return next, err
		}
		return e.approve(ctx, st, v, adopt)
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

// approve records an approval and commits the write; it runs as the run's
// driver.
//
// adopt, when set, is the tool_adopted of a proposal previewed again on its
// tool's new definition: the approval moves the run there, in its commit.
func (e *Engine) approve(ctx context.Context, st runstate.State, v Verdict, adopt *reinv1.Event) (runstate.State, error) {
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
			return st, err
		}
		e.disarm(v.RunID)
		return e.commitWrite(ctx, next, errEarlierUnknown)
	}
	// The key is the proposal's: a second dispatch of the same write (after
	// an unknown outcome) reuses it.
	opID := "op_" + v.ProposalID
	next, err := e.commit(ctx, st, actor, append(adopted,
		decidedEvent(v),
		&reinv1.Event{Payload: &reinv1.Event_WriteDispatched{WriteDispatched: &reinv1.WriteDispatched{ProposalId: v.ProposalID, OperationId: opID}}},
	))
	if err != nil {
		return st, err
	}
	e.disarm(v.RunID)
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
	if cause == nil {
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
	case errors.Is(lerr, tools.ErrNoLookup) && cause == errEarlierUnknown:
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
		return e.commitWrite(ctx, st, errors.New("the process stopped between the write's dispatch and its receipt"))
	})
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
