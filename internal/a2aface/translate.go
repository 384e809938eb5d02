package a2aface

import (
	"strconv"
	"strings"

	"github.com/a2aproject/a2a-go/v2/a2a"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// requestPrefix begins the request ID of a run a message started.
const requestPrefix = "a2a:"

// requestID is the StartRun request ID of a message: its context and its
// own ID, so that the same message sent again starts no second run.
func requestID(contextID, messageID string) string {
	return requestPrefix + strconv.Itoa(len(contextID)) + ":" + contextID + ":" + messageID
}

// contextOf is the context ID of a run: the one its starting message
// named, else the run's own ID (a run started on another face is a
// conversation of its own).
func contextOf(run *reinv1.Run) string {
	rest, ok := strings.CutPrefix(run.GetRequestId(), requestPrefix)
	if ok {
		n, tail, found := strings.Cut(rest, ":")
		if size, err := strconv.Atoi(n); found && err == nil && size > 0 && size < len(tail) {
			return tail[:size]
		}
	}
	return run.GetRunId()
}

// state is the A2A task state of a run status.
func state(st reinv1.RunStatus) a2a.TaskState {
	switch st {
	case reinv1.RunStatus_RUN_STATUS_QUEUED:
		return a2a.TaskStateSubmitted
	case reinv1.RunStatus_RUN_STATUS_RUNNING:
		return a2a.TaskStateWorking
	case reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT, reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL, reinv1.RunStatus_RUN_STATUS_NEEDS_BUDGET:
		return a2a.TaskStateInputRequired
	case reinv1.RunStatus_RUN_STATUS_COMPLETED:
		return a2a.TaskStateCompleted
	case reinv1.RunStatus_RUN_STATUS_FAILED, reinv1.RunStatus_RUN_STATUS_BUDGET_EXHAUSTED:
		return a2a.TaskStateFailed
	case reinv1.RunStatus_RUN_STATUS_DENIED:
		return a2a.TaskStateRejected
	case reinv1.RunStatus_RUN_STATUS_CANCELLED:
		return a2a.TaskStateCanceled
	}
	return a2a.TaskStateUnspecified
}

// interrupted reports whether a task in s waits for its client or has
// ended: where message/stream and message/send stop following it.
func interrupted(s a2a.TaskState) bool {
	return s.Terminal() || s == a2a.TaskStateInputRequired || s == a2a.TaskStateAuthRequired
}

// pendingMessage is what a paused run waits for, as an agent's message:
// the question as text, or the proposal or the budget pause as data (with
// "kind" approval or budget), so that a client can decide it.
func pendingMessage(info a2a.TaskInfoProvider, p *reinv1.PendingAction) *a2a.Message {
	switch {
	case p.GetQuestion() != nil:
		m := a2a.NewMessageForTask(a2a.MessageRoleAgent, info, a2a.NewTextPart(p.GetQuestion().GetText()))
		m.SetMeta("kind", "input")
		return m
	case p.GetProposal() != nil:
		return proposalMessage(info, p.GetProposal())
	case p.GetBudget() != nil:
		b := p.GetBudget()
		m := a2a.NewMessageForTask(a2a.MessageRoleAgent, info, a2a.NewDataPart(map[string]any{"kind": "budget", "limit": b.GetLimit(), "detail": b.GetDetail()}))
		m.SetMeta("kind", "budget")
		return m
	}
	return nil
}

func proposalMessage(info a2a.TaskInfoProvider, p *reinv1.Proposal) *a2a.Message {
	data := map[string]any{"kind": "approval", "proposal_id": p.GetProposalId(), "tool": p.GetTool(), "hash": p.GetHash()}
	if p.GetArguments() != nil {
		data["arguments"] = p.GetArguments().AsMap()
	}
	if p.GetPreview() != nil {
		data["preview"] = p.GetPreview().AsInterface()
	}
	m := a2a.NewMessageForTask(a2a.MessageRoleAgent, info,
		a2a.NewTextPart("Approve the write "+p.GetTool()+"? Reply with a data part {\"decision\": \"approve\", \"proposal_hash\": \""+p.GetHash()+"\"}, or deny with a reason, or revise with arguments."),
		a2a.NewDataPart(data))
	m.SetMeta("kind", "approval")
	return m
}

// resultArtifact is a completed run's result.
func resultArtifact(r *reinv1.FinalAnswer) *a2a.Artifact {
	a := &a2a.Artifact{ID: "result", Name: "result"}
	if r.GetText() != "" {
		a.Parts = append(a.Parts, a2a.NewTextPart(r.GetText()))
	}
	if r.GetData() != nil {
		a.Parts = append(a.Parts, a2a.NewDataPart(r.GetData().AsInterface()))
	}
	if len(a.Parts) == 0 {
		a.Parts = append(a.Parts, a2a.NewTextPart(""))
	}
	return a
}

// statusMessage is a text message from the agent, or nil for none.
func statusMessage(info a2a.TaskInfoProvider, text string) *a2a.Message {
	if text == "" {
		return nil
	}
	return a2a.NewMessageForTask(a2a.MessageRoleAgent, info, a2a.NewTextPart(text))
}

// task is a run as an A2A task, as of the sequence run.Version.
func task(run *reinv1.Run) *a2a.Task {
	t := &a2a.Task{ID: a2a.TaskID(run.GetRunId()), ContextID: contextOf(run)}
	t.Status = a2a.TaskStatus{State: state(run.GetStatus())}
	if ts := run.GetUpdatedAt(); ts != nil {
		at := ts.AsTime()
		t.Status.Timestamp = &at
	}
	switch {
	case run.GetPending() != nil:
		t.Status.Message = pendingMessage(t, run.GetPending())
	case run.GetStatus() == reinv1.RunStatus_RUN_STATUS_FAILED || run.GetStatus() == reinv1.RunStatus_RUN_STATUS_BUDGET_EXHAUSTED:
		t.Status.Message = statusMessage(t, firstOf(run.GetLastError(), run.GetStatusReason()))
	case state(run.GetStatus()).Terminal():
		t.Status.Message = statusMessage(t, run.GetStatusReason())
	}
	if r := run.GetResult(); r != nil {
		t.Artifacts = []*a2a.Artifact{resultArtifact(r)}
	}
	t.SetMeta(SequenceKey, run.GetVersion())
	t.SetMeta("rein.status", strings.TrimPrefix(run.GetStatus().String(), "RUN_STATUS_"))
	return t
}

func firstOf(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// translator turns a run's events, from its first, into A2A updates. It
// keeps what a status change's message needs (the pending proposal, the
// question, the budget pause), so that the updates of one sequence are
// the same on every stream.
type translator struct {
	info    a2a.TaskInfo
	pending *reinv1.PendingAction
}

// updates are the A2A updates of ev: a status update per status change
// (after the result's artifact update, when the run completed), none for
// the other events.
func (tr *translator) updates(ev *reinv1.Event) []a2a.Event {
	switch {
	case ev.GetApprovalRequested() != nil:
		tr.pending = &reinv1.PendingAction{Action: &reinv1.PendingAction_Proposal{Proposal: ev.GetApprovalRequested().GetProposal()}}
	case ev.GetProposalRevised() != nil:
		tr.pending = &reinv1.PendingAction{Action: &reinv1.PendingAction_Proposal{Proposal: ev.GetProposalRevised().GetProposal()}}
	case ev.GetInputRequested() != nil:
		tr.pending = &reinv1.PendingAction{Action: &reinv1.PendingAction_Question{Question: ev.GetInputRequested().GetQuestion()}}
	case ev.GetBudgetReached() != nil:
		b := ev.GetBudgetReached()
		tr.pending = &reinv1.PendingAction{Action: &reinv1.PendingAction_Budget{Budget: &reinv1.BudgetPause{Limit: b.GetLimit(), Detail: b.GetDetail()}}}
	}
	sc := ev.GetStatusChanged()
	if sc == nil {
		return nil
	}
	s := state(sc.GetTo())
	var msg *a2a.Message
	var out []a2a.Event
	switch {
	case s == a2a.TaskStateInputRequired:
		msg = pendingMessage(tr.info, tr.pending)
	case sc.GetTo() == reinv1.RunStatus_RUN_STATUS_COMPLETED && sc.GetResult() != nil:
		art := &a2a.TaskArtifactUpdateEvent{TaskID: tr.info.TaskID, ContextID: tr.info.ContextID, Artifact: resultArtifact(sc.GetResult()), LastChunk: true}
		art.SetMeta(SequenceKey, ev.GetSequence())
		out = append(out, art)
	case s == a2a.TaskStateFailed:
		msg = statusMessage(tr.info, firstOf(sc.GetError(), sc.GetReason()))
	case s.Terminal():
		msg = statusMessage(tr.info, sc.GetReason())
	}
	if s != a2a.TaskStateInputRequired {
		tr.pending = nil
	}
	up := a2a.NewStatusUpdateEvent(tr.info, s, msg)
	if ts := ev.GetRecordedAt(); ts != nil {
		at := ts.AsTime()
		up.Status.Timestamp = &at
	}
	up.SetMeta(SequenceKey, ev.GetSequence())
	up.SetMeta("rein.status", strings.TrimPrefix(sc.GetTo().String(), "RUN_STATUS_"))
	return append(out, up)
}
