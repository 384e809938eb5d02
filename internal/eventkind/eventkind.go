// Package eventkind declares, once for each kind of event a run records (each
// payload of the Event oneof), how rein describes it: the line a person reads
// (Summary, Tone), what it adds to the run's trace (Span), what rein's metrics
// count of it (Metric) and what the model reads of it (Transcript). The CLI,
// internal/telemetry, internal/metrics and internal/harness consult a kind's
// declaration rather than switch over the payload types, so a new kind is
// declared in the proto and in kinds.go (and in the console's
// web/src/format.ts, which a test keeps in step: eventkind_test.go).
//
// A declaration says what each reader does with the kind, and says so
// explicitly where that is nothing (NoCall, Uncounted, Unread, Plain): a
// kind left undeclared, or a part of it left out, fails the package's
// tests. What the readers do with a span, a count or a turn (the spans'
// shape, the metrics' labels, the transcript's hashing) stays with them.
//
// The fold, which applies an event to a run's state, is not here: it is
// internal/runstate's Apply, the one place that does that.
package eventkind

import (
	"fmt"
	"reflect"

	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/protobuf/reflect/protoreflect"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/model"
)

// Kind is the declaration of one kind of event.
type Kind struct {
	// Name is the payload's field name in the Event oneof ("tool_returned"),
	// as runstate.PayloadName gives it.
	Name string
	// Summary is an event of the kind as a line for a person, after its
	// time, sequence and name (rein logs, rein watch, rein run).
	Summary func(ev *reinv1.Event) string
	// Tone is how a terminal colours the event's line.
	Tone func(ev *reinv1.Event) Tone
	// Span is what the kind adds to the run's trace.
	Span Span
	// Metric is what rein's metrics count of the kind.
	Metric Metric
	// Transcript is what the model reads of the kind.
	Transcript Transcript
}

// Tone is the colour of an event's line on a terminal.
type Tone int

const (
	toneUnset Tone = iota
	// Plain is the terminal's own colour.
	Plain
	// Good is a run that completed.
	Good
	// Waiting is a run that waits for a person: an approval, an input.
	Waiting
	// Bad is a run that ended other than completed.
	Bad
	// Alert is something refused or limited: a tool call, a decision, a
	// budget.
	Alert
)

// Span is what a kind adds to its run's trace (internal/telemetry): a run's
// stretch of work is an invoke_agent span, each model call a chat span and
// each tool call an execute_tool span inside it, timed by the durations the
// log records.
type Span struct {
	// Call is the call span the kind starts or ends; NoCall for none.
	Call Call
	// Event names the span event the kind adds to the stretch's span
	// ("rein.tool_refused"); "" for none.
	Event string
	// Attributes are the span event's attributes; nil for none.
	Attributes func(ev *reinv1.Event) []attribute.KeyValue
	// Ends says whether the event ends the run's stretch of work (the run
	// paused or ended: the event is its status_changed); nil for a kind
	// that never does.
	Ends func(ev *reinv1.Event) bool
}

// Call is a call span a kind starts or ends.
type Call int

const (
	callUnset Call = iota
	// NoCall starts or ends no call span.
	NoCall
	// ModelCallStart starts a model call (model_requested): its step,
	// whether it was sent again and its output limit go on its chat span.
	ModelCallStart
	// ModelCallEnd ends a model call with its chat span (model_returned).
	ModelCallEnd
	// ToolCallStart starts a tool call, by call ID (tool_requested).
	ToolCallStart
	// ToolCallEnd ends a tool call with its execute_tool span
	// (tool_returned).
	ToolCallEnd
)

// noSpan is the Span of a kind that adds nothing to a trace.
var noSpan = Span{Call: NoCall}

// Metric is what rein's metrics (internal/metrics) count of a kind.
type Metric struct {
	// Counts is what an event of the kind counts as; Uncounted for none.
	Counts Count
	// Outcome is the outcome label a count of the kind carries, where the
	// kind decides it (Write: "committed"); "" elsewhere.
	Outcome string
}

// Count is what an event counts as in rein's metrics.
type Count int

const (
	countUnset Count = iota
	// Uncounted is counted by no metric.
	Uncounted
	// RunStart is a run that started (rein_runs_started_total, rein_runs),
	// labelled from then on with its contract's model.
	RunStart
	// Step is a model call sent (rein_steps_total).
	Step
	// ModelCall is a model call answered: rein_model_calls_total, its
	// duration, tokens and cost, and the gen_ai client metrics.
	ModelCall
	// ModelRetry is a model call retried, by reason
	// (rein_model_retries_total).
	ModelRetry
	// ToolCall is a tool call that returned, ok or in error
	// (rein_tool_calls_total, rein_tool_call_duration_seconds).
	ToolCall
	// ToolRefusal is a tool call refused (rein_tool_calls_total, outcome
	// "refused").
	ToolRefusal
	// ApprovalAsked is a proposal that waits for a person
	// (rein_approvals_waiting).
	ApprovalAsked
	// ApprovalDecided is a person's decision on it (rein_approvals_waiting,
	// rein_approval_decision_seconds).
	ApprovalDecided
	// Write is an approved write's outcome, Metric.Outcome
	// (rein_writes_total).
	Write
	// Throttled is a model call that waited for the shared rate limits
	// (rein_model_rate_wait_seconds, by the kind of bucket).
	Throttled
	// Admitted is a queued run that started (rein_queue_wait_seconds, by
	// tenant).
	Admitted
	// PolicyDecision is a policy's decision on a tool call
	// (rein_policy_decisions_total, by effect and source).
	PolicyDecision
	// StatusChange is a run's status changing (rein_runs,
	// rein_runs_ended_total, and rein_approvals_waiting when it leaves
	// needs_approval).
	StatusChange
)

// Transcript is what the model reads of a kind (internal/harness's
// transcript): a turn, a change to the transcript, or nothing.
type Transcript struct {
	// Role is what the kind is to the transcript.
	Role Role
	// Observe is what the model reads of an event of Role Observed or Held: an
	// observation labelled with its source, or nil where the event gives
	// none. Nil for the other roles.
	Observe func(ev *reinv1.Event) *model.Observation
}

// Role is what a kind is to the transcript.
type Role int

const (
	roleUnset Role = iota
	// Unread is read by no model.
	Unread
	// Observed is read as an observation (Transcript.Observe).
	Observed
	// Reply is the model's reply (model_returned): its decision is a turn,
	// and the provider's count of its input corrects the next estimates.
	Reply
	// Request is a model call sent the transcript as it stands
	// (model_requested).
	Request
	// Compaction moves the oldest entries into the transcript's summary
	// (context_compacted).
	Compaction
	// Held is read as an observation (Transcript.Observe) from the next
	// model call on, never by one in flight (run_steered): the transcript
	// holds it until a Request.
	Held
)

// unread is the Transcript of a kind the model reads nothing of.
var unread = Transcript{Role: Unread}

// observed is the Transcript of a kind the model reads as an observation.
func observed(f func(ev *reinv1.Event) *model.Observation) Transcript {
	return Transcript{Role: Observed, Observe: f}
}

// Of is the declaration of ev's kind. An event with no payload, or one this
// build does not know, has a kind named "none" that describes nothing.
func Of(ev *reinv1.Event) *Kind {
	if k := byType[reflect.TypeOf(ev.GetPayload())]; k != nil {
		return k
	}
	return &none
}

// Summary is ev as a line for a person, after its time, sequence and name.
func Summary(ev *reinv1.Event) string { return Of(ev).Summary(ev) }

// none describes an event without a payload: as runstate.PayloadName, it
// is named "none", and nothing reads it.
var none = Kind{
	Name:       "none",
	Summary:    func(*reinv1.Event) string { return "" },
	Tone:       tone(Plain),
	Span:       noSpan,
	Metric:     Metric{Counts: Uncounted},
	Transcript: unread,
}

// payloadOneof is the Event's oneof of payloads.
var payloadOneof = (&reinv1.Event{}).ProtoReflect().Descriptor().Oneofs().ByName("payload")

// byType finds a kind by the payload's Go type: faster than by the oneof's
// field (WhichOneof), on the engine's path for every event.
var byType = index(kinds[:])

// index maps each declared kind's payload type (*reinv1.Event_RunStarted)
// to its declaration. A declaration whose name is no field of the oneof is
// a mistake in kinds.go, and panics.
func index(ks []Kind) map[reflect.Type]*Kind {
	m := make(map[reflect.Type]*Kind, len(ks))
	for i := range ks {
		fd := payloadOneof.Fields().ByName(protoreflect.Name(ks[i].Name))
		if fd == nil {
			panic(fmt.Sprintf("eventkind: %q is not a payload of rein.v1.Event", ks[i].Name))
		}
		ev := &reinv1.Event{}
		r := ev.ProtoReflect()
		r.Set(fd, protoreflect.ValueOfMessage(r.NewField(fd).Message()))
		m[reflect.TypeOf(ev.GetPayload())] = &ks[i]
	}
	return m
}

// tone is a Tone that is the same for every event of a kind.
func tone(t Tone) func(*reinv1.Event) Tone {
	return func(*reinv1.Event) Tone { return t }
}
