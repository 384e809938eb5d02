package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
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
}

func summarize(r *reinv1.Run) summary {
	s := summary{
		RunID:        r.GetRunId(),
		Status:       runstate.StatusName(r.GetStatus()),
		StatusReason: r.GetStatusReason(),
		Steps:        r.GetSteps(),
		Tokens:       r.GetUsage().GetInputTokens() + r.GetUsage().GetOutputTokens(),
		CostUSD:      r.GetCostUsd(),
		ToolCalls:    r.GetToolCalls(),
		Version:      r.GetVersion(),
		Result:       protoJSON(r.GetResult()),
		Pending:      protoJSON(r.GetPending()),
		LastError:    r.GetLastError(),
		Goal:         r.GetContract().GetGoal(),
		CreatedAt:    timeText(r.GetCreatedAt().AsTime(), r.GetCreatedAt() != nil),
		UpdatedAt:    timeText(r.GetUpdatedAt().AsTime(), r.GetUpdatedAt() != nil),
		Deadline:     timeText(r.GetDeadline().AsTime(), r.GetDeadline() != nil),
		Parent:       r.GetDelegatedBy().GetParentRunId(),
		Archived:     r.GetArchive().GetKey(),
	}
	s.Usage.InputTokens = r.GetUsage().GetInputTokens()
	s.Usage.OutputTokens = r.GetUsage().GetOutputTokens()
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
	return lowerStatuses(messageJSON(m.ProtoReflect()))
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

// lowerStatuses rewrites "RUN_STATUS_X" strings as "x", everywhere in v.
func lowerStatuses(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = lowerStatuses(e)
		}
	case []any:
		for i, e := range x {
			x[i] = lowerStatuses(e)
		}
	case string:
		if rest, ok := strings.CutPrefix(x, "RUN_STATUS_"); ok {
			return strings.ToLower(rest)
		}
	}
	return v
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

func eventSummary(ev *reinv1.Event) string {
	switch p := ev.GetPayload().(type) {
	case *reinv1.Event_RunStarted:
		return fmt.Sprintf("goal %q, %d tools", p.RunStarted.GetContract().GetGoal(), len(p.RunStarted.GetContract().GetTools()))
	case *reinv1.Event_ModelRequested:
		s := fmt.Sprintf("step %d, %s, ~%d input tokens", p.ModelRequested.GetStep(), p.ModelRequested.GetModel(), p.ModelRequested.GetInputTokens())
		if p.ModelRequested.GetResumed() {
			s += ", sent again: the call before it was cut by a crash"
		}
		return s
	case *reinv1.Event_ModelReturned:
		mr := p.ModelReturned
		var notes []string
		if c := mr.GetCostUsd(); c > 0 {
			notes = append(notes, fmt.Sprintf("$%.6f", c))
		}
		if d := tookText(mr.GetDuration()); d != "" {
			notes = append(notes, d)
		}
		if f := mr.GetFinishReason(); f != "" {
			notes = append(notes, f)
		}
		if len(notes) == 0 {
			return decisionText(mr.GetDecision())
		}
		return fmt.Sprintf("%s (%s)", decisionText(mr.GetDecision()), strings.Join(notes, ", "))
	case *reinv1.Event_ModelRetried:
		return fmt.Sprintf("step %d, retry in %s: %s", p.ModelRetried.GetStep(), p.ModelRetried.GetWait().AsDuration(), p.ModelRetried.GetError())
	case *reinv1.Event_ContextCompacted:
		cc := p.ContextCompacted
		return fmt.Sprintf("%d entries summarised, %d → %d characters", cc.GetCompacted(), cc.GetCharsBefore(), cc.GetCharsAfter())
	case *reinv1.Event_DecisionRejected:
		return p.DecisionRejected.GetError()
	case *reinv1.Event_ToolRequested:
		return p.ToolRequested.GetTool()
	case *reinv1.Event_ToolRefused:
		return p.ToolRefused.GetTool() + ": " + p.ToolRefused.GetReason()
	case *reinv1.Event_ToolReturned:
		took := ""
		if d := tookText(p.ToolReturned.GetDuration()); d != "" {
			took = ", " + d
		}
		if e := p.ToolReturned.GetError(); e != "" {
			if took != "" {
				return fmt.Sprintf("%s error (%s): %s", p.ToolReturned.GetTool(), took[2:], e)
			}
			return p.ToolReturned.GetTool() + " error: " + e
		}
		cut := ""
		if p.ToolReturned.GetTruncated() {
			cut = ", cut"
		}
		return fmt.Sprintf("%s (%d bytes%s%s)", p.ToolReturned.GetTool(), p.ToolReturned.GetOutputBytes(), cut, took)
	case *reinv1.Event_ApprovalRequested:
		pr := p.ApprovalRequested.GetProposal()
		return fmt.Sprintf("%s %s, hash %.12s…", pr.GetTool(), pr.GetProposalId(), pr.GetHash())
	case *reinv1.Event_InputRequested:
		return fmt.Sprintf("%q", p.InputRequested.GetQuestion().GetText())
	case *reinv1.Event_DelegationStarted:
		var ids []string
		for _, c := range p.DelegationStarted.GetChildren() {
			b := c.GetBudget()
			ids = append(ids, fmt.Sprintf("%s (%d steps", c.GetRunId(), b.GetMaxSteps())+budgetNote(b)+")")
		}
		return "children " + strings.Join(ids, ", ")
	case *reinv1.Event_DelegationReturned:
		d := p.DelegationReturned
		s := fmt.Sprintf("%s %s, %d steps, %d tokens, $%.6f", d.GetRunId(), runstate.StatusName(d.GetStatus()), d.GetSteps(),
			d.GetUsage().GetInputTokens()+d.GetUsage().GetOutputTokens(), d.GetCostUsd())
		if a := d.GetAnswer(); a != nil {
			s += fmt.Sprintf(": %q", a.GetText())
		}
		return s
	case *reinv1.Event_BudgetReached:
		return p.BudgetReached.GetLimit() + ": " + p.BudgetReached.GetDetail()
	case *reinv1.Event_ApprovalDecided:
		d := p.ApprovalDecided
		verdict := "approved"
		if !d.GetApproved() {
			verdict = "rejected"
			if d.GetEndRun() {
				verdict = "rejected, run ended"
			}
		}
		return fmt.Sprintf("%s %s by %s %s", d.GetProposalId(), verdict, ev.GetActor(), quoteIf(d.GetReason()))
	case *reinv1.Event_WriteDispatched:
		return "operation " + p.WriteDispatched.GetOperationId()
	case *reinv1.Event_WriteCommitted:
		s := "operation " + p.WriteCommitted.GetOperationId() + ", receipt " + compactJSON(p.WriteCommitted.GetReceipt())
		if d := tookText(p.WriteCommitted.GetDuration()); d != "" {
			s += ", in " + d
		}
		return s
	case *reinv1.Event_WriteRefused:
		return "operation " + p.WriteRefused.GetOperationId() + " refused: " + p.WriteRefused.GetReason()
	case *reinv1.Event_RunTaken:
		return fmt.Sprintf("carried on by %s (lease epoch %d)", p.RunTaken.GetOwner(), p.RunTaken.GetEpoch())
	case *reinv1.Event_WriteOutcomeUnknown:
		return "operation " + p.WriteOutcomeUnknown.GetOperationId() + ": " + p.WriteOutcomeUnknown.GetError()
	case *reinv1.Event_InputProvided:
		return fmt.Sprintf("%q by %s", p.InputProvided.GetText(), ev.GetActor())
	case *reinv1.Event_ChecksCompleted:
		s := checksText(p.ChecksCompleted.GetResults())
		if d := tookText(p.ChecksCompleted.GetDuration()); d != "" {
			s += ", in " + d
		}
		return s
	case *reinv1.Event_StatusChanged:
		sc := p.StatusChanged
		s := fmt.Sprintf("%s → %s (%s)", runstate.StatusName(sc.GetFrom()), runstate.StatusName(sc.GetTo()), sc.GetReason())
		if e := sc.GetError(); e != "" {
			s += ": " + e
		}
		return s
	}
	return ""
}

// checksText sums up completion checks' results: how many ran, passed and
// failed, and the names of the failed ones ("2 checks: 1 passed, 1 failed
// (unit)").
func checksText(results []*reinv1.CheckResult) string {
	var failed []string
	for _, r := range results {
		if !r.GetPassed() {
			failed = append(failed, r.GetName())
		}
	}
	noun := "checks"
	if len(results) == 1 {
		noun = "check"
	}
	s := fmt.Sprintf("%d %s: %d passed", len(results), noun, len(results)-len(failed))
	if len(failed) > 0 {
		s += fmt.Sprintf(", %d failed (%s)", len(failed), strings.Join(failed, ", "))
	}
	return s
}

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

func quoteIf(s string) string {
	if s == "" {
		return ""
	}
	return fmt.Sprintf("%q", s)
}

// compactJSON is a message as one line of JSON.
func compactJSON(m proto.Message) string {
	b, err := json.Marshal(protoJSON(m))
	if err != nil {
		return "?"
	}
	return string(b)
}

func decisionText(d *reinv1.Decision) string {
	switch a := d.GetAction().(type) {
	case *reinv1.Decision_ToolCall:
		return "tool_call " + a.ToolCall.GetTool()
	case *reinv1.Decision_FinalAnswer:
		return fmt.Sprintf("final_answer %q", a.FinalAnswer.GetText())
	case *reinv1.Decision_AskHuman:
		return fmt.Sprintf("ask_human %q", a.AskHuman.GetQuestion())
	case *reinv1.Decision_Delegate:
		return fmt.Sprintf("delegate %d tasks", len(a.Delegate.GetTasks()))
	}
	return "(no decision)"
}

// statusExit is the exit code of a command that carried a run to status.
func statusExit(s reinv1.RunStatus) int {
	switch s {
	case reinv1.RunStatus_RUN_STATUS_COMPLETED:
		return exitOK
	case reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT, reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL:
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

// tookText is a measured duration as a person reads it ("1.25s", "340ms",
// "85µs"), or "" when none was recorded.
func tookText(d *durationpb.Duration) string {
	if d == nil {
		return ""
	}
	t := d.AsDuration()
	switch {
	case t >= time.Second:
		return t.Round(10 * time.Millisecond).String()
	case t >= time.Millisecond:
		return t.Round(time.Millisecond).String()
	}
	return t.Round(time.Microsecond).String()
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
		tookText(durationpb.New(t.total)), tookText(durationpb.New(t.slowest)))
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

// budgetNote is a lent budget's limits beside its steps, for a line.
func budgetNote(b *reinv1.Budget) string {
	var s string
	if n := b.GetMaxTokens(); n > 0 {
		s += fmt.Sprintf(", %d tokens", n)
	}
	if c := b.GetMaxCostUsd(); c > 0 {
		s += fmt.Sprintf(", $%.6f", c)
	}
	if n := b.GetMaxToolCalls(); n > 0 {
		s += fmt.Sprintf(", %d tool calls", n)
	}
	return s
}
