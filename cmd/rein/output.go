package main

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/eventkind"
	"github.com/reinhq/rein/internal/runstate"
)

// summary is the JSON a command prints for a run. Fields are added, never
// renamed or removed (docs/cli.md). Statuses are lower-case names.
type summary struct {
	RunID        string `json:"run_id"`
	Status       string `json:"status"`
	StatusReason string `json:"status_reason,omitempty"`
	Steps        uint32 `json:"steps"`
	Tokens       uint64 `json:"tokens"`
	Usage        struct {
		InputTokens  uint64 `json:"input_tokens"`
		OutputTokens uint64 `json:"output_tokens"`
		// The input the provider wrote to and read from its prompt
		// cache; input_tokens is the rest. Left out when 0.
		CacheWriteInputTokens uint64 `json:"cache_write_input_tokens,omitempty"`
		CacheReadInputTokens  uint64 `json:"cache_read_input_tokens,omitempty"`
	} `json:"usage"`
	// CostUSD is the model calls' cost by the server's price table.
	CostUSD   float64 `json:"cost_usd"`
	ToolCalls uint32  `json:"tool_calls"`
	Version   uint64  `json:"version"`
	Result    any     `json:"result"`
	Pending   any     `json:"pending"`
	LastError string  `json:"last_error,omitempty"`
	Goal      string  `json:"goal,omitempty"`
	CreatedAt string  `json:"created_at,omitempty"`
	UpdatedAt string  `json:"updated_at,omitempty"`
	Deadline  string  `json:"deadline,omitempty"`
	// Parent is the run that delegated this one; Parents, where rein
	// pending gives it, the whole chain up to the root, nearest first.
	Parent  string   `json:"parent_run_id,omitempty"`
	Parents []string `json:"parents,omitempty"`
	// Archived is the archive's key of a run that left the live store.
	Archived string `json:"archived,omitempty"`
	// QueuePosition is a queued run's place in its tenant's queue.
	QueuePosition uint32 `json:"queue_position,omitempty"`
	// ToolDigests and PolicyDigest, where rein inspect gives them, are the
	// definitions of the granted tools the run holds and the digest of the
	// server's policy at its start (docs/upgrading.md, "When a tool changes under a run").
	ToolDigests  any    `json:"tool_digests,omitempty"`
	PolicyDigest string `json:"policy_digest,omitempty"`
	// card, where rein pending and rein inspect give it, is what a
	// person deciding on a paused run reads: its fields (proposal_id,
	// spend, evidence, approve_does) sit beside the others.
	*card
}

func summarize(r *reinv1.Run) summary {
	s := summary{
		RunID:         r.GetRunId(),
		Status:        runstate.StatusName(r.GetStatus()),
		StatusReason:  r.GetStatusReason(),
		Steps:         r.GetSteps(),
		Tokens:        runstate.UsageTokens(r.GetUsage()),
		CostUSD:       r.GetCostUsd(),
		ToolCalls:     r.GetToolCalls(),
		Version:       r.GetVersion(),
		Result:        protoJSON(r.GetResult()),
		Pending:       protoJSON(r.GetPending()),
		LastError:     r.GetLastError(),
		Goal:          r.GetContract().GetGoal(),
		CreatedAt:     timeText(r.GetCreatedAt().AsTime(), r.GetCreatedAt() != nil),
		UpdatedAt:     timeText(r.GetUpdatedAt().AsTime(), r.GetUpdatedAt() != nil),
		Deadline:      timeText(r.GetDeadline().AsTime(), r.GetDeadline() != nil),
		Parent:        r.GetDelegatedBy().GetParentRunId(),
		Archived:      r.GetArchive().GetKey(),
		QueuePosition: r.GetQueuePosition(),
	}
	s.Usage.InputTokens = r.GetUsage().GetInputTokens()
	s.Usage.OutputTokens = r.GetUsage().GetOutputTokens()
	s.Usage.CacheWriteInputTokens = r.GetUsage().GetCacheWriteInputTokens()
	s.Usage.CacheReadInputTokens = r.GetUsage().GetCacheReadInputTokens()
	return s
}

func timeText(t time.Time, ok bool) string {
	if !ok {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// protoJSON is m as a JSON value with snake_case names, 64-bit integers as
// numbers (protojson writes them as strings), enums by name and statuses in
// lower case; nil for an unset message.
func protoJSON(m proto.Message) any {
	if m == nil || !m.ProtoReflect().IsValid() {
		return nil
	}
	return eventkind.LowerStatuses(messageJSON(m.ProtoReflect()))
}

// messageJSON walks a message by reflection. Well-known types (Struct,
// Value, Timestamp, Duration) take their protojson form.
func messageJSON(m protoreflect.Message) any {
	if m.Descriptor().FullName().Parent() == "google.protobuf" {
		b, err := protojson.Marshal(m.Interface())
		if err != nil {
			return map[string]any{"error": err.Error()}
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			return map[string]any{"error": err.Error()}
		}
		return v
	}
	out := map[string]any{}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList():
			list := make([]any, v.List().Len())
			for i := range list {
				list[i] = scalarJSON(fd, v.List().Get(i))
			}
			out[string(fd.Name())] = list
		case fd.IsMap():
			mp := map[string]any{}
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				mp[k.String()] = scalarJSON(fd.MapValue(), mv)
				return true
			})
			out[string(fd.Name())] = mp
		default:
			out[string(fd.Name())] = scalarJSON(fd, v)
		}
		return true
	})
	return out
}

func scalarJSON(fd protoreflect.FieldDescriptor, v protoreflect.Value) any {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return messageJSON(v.Message())
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return string(ev.Name())
		}
		return int32(v.Enum())
	case protoreflect.BytesKind:
		return v.Bytes()
	}
	return v.Interface()
}

// eventJSON is one event as the CLI prints it: the envelope with sequence as
// a number and the payload's type named.
func eventJSON(ev *reinv1.Event) map[string]any {
	m, _ := protoJSON(ev).(map[string]any)
	if m == nil {
		m = map[string]any{}
	}
	m["sequence"] = ev.GetSequence()
	m["type"] = runstate.PayloadName(ev)
	return m
}

func writeJSON(w io.Writer, v any, indent bool) error {
	enc := json.NewEncoder(w)
	if indent {
		enc.SetIndent("", "  ")
	}
	return enc.Encode(v)
}

// eventLine is one event as a line for a person.
func eventLine(ev *reinv1.Event) string {
	return fmt.Sprintf("%s %4d %-18s %s", ev.GetRecordedAt().AsTime().UTC().Format("15:04:05.000"),
		ev.GetSequence(), runstate.PayloadName(ev), eventSummary(ev))
}

// eventSummary is an event's line for a person after its name: its kind's
// summary (internal/eventkind).
func eventSummary(ev *reinv1.Event) string { return eventkind.Summary(ev) }

// runChangeLine is one status change of `rein watch --all` as a line for a
// person. A run's creation has no previous status: it reads "created".
func runChangeLine(ch *reinv1.RunChange) string {
	from := "created"
	if ch.GetPrevious() != reinv1.RunStatus_RUN_STATUS_UNSPECIFIED {
		from = runstate.StatusName(ch.GetPrevious())
	}
	s := fmt.Sprintf("%s %6d %s %s → %s", ch.GetChangedAt().AsTime().UTC().Format("15:04:05.000"),
		ch.GetCursor(), ch.GetRunId(), from, runstate.StatusName(ch.GetStatus()))
	if r := ch.GetReason(); r != "" {
		s += " (" + r + ")"
	}
	return fmt.Sprintf("%s v%d", s, ch.GetVersion())
}

// statusExit is the exit code of a command that carried a run to status.
func statusExit(s reinv1.RunStatus) int {
	switch s {
	case reinv1.RunStatus_RUN_STATUS_COMPLETED:
		return exitOK
	case reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT, reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL, reinv1.RunStatus_RUN_STATUS_NEEDS_BUDGET:
		return exitPaused
	case reinv1.RunStatus_RUN_STATUS_BUDGET_EXHAUSTED:
		return exitBudget
	case reinv1.RunStatus_RUN_STATUS_FAILED:
		return exitFailed
	case reinv1.RunStatus_RUN_STATUS_DENIED, reinv1.RunStatus_RUN_STATUS_EXPIRED:
		return exitRefused
	case reinv1.RunStatus_RUN_STATUS_CANCELLED:
		return exitCancelled
	}
	return exitError
}

// timing is what a run's log says of how long its calls took: the model
// calls', and the tools' (reads, proposals and committed writes).
type timing struct {
	model, tools timed
}

// timed sums the durations of calls of one kind.
type timed struct {
	n       int
	total   time.Duration
	slowest time.Duration
	what    string // the slowest call's tool
}

func (t *timed) add(d *durationpb.Duration, what string) {
	if d == nil {
		return
	}
	v := d.AsDuration()
	t.n++
	t.total += v
	if v > t.slowest {
		t.slowest, t.what = v, what
	}
}

// String is "3 calls, 4.2s in all, the slowest 2.1s (search)", or "" when
// no call was timed.
func (t timed) String() string {
	if t.n == 0 {
		return ""
	}
	calls := "calls"
	if t.n == 1 {
		calls = "call"
	}
	s := fmt.Sprintf("%d %s, %s in all, the slowest %s", t.n, calls,
		eventkind.TookText(durationpb.New(t.total)), eventkind.TookText(durationpb.New(t.slowest)))
	if t.what != "" {
		s += " (" + t.what + ")"
	}
	return s
}

func timingOf(evs []*reinv1.Event) timing {
	var tm timing
	for _, ev := range evs {
		switch p := ev.GetPayload().(type) {
		case *reinv1.Event_ModelReturned:
			tm.model.add(p.ModelReturned.GetDuration(), "")
		case *reinv1.Event_ToolReturned:
			tm.tools.add(p.ToolReturned.GetDuration(), p.ToolReturned.GetTool())
		case *reinv1.Event_WriteCommitted:
			tm.tools.add(p.WriteCommitted.GetDuration(), "write "+p.WriteCommitted.GetProposalId())
		}
	}
	return tm
}
