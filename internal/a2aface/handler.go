package a2aface

import (
	"context"
	"errors"
	"io"
	"iter"
	"strconv"
	"strings"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// The bounds of the IDs a message may carry: its context ID and its own
// ID become the run's request ID, which holds 256 bytes.
const (
	maxContextID = 128
	maxMessageID = 100
)

// handler is the face's a2asrv.RequestHandler: each method one or a few
// RunService calls with the caller's credentials.
type handler struct {
	face *Face
}

func (h *handler) runs() reinv1.RunServiceClient { return h.face.opts.Runs }

// GetTask reads a run as a task.
func (h *handler) GetTask(ctx context.Context, req *a2a.GetTaskRequest) (*a2a.Task, error) {
	run, err := h.getRun(ctx, string(req.ID))
	if err != nil {
		return nil, err
	}
	return task(run), nil
}

func (h *handler) getRun(ctx context.Context, id string) (*reinv1.Run, error) {
	if id == "" {
		return nil, invalid("name the task: its id")
	}
	resp, err := h.runs().GetRun(out(ctx), &reinv1.GetRunRequest{RunId: id})
	if err != nil {
		return nil, fromStatus(err)
	}
	return resp.GetRun(), nil
}

// CancelTask cancels a run.
func (h *handler) CancelTask(ctx context.Context, req *a2a.CancelTaskRequest) (*a2a.Task, error) {
	if req.ID == "" {
		return nil, invalid("name the task to cancel: its id")
	}
	run, err := h.getRun(ctx, string(req.ID))
	if err != nil {
		return nil, err
	}
	if state(run.GetStatus()).Terminal() {
		return nil, a2a.NewError(a2a.ErrTaskNotCancelable, "task "+run.GetRunId()+" has ended ("+state(run.GetStatus()).String()+"); there is nothing to cancel")
	}
	reason, _ := req.Metadata["reason"].(string)
	resp, err := h.runs().CancelRun(out(ctx), &reinv1.CancelRunRequest{RunId: run.GetRunId(), Reason: reason})
	if err != nil {
		return nil, fromStatus(err)
	}
	return task(resp.GetRun()), nil
}

// SendMessage starts a run or replies to one, then follows it until it
// pauses or ends (or the face's Wait passes, or the request asked to
// return at once) and answers with the task.
func (h *handler) SendMessage(ctx context.Context, req *a2a.SendMessageRequest) (a2a.SendMessageResult, error) {
	run, err := h.deliver(ctx, req)
	if err != nil {
		return nil, err
	}
	if req.Config != nil && req.Config.ReturnImmediately {
		return task(run), nil
	}
	wctx, cancel := context.WithTimeout(ctx, h.face.opts.Wait)
	defer cancel()
	for range h.follow(wctx, run, run.GetVersion(), true) {
	}
	// Read with the request's own context: the wait may have run out.
	if now, err := h.getRun(ctx, run.GetRunId()); err == nil {
		run = now
	}
	return task(run), nil
}

// SendStreamingMessage starts a run or replies to one and streams it: the
// task, then its updates until it pauses or ends.
func (h *handler) SendStreamingMessage(ctx context.Context, req *a2a.SendMessageRequest) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		run, err := h.deliver(ctx, req)
		if err != nil {
			yield(nil, err)
			return
		}
		if !yield(task(run), nil) {
			return
		}
		for ev, err := range h.follow(ctx, run, run.GetVersion(), true) {
			if !yield(ev, err) || err != nil {
				return
			}
		}
	}
}

// SubscribeToTask streams a run: the task as it stands, then every update
// after the sequence the AfterHeader service parameter names (0: from the
// first), until the run ends.
func (h *handler) SubscribeToTask(ctx context.Context, req *a2a.SubscribeToTaskRequest) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		after, err := afterSequence(ctx)
		if err != nil {
			yield(nil, err)
			return
		}
		run, err := h.getRun(ctx, string(req.ID))
		if err != nil {
			yield(nil, err)
			return
		}
		if !yield(task(run), nil) {
			return
		}
		for ev, err := range h.follow(ctx, run, after, false) {
			if !yield(ev, err) || err != nil {
				return
			}
		}
	}
}

// afterSequence is the resubscription's AfterHeader, 0 when not given.
func afterSequence(ctx context.Context) (uint64, error) {
	cc, ok := a2asrv.CallContextFrom(ctx)
	if !ok {
		return 0, nil
	}
	v, ok := cc.ServiceParams().Get(AfterHeader)
	if !ok || len(v) == 0 {
		return 0, nil
	}
	n, err := strconv.ParseUint(strings.TrimSpace(v[0]), 10, 64)
	if err != nil {
		return 0, invalid(AfterHeader + " " + strconv.Quote(v[0]) + " is not a sequence: give the " + SequenceKey + " of the last update seen (a whole number, 0 for the start)")
	}
	return n, nil
}

// follow yields the updates of run's events after the sequence after,
// until the run ends (or, with stopAtPause, pauses for its client). It
// reads the run's events from the first, so that a status change's
// message is the same on every stream, and yields only those after.
func (h *handler) follow(ctx context.Context, run *reinv1.Run, after uint64, stopAtPause bool) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		ended := func(s a2a.TaskState) bool { return s.Terminal() || (stopAtPause && interrupted(s)) }
		if after >= run.GetVersion() && ended(state(run.GetStatus())) {
			return
		}
		stream, err := h.runs().WatchRun(out(ctx), &reinv1.WatchRunRequest{RunId: run.GetRunId()})
		if err != nil {
			yield(nil, fromStatus(err))
			return
		}
		tr := &translator{info: a2a.TaskInfo{TaskID: a2a.TaskID(run.GetRunId()), ContextID: contextOf(run)}}
		for {
			resp, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				if ctx.Err() == nil {
					yield(nil, fromStatus(err))
				}
				return
			}
			ev := resp.GetEvent()
			ups := tr.updates(ev)
			if ev.GetSequence() <= after {
				continue
			}
			for _, up := range ups {
				if !yield(up, nil) {
					return
				}
			}
			if sc := ev.GetStatusChanged(); sc != nil && ended(state(sc.GetTo())) {
				return
			}
		}
	}
}

// deliver starts the run a message asks for, or gives a reply to the run
// it names, and returns the run as the call left it.
func (h *handler) deliver(ctx context.Context, req *a2a.SendMessageRequest) (*reinv1.Run, error) {
	m := req.Message
	if m == nil {
		return nil, invalid("the request has no message")
	}
	if m.ID == "" || len(m.ID) > maxMessageID {
		return nil, invalid("the message needs a messageId of 1 to " + strconv.Itoa(maxMessageID) + " bytes")
	}
	if len(m.ContextID) > maxContextID {
		return nil, invalid("the contextId is longer than " + strconv.Itoa(maxContextID) + " bytes")
	}
	if m.Role != "" && m.Role != a2a.MessageRoleUser {
		return nil, invalid("a message to rein comes from the user role")
	}
	for _, p := range m.Parts {
		switch p.Content.(type) {
		case a2a.Text, a2a.Data:
		default:
			return nil, a2a.NewError(a2a.ErrUnsupportedContentType, "rein takes text and data parts; a file (raw or url) part is not accepted")
		}
	}
	if m.TaskID != "" {
		return h.reply(ctx, m)
	}
	return h.start(ctx, req)
}

// start starts a run of the skill the message names with the inputs its
// parts carry.
func (h *handler) start(ctx context.Context, req *a2a.SendMessageRequest) (*reinv1.Run, error) {
	m := req.Message
	skill, _ := m.Metadata[SkillKey].(string)
	if skill == "" {
		skill, _ = req.Metadata[SkillKey].(string)
	}
	var chosen *reinv1.Task
	if skill == "" {
		tasks, err := h.runs().ListTasks(out(ctx), &reinv1.ListTasksRequest{})
		if err != nil {
			return nil, fromStatus(err)
		}
		if len(tasks.GetTasks()) != 1 {
			return nil, invalid("name the skill in the message's metadata \"" + SkillKey + "\": the card has " + strconv.Itoa(len(tasks.GetTasks())) + " skills")
		}
		chosen = tasks.GetTasks()[0]
	} else {
		got, err := h.runs().GetTask(out(ctx), &reinv1.GetTaskRequest{Name: skill})
		if err != nil {
			return nil, invalid("skill " + strconv.Quote(skill) + ": " + fromStatus(err).Error())
		}
		chosen = got.GetTask()
	}
	inputs, err := inputsOf(m.Parts, chosen)
	if err != nil {
		return nil, err
	}
	contextID := m.ContextID
	if contextID == "" {
		contextID = a2a.NewContextID()
	}
	started, err := h.runs().StartRun(out(ctx), &reinv1.StartRunRequest{RequestId: requestID(contextID, m.ID), Task: chosen.GetName(), Inputs: inputs})
	if err != nil {
		return nil, fromStatus(err)
	}
	return started.GetRun(), nil
}

// inputsOf are a run's inputs from a message's parts: its one data part
// (an object), or its text for a skill whose inputs are one text field.
func inputsOf(parts a2a.ContentParts, t *reinv1.Task) (*structpb.Struct, error) {
	var data []map[string]any
	var text []string
	for _, p := range parts {
		switch c := p.Content.(type) {
		case a2a.Data:
			obj, ok := c.Value.(map[string]any)
			if !ok {
				return nil, invalid("a data part carries the skill's inputs as a JSON object")
			}
			data = append(data, obj)
		case a2a.Text:
			text = append(text, string(c))
		}
	}
	switch {
	case len(data) > 1:
		return nil, invalid("give the skill's inputs in one data part, not " + strconv.Itoa(len(data)))
	case len(data) == 1:
		s, err := structpb.NewStruct(data[0])
		if err != nil {
			return nil, invalid("the data part: " + err.Error())
		}
		return s, nil
	case len(text) > 0:
		field, ok := textField(t)
		if !ok {
			return nil, invalid("skill " + t.GetName() + " takes its inputs as a data part (a JSON object; see the card's input schemas): text alone goes only to a skill whose input is one text field")
		}
		return structpb.NewStruct(map[string]any{field: strings.Join(text, "\n")})
	}
	return nil, nil
}

// textField is the one string property of t's input schema, if that is
// all it has.
func textField(t *reinv1.Task) (string, bool) {
	props := t.GetInputSchema().GetFields()["properties"].GetStructValue().GetFields()
	if len(props) != 1 {
		return "", false
	}
	for name, v := range props {
		if v.GetStructValue().GetFields()["type"].GetStringValue() == "string" {
			return name, true
		}
	}
	return "", false
}
