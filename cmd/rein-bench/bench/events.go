package bench

import (
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// eventBytes is the marshalled size the append and fold scenarios pad their
// events to.
const eventBytes = 300

const (
	hash64 = "9f2c4e1a7b3d5f608e1c2a4b6d8f0e1a3c5e7f9b0d2f4a6c8e0b1d3f5a7c9e1b"
	hashTS = "0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9"
)

// benchContract is a small valid contract for runs the bench creates
// directly in the store (not through the engine).
func benchContract() *reinv1.TaskContract {
	return &reinv1.TaskContract{
		Goal:   "benchmark",
		Tools:  []*reinv1.ToolGrant{{Name: "read_file", Tier: reinv1.ToolTier_TOOL_TIER_READ}},
		Budget: &reinv1.Budget{MaxSteps: 1 << 30},
		Model:  &reinv1.ModelSpec{Provider: "script", Name: "bench"},
	}
}

// runStarted is the first event of a run created by the bench.
func runStarted(runID string, at *timestamppb.Timestamp) *reinv1.Event {
	return &reinv1.Event{
		RunId: runID, Sequence: 1, RecordedAt: at, Actor: "principal:bench",
		Payload: &reinv1.Event_RunStarted{RunStarted: &reinv1.RunStarted{Contract: benchContract(), Principal: "bench"}},
	}
}

// cycle is the order of a tool-call step's events; the fold accepts it
// repeated from any run that is running with no model call in flight.
const cycleLen = 4

// stepEvent is the event at position seq (≥ 2) of a run whose events after
// run_started repeat model_requested, model_returned, tool_requested,
// tool_returned, each padded to eventBytes. pairs limits the cycle to
// model_requested/model_returned.
func stepEvent(runID string, seq uint64, at *timestamppb.Timestamp, pairs bool) *reinv1.Event {
	i := seq - 2
	kind := i % cycleLen
	if pairs {
		kind = i % 2
	}
	step := uint32(i/cycleLen) + 1
	if pairs {
		step = uint32(i/2) + 1
	}
	callID := fmt.Sprintf("call_%d", step)
	ev := &reinv1.Event{RunId: runID, Sequence: seq, RecordedAt: at}
	var setPad func(string)
	switch kind {
	case 0:
		mr := &reinv1.ModelRequested{
			Step: step, InputHash: hash64, InputTokens: 1200 + uint64(step), MaxOutputTokens: 4096,
			Model: "script/bench", PromptVersion: "rein-prompt-1", ToolSetHash: hashTS,
		}
		ev.Actor, ev.Payload = "harness", &reinv1.Event_ModelRequested{ModelRequested: mr}
		setPad = func(s string) { mr.Model = "script/bench" + s }
	case 1:
		args := map[string]*structpb.Value{"path": structpb.NewStringValue(fmt.Sprintf("src/pkg/file_%d.go", step))}
		tc := &reinv1.ToolCall{Tool: "read_file", CallId: callID, Arguments: &structpb.Struct{Fields: args}}
		ev.Actor, ev.Payload = "model", &reinv1.Event_ModelReturned{ModelReturned: &reinv1.ModelReturned{
			Decision: &reinv1.Decision{Action: &reinv1.Decision_ToolCall{ToolCall: tc}},
			Usage:    &reinv1.Usage{InputTokens: 1200, OutputTokens: 40},
		}}
		setPad = func(s string) { args["reason"] = structpb.NewStringValue("need to read it" + s) }
	case 2:
		args := map[string]*structpb.Value{"path": structpb.NewStringValue(fmt.Sprintf("src/pkg/file_%d.go", step))}
		ev.Actor, ev.Payload = "harness", &reinv1.Event_ToolRequested{ToolRequested: &reinv1.ToolRequested{
			CallId: callID, Tool: "read_file", Arguments: &structpb.Struct{Fields: args}, Tier: reinv1.ToolTier_TOOL_TIER_READ,
		}}
		setPad = func(s string) { args["reason"] = structpb.NewStringValue("need to read it" + s) }
	default:
		tr := &reinv1.ToolReturned{CallId: callID, Tool: "read_file"}
		ev.Actor, ev.Payload = "tool:read_file", &reinv1.Event_ToolReturned{ToolReturned: tr}
		setPad = func(s string) {
			text := "package pkg\n\nfunc F() {}\n" + s
			tr.Output, tr.OutputBytes = structpb.NewStringValue(text), uint64(len(text))
		}
	}
	pad(ev, eventBytes, setPad)
	return ev
}

// pad grows one string of ev (through set) until ev marshals to size bytes,
// or as close below as the field's length prefix allows.
func pad(ev *reinv1.Event, size int, set func(string)) {
	set("")
	n := size - proto.Size(ev)
	for ; n > 0; n-- {
		set(strings.Repeat("x", n))
		if proto.Size(ev) <= size {
			return
		}
	}
	set("")
}

// benchTime is the recorded_at of the bench's synthetic events.
func benchTime() *timestamppb.Timestamp {
	return timestamppb.New(time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.UTC))
}
