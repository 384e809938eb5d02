package runstate

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// Errors returned by Apply, wrapped with the detail. Match them with
// errors.Is.
var (
	// ErrSequence: the event's sequence is not the state's version + 1.
	ErrSequence = errors.New("event out of sequence")
	// ErrIllegalTransition: the status change is not in the table, or the
	// event is not allowed in the run's current status.
	ErrIllegalTransition = errors.New("illegal transition")
	// ErrTerminal: the run is terminal and takes no more events.
	ErrTerminal = errors.New("run is terminal")
	// ErrInvalidEvent: the event is malformed (no payload, wrong run, a
	// missing field the fold needs).
	ErrInvalidEvent = errors.New("invalid event")
)

// Rejected reports whether err is, or wraps, one of the errors Apply
// rejects an event with (ErrSequence, ErrIllegalTransition, ErrTerminal,
// ErrInvalidEvent): a store that refuses an append because its fold
// rejects the events wraps the fold's error, and nothing else it refuses
// with is one of these.
func Rejected(err error) bool {
	return errors.Is(err, ErrSequence) || errors.Is(err, ErrIllegalTransition) ||
		errors.Is(err, ErrTerminal) || errors.Is(err, ErrInvalidEvent)
}

// Apply returns the state after ev, or an error that leaves s as it was. It
// neither mutates ev nor keeps a reference to anything but the immutable
// payloads (contract, proposal, result) it records.
func Apply(s State, ev *reinv1.Event) (State, error) {
	if ev == nil {
		return s, fmt.Errorf("%w: nil event", ErrInvalidEvent)
	}
	if seq := ev.GetSequence(); seq != s.Version+1 {
		return s, fmt.Errorf("%w: got sequence %d, run %q is at version %d and expects %d",
			ErrSequence, seq, s.RunID, s.Version, s.Version+1)
	}
	if s.Version > 0 {
		if ev.GetRunId() != s.RunID {
			return s, fmt.Errorf("%w: event for run %q applied to run %q", ErrInvalidEvent, ev.GetRunId(), s.RunID)
		}
		if Terminal(s.Status) {
			return s, fmt.Errorf("%w: run %q is %s and takes no more events", ErrTerminal, s.RunID, StatusName(s.Status))
		}
	}
	next, err := applyPayload(s, ev)
	if err != nil {
		return s, err
	}
	next.Version = ev.GetSequence()
	if t := ev.GetRecordedAt(); t != nil {
		next.UpdatedAt = t.AsTime()
	}
	return next, nil
}

// ApplyAll applies events in order; on an error it returns s unchanged.
func ApplyAll(s State, events []*reinv1.Event) (State, error) {
	next := s
	for _, ev := range events {
		var err error
		if next, err = Apply(next, ev); err != nil {
			return s, err
		}
	}
	return next, nil
}

func applyPayload(s State, ev *reinv1.Event) (State, error) {
	if s.Version == 0 {
		rs := ev.GetRunStarted()
		if rs == nil {
			return s, fmt.Errorf("%w: the first event of a run must be run_started, got %s", ErrInvalidEvent, PayloadName(ev))
		}
		return started(ev, rs)
	}
	switch p := ev.GetPayload().(type) {
	case *reinv1.Event_RunStarted:
		return s, fmt.Errorf("%w: run_started at sequence %d; only the first event may start a run", ErrInvalidEvent, ev.GetSequence())
	case *reinv1.Event_ModelRequested:
		if err := need(s, ev, reinv1.RunStatus_RUN_STATUS_RUNNING); err != nil {
			return s, err
		}
		// A resumed call repeats the step whose reply was lost; any other
		// call starts a new step.
		resumed := p.ModelRequested.GetResumed()
		if s.Waiting() {
			return s, fmt.Errorf("%w: model_requested while run %q waits for %d children", ErrIllegalTransition, s.RunID, len(s.Children))
		}
		if s.ModelInFlight != resumed {
			if resumed {
				return s, fmt.Errorf("%w: model_requested marked resumed, but no model call is in flight", ErrIllegalTransition)
			}
			return s, fmt.Errorf("%w: model_requested while a model call is in flight", ErrIllegalTransition)
		}
		if !resumed {
			s.Steps++
		}
		s.ModelInFlight = true
		s.Policy = nil
		// The messages people sent are in this call's context.
		s.SteersWaiting = 0
		if pr := p.ModelRequested.GetPrice(); pr != nil {
			s.Price = pr
		}
	case *reinv1.Event_ModelReturned:
		if !s.ModelInFlight {
			return s, fmt.Errorf("%w: model_returned without a model call in flight", ErrIllegalTransition)
		}
		s.ModelInFlight = false
		s.InputTokens += p.ModelReturned.GetUsage().GetInputTokens()
		s.OutputTokens += p.ModelReturned.GetUsage().GetOutputTokens()
		s.CacheWriteTokens += p.ModelReturned.GetUsage().GetCacheWriteInputTokens()
		s.CacheReadTokens += p.ModelReturned.GetUsage().GetCacheReadInputTokens()
		s.CostUSD += p.ModelReturned.GetCostUsd()
	case *reinv1.Event_ModelRetried:
		if err := need(s, ev, reinv1.RunStatus_RUN_STATUS_RUNNING); err != nil {
			return s, err
		}
		if !s.ModelInFlight {
			return s, fmt.Errorf("%w: model_retried without a model call in flight", ErrIllegalTransition)
		}
	case *reinv1.Event_ContextCompacted:
		if err := need(s, ev, reinv1.RunStatus_RUN_STATUS_RUNNING); err != nil {
			return s, err
		}
		if s.ModelInFlight {
			return s, fmt.Errorf("%w: context_compacted while a model call is in flight", ErrIllegalTransition)
		}
	case *reinv1.Event_DecisionRejected, *reinv1.Event_ToolRefused:
		if err := need(s, ev, reinv1.RunStatus_RUN_STATUS_RUNNING); err != nil {
			return s, err
		}
	case *reinv1.Event_ChecksCompleted:
		if err := need(s, ev, reinv1.RunStatus_RUN_STATUS_RUNNING); err != nil {
			return s, err
		}
		switch h := ChecksHash(p.ChecksCompleted); {
		case h == "":
			s.FailingChecks, s.FailingChecksRepeated = "", 0
		case h == s.FailingChecks:
			s.FailingChecksRepeated++
		default:
			s.FailingChecks, s.FailingChecksRepeated = h, 1
		}
	case *reinv1.Event_ToolRequested:
		if err := need(s, ev, reinv1.RunStatus_RUN_STATUS_RUNNING); err != nil {
			return s, err
		}
		tr := p.ToolRequested
		s.ToolCalls++
		// A new map for each call: a State is a value, and the states
		// before this one (a caller's, a snapshot's) keep their counts.
		calls := make(map[string]uint32, len(s.CallsByTool)+1)
		maps.Copy(calls, s.CallsByTool)
		calls[tr.GetTool()]++
		s.CallsByTool = calls
		s.OpenCall = &reinv1.ToolCall{Tool: tr.GetTool(), Arguments: tr.GetArguments(), CallId: tr.GetCallId()}
		s.OpenCallTier = tr.GetTier()
	case *reinv1.Event_ToolReturned:
		if err := need(s, ev, reinv1.RunStatus_RUN_STATUS_RUNNING); err != nil {
			return s, err
		}
		if e := p.ToolReturned.GetError(); e != "" {
			s.LastError = e
		}
		s.OpenCall, s.OpenCallTier = nil, reinv1.ToolTier_TOOL_TIER_UNSPECIFIED
	case *reinv1.Event_ApprovalRequested:
		if err := need(s, ev, reinv1.RunStatus_RUN_STATUS_RUNNING); err != nil {
			return s, err
		}
		if p.ApprovalRequested.GetProposal().GetProposalId() == "" {
			return s, fmt.Errorf("%w: approval_requested without a proposal id", ErrInvalidEvent)
		}
		s.Pending = &reinv1.PendingAction{Action: &reinv1.PendingAction_Proposal{Proposal: p.ApprovalRequested.GetProposal()}}
		s.OpenCall, s.OpenCallTier = nil, reinv1.ToolTier_TOOL_TIER_UNSPECIFIED
	case *reinv1.Event_ApprovalDecided:
		if err := need(s, ev, reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL); err != nil {
			return s, err
		}
		if id := p.ApprovalDecided.GetProposalId(); s.Pending.GetProposal() == nil || id != s.Pending.GetProposal().GetProposalId() {
			return s, fmt.Errorf("%w: approval_decided for proposal %q, but the pending proposal is %q",
				ErrIllegalTransition, id, s.Pending.GetProposal().GetProposalId())
		}
		if p.ApprovalDecided.GetApproved() {
			if err := s.checkApprover(ev, s.Pending.GetProposal(), true); err != nil {
				return s, err
			}
		}
		// A decided proposal is no longer pending: a second decision on it
		// is refused.
		if p.ApprovalDecided.GetApproved() {
			s.ApprovedWrite = s.Pending.GetProposal()
		} else {
			s.ApprovedWrite, s.WriteOperationID = nil, ""
		}
		s.Pending = nil
	case *reinv1.Event_WriteDispatched:
		if err := need(s, ev, reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL); err != nil {
			return s, err
		}
		wd := p.WriteDispatched
		switch {
		case s.ApprovedWrite == nil || s.ApprovedWrite.GetProposalId() != wd.GetProposalId() || s.Pending != nil:
			return s, fmt.Errorf("%w: write_dispatched for proposal %q, which is not approved", ErrIllegalTransition, wd.GetProposalId())
		case wd.GetOperationId() == "":
			return s, fmt.Errorf("%w: write_dispatched without an operation id", ErrInvalidEvent)
		case s.WriteOperationID != "" && s.WriteOperationID != wd.GetOperationId():
			return s, fmt.Errorf("%w: write_dispatched with key %q; proposal %q was dispatched with %q, and a second dispatch must reuse it",
				ErrIllegalTransition, wd.GetOperationId(), wd.GetProposalId(), s.WriteOperationID)
		}
		s.WriteOperationID = wd.GetOperationId()
	case *reinv1.Event_WriteCommitted, *reinv1.Event_WriteOutcomeUnknown, *reinv1.Event_WriteRefused:
		if err := need(s, ev, reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL); err != nil {
			return s, err
		}
		opID := ev.GetWriteCommitted().GetOperationId() + ev.GetWriteOutcomeUnknown().GetOperationId() + ev.GetWriteRefused().GetOperationId()
		if s.ApprovedWrite == nil || s.Pending != nil || opID != s.WriteOperationID {
			return s, fmt.Errorf("%w: %s for operation %q, but no write with that key is in flight", ErrIllegalTransition, PayloadName(ev), opID)
		}
		switch {
		case ev.GetWriteCommitted() != nil:
			// Applied. The workspace changed, so the checks may change too:
			// an earlier failure no longer counts as a repeat.
			s.ApprovedWrite, s.WriteOperationID = nil, ""
			s.FailingChecks, s.FailingChecksRepeated = "", 0
		case ev.GetWriteRefused() != nil:
			// Known not to be applied.
			s.ApprovedWrite, s.WriteOperationID = nil, ""
		default:
			// Unknown: the proposal waits for a person again, and for as
			// many approvals as before.
			s.Pending = &reinv1.PendingAction{Action: &reinv1.PendingAction_Proposal{Proposal: withoutApprovers(s.ApprovedWrite)}}
		}
	case *reinv1.Event_ModelThrottled:
		if err := need(s, ev, reinv1.RunStatus_RUN_STATUS_RUNNING); err != nil {
			return s, err
		}
	case *reinv1.Event_RunAdmitted:
		if err := need(s, ev, reinv1.RunStatus_RUN_STATUS_QUEUED); err != nil {
			return s, err
		}
		if d := p.RunAdmitted.GetDeadline(); d != nil {
			s.Deadline = d.AsTime()
		}
	case *reinv1.Event_PolicyDecided:
		return applyPolicyDecided(s, ev, p.PolicyDecided)
	case *reinv1.Event_ApprovalGiven:
		return applyApprovalGiven(s, ev, p.ApprovalGiven)
	case *reinv1.Event_InputRequested:
		if err := need(s, ev, reinv1.RunStatus_RUN_STATUS_RUNNING); err != nil {
			return s, err
		}
		if p.InputRequested.GetQuestion() == nil {
			return s, fmt.Errorf("%w: input_requested without a question", ErrInvalidEvent)
		}
		s.Pending = &reinv1.PendingAction{Action: &reinv1.PendingAction_Question{Question: p.InputRequested.GetQuestion()}}
	case *reinv1.Event_InputProvided:
		if err := need(s, ev, reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT); err != nil {
			return s, err
		}
	case *reinv1.Event_BudgetReached:
		// Allowed in any non-terminal status: a deadline passes while paused
		// too. One that pauses the run is the pause's pending action.
		if br := p.BudgetReached; br.GetRaiseBy() != nil {
			if err := need(s, ev, reinv1.RunStatus_RUN_STATUS_RUNNING); err != nil {
				return s, err
			}
			if id := br.GetChildRunId(); id != "" && !slices.ContainsFunc(s.Children, func(c ChildLoan) bool { return c.RunID == id }) {
				return s, fmt.Errorf("%w: budget_reached for child %q, which is not an open child of run %q", ErrInvalidEvent, id, s.RunID)
			}
			s.Pending = &reinv1.PendingAction{Action: &reinv1.PendingAction_Budget{Budget: &reinv1.BudgetPause{
				Limit: br.GetLimit(), Detail: br.GetDetail(), ExpiresAt: br.GetRaiseBy(), ChildRunId: br.GetChildRunId(),
				NextCallTokens: br.GetNextCallTokens(), NextCallCostUsd: br.GetNextCallCostUsd(),
			}}}
		}
	case *reinv1.Event_RunSteered:
		return applySteered(s, ev, p.RunSteered)
	case *reinv1.Event_BudgetRaised:
		return applyBudgetRaised(s, ev, p.BudgetRaised)
	case *reinv1.Event_ProposalRevised:
		return applyProposalRevised(s, ev, p.ProposalRevised)
	case *reinv1.Event_DelegationStarted:
		return applyDelegationStarted(s, ev, p.DelegationStarted)
	case *reinv1.Event_DelegationReturned:
		return applyDelegationReturned(s, ev, p.DelegationReturned)
	case *reinv1.Event_StatusChanged:
		return changed(s, p.StatusChanged)
	case *reinv1.Event_ToolChanged:
		return applyToolChanged(s, ev, p.ToolChanged)
	case *reinv1.Event_ToolAdopted:
		return applyToolAdopted(s, ev, p.ToolAdopted)
	case *reinv1.Event_RunTaken:
		// Only a running run is taken to be driven; the trace it names is
		// the run's own.
		if err := need(s, ev, reinv1.RunStatus_RUN_STATUS_RUNNING); err != nil {
			return s, err
		}
		if p.RunTaken.GetOwner() == "" {
			return s, fmt.Errorf("%w: run_taken without an owner", ErrInvalidEvent)
		}
		if id := p.RunTaken.GetTraceId(); id != s.TraceID {
			return s, fmt.Errorf("%w: run_taken names trace %q, but the run's trace is %q", ErrInvalidEvent, id, s.TraceID)
		}
	default:
		return s, fmt.Errorf("%w: event %d has no payload", ErrInvalidEvent, ev.GetSequence())
	}
	return s, nil
}

func started(ev *reinv1.Event, rs *reinv1.RunStarted) (State, error) {
	if ev.GetRunId() == "" {
		return State{}, fmt.Errorf("%w: run_started without a run id", ErrInvalidEvent)
	}
	if rs.GetContract() == nil {
		return State{}, fmt.Errorf("%w: run_started without a contract", ErrInvalidEvent)
	}
	s := State{
		RunID:       ev.GetRunId(),
		Status:      reinv1.RunStatus_RUN_STATUS_RUNNING,
		Contract:    rs.GetContract(),
		Principal:   rs.GetPrincipal(),
		Tenant:      rs.GetTenant(),
		RequestID:   rs.GetRequestId(),
		TraceID:     rs.GetTraceId(),
		TraceParent: rs.GetTraceParentSpanId(),
		DelegatedBy: rs.GetDelegatedBy(),

		PromptCacheKey: rs.GetPromptCacheKey(),
		ToolDigests:    rs.GetToolDigests(),
		PolicyDigest:   rs.GetPolicyDigest(),
	}
	if d := rs.GetDeadline(); d != nil {
		s.Deadline = d.AsTime()
	}
	if rs.GetQueued() {
		if rs.GetDelegatedBy() != nil {
			return State{}, fmt.Errorf("%w: run_started queues a delegated run; a child runs in its parent's slot", ErrInvalidEvent)
		}
		s.Status = reinv1.RunStatus_RUN_STATUS_QUEUED
	}
	if t := ev.GetRecordedAt(); t != nil {
		s.CreatedAt = t.AsTime()
	}
	return s, nil
}

func changed(s State, sc *reinv1.StatusChanged) (State, error) {
	from, to := sc.GetFrom(), sc.GetTo()
	if from != s.Status {
		return s, fmt.Errorf("%w: status_changed from %s, but run %q is %s",
			ErrIllegalTransition, StatusName(from), s.RunID, StatusName(s.Status))
	}
	if !Legal(from, to) {
		return s, fmt.Errorf("%w: %s → %s is not allowed", ErrIllegalTransition, StatusName(from), StatusName(to))
	}
	if s.WriteInFlight() && to != reinv1.RunStatus_RUN_STATUS_RUNNING {
		return s, fmt.Errorf("%w: %s while the write of operation %q is in flight; its outcome must be recorded first, try again in a moment",
			ErrIllegalTransition, StatusName(to), s.WriteOperationID)
	}
	if Paused(to) && s.ModelInFlight && !cutByDeadline(s, to) {
		return s, fmt.Errorf("%w: %s while a model call is in flight; record model_returned first", ErrIllegalTransition, StatusName(to))
	}
	switch to {
	case reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL:
		if s.Pending.GetProposal() == nil {
			return s, fmt.Errorf("%w: needs_approval without a pending proposal", ErrIllegalTransition)
		}
	case reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT:
		if s.Pending.GetQuestion() == nil {
			return s, fmt.Errorf("%w: needs_input without a pending question", ErrIllegalTransition)
		}
	case reinv1.RunStatus_RUN_STATUS_NEEDS_BUDGET:
		if s.Pending.GetBudget() == nil {
			return s, fmt.Errorf("%w: needs_budget without a budget_reached that pauses the run", ErrIllegalTransition)
		}
	case reinv1.RunStatus_RUN_STATUS_RUNNING:
		if s.WriteInFlight() {
			return s, fmt.Errorf("%w: running while the write of operation %q is in flight; record its outcome first", ErrIllegalTransition, s.WriteOperationID)
		}
		s.Pending = nil
		s.ApprovedWrite, s.WriteOperationID = nil, ""
	case reinv1.RunStatus_RUN_STATUS_COMPLETED:
		s.Result = sc.GetResult()
	case reinv1.RunStatus_RUN_STATUS_FAILED:
		if e := sc.GetError(); e != "" {
			s.LastError = e
		}
	}
	if Terminal(to) {
		s.Pending = nil
		s.ModelInFlight = false
	}
	s.Status = to
	s.StatusReason = sc.GetReason()
	return s, nil
}

func need(s State, ev *reinv1.Event, status reinv1.RunStatus) error {
	if s.Status != status {
		return fmt.Errorf("%w: %s needs a %s run; run %q is %s",
			ErrIllegalTransition, PayloadName(ev), StatusName(status), s.RunID, StatusName(s.Status))
	}
	return nil
}

// PayloadName is the snake_case name of an event's payload, such as
// "model_requested", or "none" when it has none.
func PayloadName(ev *reinv1.Event) string {
	if ev == nil {
		return "none"
	}
	fd := ev.ProtoReflect().WhichOneof(payloadOneof)
	if fd == nil {
		return "none"
	}
	return string(fd.Name())
}

var payloadOneof = (&reinv1.Event{}).ProtoReflect().Descriptor().Oneofs().ByName("payload")

// ChecksHash identifies a checks_completed's results (names, outcomes, exit
// codes and output): the SHA-256 (hex) of them, or "" when every check
// passed. Two failures with one hash are the same failure.
func ChecksHash(cc *reinv1.ChecksCompleted) string {
	failed := false
	var b strings.Builder
	for _, res := range cc.GetResults() {
		if !res.GetPassed() {
			failed = true
		}
		fmt.Fprintf(&b, "%q %t %d %q\n", res.GetName(), res.GetPassed(), res.GetExitCode(), res.GetOutputTail())
	}
	if !failed {
		return ""
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:])
}

// cutByDeadline says a pause is on the run's deadline, which cut the model
// call in flight: the only pause with a call in flight. The call is sent
// again, marked resumed, once a raise lets the run go on.
func cutByDeadline(s State, to reinv1.RunStatus) bool {
	return to == reinv1.RunStatus_RUN_STATUS_NEEDS_BUDGET && s.Pending.GetBudget().GetLimit() == "deadline"
}
