package aguiface

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// runAgentInput is the part of AG-UI's RunAgentInput the face reads.
type runAgentInput struct {
	ThreadID       string          `json:"threadId"`
	RunID          string          `json:"runId"`
	State          json.RawMessage `json:"state"`
	ForwardedProps json.RawMessage `json:"forwardedProps"`
}

// serveTask starts the catalog task name with the inputs of a
// RunAgentInput and streams the run. The inputs are forwardedProps.inputs
// when it is given, else the state when it is an object. The client's
// runId is the start's idempotency key: the same POST again streams the
// run it started, never a second one.
func (f *Face) serveTask(w http.ResponseWriter, r *http.Request, name string) {
	if name == "" || strings.Contains(name, "/") {
		http.Error(w, "name one task: POST "+TasksPath+"TASK", http.StatusNotFound)
		return
	}
	var in runAgentInput
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		http.Error(w, "the body is not AG-UI's RunAgentInput (JSON with threadId, runId, messages, …): "+err.Error(), http.StatusBadRequest)
		return
	}
	if in.ThreadID == "" || in.RunID == "" {
		http.Error(w, "the RunAgentInput needs a threadId and a runId", http.StatusBadRequest)
		return
	}
	inputs, err := taskInputs(in)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	started, err := f.opts.Runs.StartRun(out(r.Context(), r), &reinv1.StartRunRequest{RequestId: "agui-" + in.RunID, Task: name, Inputs: inputs})
	if err != nil {
		refuse(w, err)
		return
	}
	f.stream(w, r, started.GetRun().GetRunId(), in.ThreadID, point{})
}

// taskInputs are the run's inputs from a RunAgentInput: forwardedProps'
// member inputs, else the state when it is an object; nil for none.
func taskInputs(in runAgentInput) (*structpb.Struct, error) {
	var props map[string]json.RawMessage
	if len(in.ForwardedProps) > 0 && json.Unmarshal(in.ForwardedProps, &props) == nil {
		if raw, ok := props["inputs"]; ok {
			return asStruct(raw, "forwardedProps.inputs")
		}
	}
	if len(in.State) > 0 && in.State[0] == '{' {
		return asStruct(in.State, "state")
	}
	return nil, nil
}

func asStruct(raw json.RawMessage, field string) (*structpb.Struct, error) {
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, errors.New(field + " must be a JSON object of the task's inputs: " + err.Error())
	}
	s, err := structpb.NewStruct(m)
	if err != nil {
		return nil, errors.New(field + ": " + err.Error())
	}
	return s, nil
}
