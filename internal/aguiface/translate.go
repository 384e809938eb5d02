package aguiface

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
)

// event is one AG-UI event: its type and fields, as the wire's JSON.
type event map[string]any

// translator turns a run's events, in sequence order, into AG-UI events.
// What it emits for an event depends only on that event and the ones
// before it, so the events of one sequence are the same on every stream:
// that is what lets a stream resume in the middle of them.
type translator struct {
	runID, threadID string

	state runstate.State
	view  map[string]any // the run's state as AG-UI's state: State.Proto in JSON
	// step is the step whose STEP_STARTED was sent and whose
	// STEP_FINISHED was not; 0 for none.
	step uint32
	// output holds the messages of streamed model output begun and not
	// ended, by messageId; ended those whose end was sent.
	output, ended map[string]bool
}

func newTranslator(runID, threadID string) *translator {
	t := &translator{runID: runID, threadID: threadID, output: map[string]bool{}, ended: map[string]bool{}}
	t.view = project(t.state)
	return t
}

// project is the state AG-UI clients see: the run as GetRun returns it
// (without its contract), in protojson's camelCase.
func project(s runstate.State) map[string]any {
	return asValue(s.Proto(false)).(map[string]any)
}

// asValue is m in protojson, decoded into plain JSON values.
func asValue(m proto.Message) any {
	b, err := protojson.Marshal(m)
	if err != nil {
		return map[string]any{}
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return map[string]any{}
	}
	return v
}

// opening is what a stream sends before the first event after its resume
// point: RUN_STARTED, the state as of that point, and the step open there
// (re-opened so that its STEP_FINISHED on this stream has a start). A run
// that had already ended there gets its end again, so that every stream
// is a whole AG-UI run.
func (t *translator) opening() []event {
	out := []event{
		{"type": "RUN_STARTED", "threadId": t.threadID, "runId": t.runID},
		{"type": "STATE_SNAPSHOT", "snapshot": t.view},
	}
	if t.step > 0 {
		out = append(out, event{"type": "STEP_STARTED", "stepName": stepName(t.step)})
	}
	if runstate.Terminal(t.state.Status) {
		out = append(out, t.end(t.state.Status, t.state.StatusReason, t.state.LastError, t.state.Result)...)
	}
	return out
}

// apply folds ev into the run's state and returns its AG-UI events. An
// event the fold refuses (it cannot be, for an event the store holds) is
// returned as its error and changes nothing.
func (t *translator) apply(ev *reinv1.Event) ([]event, error) {
	before := t.state
	next, err := runstate.Apply(t.state, ev)
	if err != nil {
		return nil, fmt.Errorf("event %d of run %s: %w", ev.GetSequence(), t.runID, err)
	}
	t.state = next
	var out []event
	seq := strconv.FormatUint(ev.GetSequence(), 10)
	switch p := ev.GetPayload().(type) {
	case *reinv1.Event_ModelRequested:
		out = append(out, t.closeStep()...)
		t.step = p.ModelRequested.GetStep()
		if t.step == 0 {
			t.step = next.Steps
		}
		out = append(out, event{"type": "STEP_STARTED", "stepName": stepName(t.step)})
	case *reinv1.Event_ModelReturned:
		out = append(out, t.closeOutput()...)
		if a := p.ModelReturned.GetDecision().GetFinalAnswer(); a != nil && a.GetText() != "" {
			id := t.runID + "-answer-" + seq
			out = append(out,
				event{"type": "TEXT_MESSAGE_START", "messageId": id, "role": "assistant"},
				event{"type": "TEXT_MESSAGE_CONTENT", "messageId": id, "delta": a.GetText()},
				event{"type": "TEXT_MESSAGE_END", "messageId": id})
		}
	case *reinv1.Event_ToolRequested:
		r := p.ToolRequested
		args, _ := protojson.Marshal(r.GetArguments())
		if r.GetArguments() == nil {
			args = []byte("{}")
		}
		id := t.callID(r.GetCallId(), seq)
		out = append(out,
			event{"type": "TOOL_CALL_START", "toolCallId": id, "toolCallName": r.GetTool()},
			event{"type": "TOOL_CALL_ARGS", "toolCallId": id, "delta": string(args)},
			event{"type": "TOOL_CALL_END", "toolCallId": id})
	case *reinv1.Event_ToolRefused:
		out = append(out, t.result(p.ToolRefused.GetCallId(), seq, "refused: "+p.ToolRefused.GetReason()))
	case *reinv1.Event_ToolReturned:
		r := p.ToolReturned
		content := "error: " + r.GetError()
		if r.GetError() == "" {
			b, _ := protojson.Marshal(r.GetOutput())
			content = string(b)
		}
		out = append(out, t.result(r.GetCallId(), seq, content))
	case *reinv1.Event_ApprovalRequested:
		out = append(out, approvalRequested(t.runID, p.ApprovalRequested.GetProposal()))
	case *reinv1.Event_ProposalRevised:
		out = append(out, approvalRequested(t.runID, p.ProposalRevised.GetProposal()))
	case *reinv1.Event_ApprovalDecided:
		d := p.ApprovalDecided
		out = append(out, event{"type": "CUSTOM", "name": "rein.approval_decided", "value": map[string]any{
			"runId": t.runID, "proposalId": d.GetProposalId(), "approved": d.GetApproved(), "reason": d.GetReason(), "endRun": d.GetEndRun(), "by": ev.GetActor(),
		}})
	case *reinv1.Event_InputRequested:
		out = append(out, event{"type": "CUSTOM", "name": "rein.input_requested", "value": map[string]any{
			"runId": t.runID, "question": p.InputRequested.GetQuestion().GetText(),
		}})
	case *reinv1.Event_WriteCommitted:
		b, _ := protojson.Marshal(p.WriteCommitted.GetReceipt())
		out = append(out, t.result(before.ApprovedWrite.GetCallId(), seq, string(b)))
	case *reinv1.Event_WriteRefused:
		out = append(out, t.result(before.ApprovedWrite.GetCallId(), seq, "refused: "+p.WriteRefused.GetReason()))
	}
	view := project(next)
	if d := diff("", t.view, view, nil); len(d) > 0 {
		out = append(out, event{"type": "STATE_DELTA", "delta": d})
	}
	t.view = view
	if sc := ev.GetStatusChanged(); sc != nil && runstate.Terminal(sc.GetTo()) && !runstate.Terminal(before.Status) {
		out = append(out, t.end(sc.GetTo(), sc.GetReason(), sc.GetError(), sc.GetResult())...)
	}
	return out, nil
}

// output returns the AG-UI events of a piece of the model call in flight:
// a text message per call attempt, begun with its first piece and ended
// with its last. These carry no sequence: the call's reply is recorded
// whole in model_returned.
func (t *translator) outputEvents(o *reinv1.ModelOutput) []event {
	id := fmt.Sprintf("%s-output-%d-%d", t.runID, o.GetRequested(), o.GetAttempt())
	if o.GetResumed() {
		id += "-resumed"
	}
	if t.ended[id] {
		return nil
	}
	var out []event
	if !t.output[id] {
		t.output[id] = true
		out = append(out, event{"type": "TEXT_MESSAGE_START", "messageId": id, "role": "assistant", "name": "rein.model_output"})
	}
	if o.GetText() != "" {
		out = append(out, event{"type": "TEXT_MESSAGE_CONTENT", "messageId": id, "delta": o.GetText()})
	}
	if o.GetDone() || o.GetTruncated() {
		delete(t.output, id)
		t.ended[id] = true
		out = append(out, event{"type": "TEXT_MESSAGE_END", "messageId": id})
	}
	return out
}

// closeOutput ends the streamed output messages still open.
func (t *translator) closeOutput() []event {
	var out []event
	for id := range t.output {
		out = append(out, event{"type": "TEXT_MESSAGE_END", "messageId": id})
		t.ended[id] = true
	}
	clear(t.output)
	return out
}

// closeStep ends the open step, if any.
func (t *translator) closeStep() []event {
	if t.step == 0 {
		return nil
	}
	name := stepName(t.step)
	t.step = 0
	return []event{{"type": "STEP_FINISHED", "stepName": name}}
}

// end closes what is open and ends the AG-UI run: RUN_FINISHED for a run
// completed (its answer as the result) or cancelled, RUN_ERROR with the
// status as its code for every other end.
func (t *translator) end(status reinv1.RunStatus, reason, errText string, result *reinv1.FinalAnswer) []event {
	out := append(t.closeOutput(), t.closeStep()...)
	switch status {
	case reinv1.RunStatus_RUN_STATUS_COMPLETED:
		e := event{"type": "RUN_FINISHED", "threadId": t.threadID, "runId": t.runID, "outcome": map[string]any{"type": "success"}}
		if result != nil {
			e["result"] = asValue(result)
		}
		return append(out, e)
	case reinv1.RunStatus_RUN_STATUS_CANCELLED:
		return append(out, event{"type": "RUN_FINISHED", "threadId": t.threadID, "runId": t.runID, "outcome": map[string]any{"type": "cancelled"}})
	}
	msg := strings.TrimSpace(strings.Join(nonEmpty(reason, errText), ": "))
	if msg == "" {
		msg = "the run ended " + runstate.StatusName(status)
	}
	return append(out, event{"type": "RUN_ERROR", "message": msg, "code": runstate.StatusName(status)})
}

// result is a TOOL_CALL_RESULT for the call callID (the event's own ID
// when the model gave none).
func (t *translator) result(callID, seq, content string) event {
	return event{"type": "TOOL_CALL_RESULT", "messageId": t.runID + "-result-" + seq, "toolCallId": t.callID(callID, seq), "content": content, "role": "tool"}
}

func (t *translator) callID(callID, seq string) string {
	if callID != "" {
		return callID
	}
	return t.runID + "-call-" + seq
}

// approvalRequested is the CUSTOM event of a write waiting for approval:
// what a page needs to show it and to approve it (DecideApproval with the
// proposal's ID and hash).
func approvalRequested(runID string, p *reinv1.Proposal) event {
	v := map[string]any{
		"runId": runID, "proposalId": p.GetProposalId(), "tool": p.GetTool(), "hash": p.GetHash(), "callId": p.GetCallId(),
		"arguments": asValue(p.GetArguments()), "preview": nil, "endsAt": nil,
	}
	if p.GetArguments() == nil {
		v["arguments"] = map[string]any{}
	}
	if p.GetPreview() != nil {
		v["preview"] = asValue(p.GetPreview())
	}
	if p.GetExpiresAt() != nil {
		v["endsAt"] = p.GetExpiresAt().AsTime().UTC().Format("2006-01-02T15:04:05.999999999Z07:00")
	}
	return event{"type": "CUSTOM", "name": "rein.approval_requested", "value": v}
}

func stepName(step uint32) string { return "step " + strconv.FormatUint(uint64(step), 10) }

func nonEmpty(ss ...string) []string {
	var out []string
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// diff appends to ops the JSON Patch (RFC 6902) that turns a into b:
// objects are compared member by member, anything else is replaced whole.
func diff(path string, a, b any, ops []map[string]any) []map[string]any {
	ao, aok := a.(map[string]any)
	bo, bok := b.(map[string]any)
	if !aok || !bok {
		if !jsonEqual(a, b) {
			ops = append(ops, map[string]any{"op": "replace", "path": path, "value": b})
		}
		return ops
	}
	for _, k := range sortedKeys(ao) {
		if _, ok := bo[k]; !ok {
			ops = append(ops, map[string]any{"op": "remove", "path": path + "/" + pointerToken(k)})
		}
	}
	for _, k := range sortedKeys(bo) {
		av, ok := ao[k]
		if !ok {
			ops = append(ops, map[string]any{"op": "add", "path": path + "/" + pointerToken(k), "value": bo[k]})
			continue
		}
		ops = diff(path+"/"+pointerToken(k), av, bo[k], ops)
	}
	return ops
}

// pointerToken escapes a member name for a JSON Pointer (RFC 6901).
func pointerToken(k string) string {
	return strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func sortedKeys(m map[string]any) []string { return slices.Sorted(maps.Keys(m)) }
