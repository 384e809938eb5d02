package crash_test

// The runs both tests drive, and the validators over what a crashed server
// left behind: the runs' logs (through the API), the fixture ledger, and
// the bbolt file itself.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/reinhq/rein/client"
	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store/bolt"
)

const (
	stRunning       = reinv1.RunStatus_RUN_STATUS_RUNNING
	stNeedsInput    = reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT
	stNeedsApproval = reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL
	stCompleted     = reinv1.RunStatus_RUN_STATUS_COMPLETED

	approve = reinv1.ApprovalVerdict_APPROVAL_VERDICT_APPROVE

	// rpcTimeout bounds one call, including the wait for a restarted
	// server to accept it.
	rpcTimeout = 20 * time.Second
)

// contract is run i's task: read a record, update it (a write that needs
// approval), ask a person, answer. The model calls that lead to a tool
// take a few milliseconds, so that kills find calls in flight.
func contract(i int) *reinv1.TaskContract {
	args := func(kv map[string]any) *structpb.Struct {
		s, err := structpb.NewStruct(kv)
		if err != nil {
			panic(err)
		}
		return s
	}
	record := fmt.Sprintf("R-%03d", i)
	reply := func(d *reinv1.Decision, delay uint32) *reinv1.ScriptedReply {
		return &reinv1.ScriptedReply{
			Reply:   &reinv1.ScriptedReply_Decision{Decision: d},
			Usage:   &reinv1.Usage{InputTokens: 100, OutputTokens: 10},
			DelayMs: delay,
		}
	}
	call := func(tool, id string) *reinv1.Decision {
		return &reinv1.Decision{Action: &reinv1.Decision_ToolCall{ToolCall: &reinv1.ToolCall{
			Tool: tool, CallId: id, Arguments: args(map[string]any{"record": record}),
		}}}
	}
	return &reinv1.TaskContract{
		Goal: "Zero the balance of record " + record + ".",
		Tools: []*reinv1.ToolGrant{
			{Name: readTool, Description: "Read a record.", Tier: reinv1.ToolTier_TOOL_TIER_READ},
			{Name: writeTool, Description: "Update a record.", Tier: reinv1.ToolTier_TOOL_TIER_WRITE},
		},
		Model: &reinv1.ModelSpec{Provider: "script", Name: "crash", Script: []*reinv1.ScriptedReply{
			reply(call(readTool, "c1"), 5),
			reply(call(writeTool, "c2"), 5),
			reply(&reinv1.Decision{Action: &reinv1.Decision_AskHuman{AskHuman: &reinv1.AskHuman{Question: "Tell the customer?"}}}, 0),
			reply(&reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: record + " is zeroed."}}}, 0),
		}},
		Labels: map[string]string{"test": "crash"},
	}
}

// transient reports whether a call's error may go away by calling again: the
// server was down or restarting, or another writer moved the run first.
func transient(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted:
		return true
	}
	return false
}

// runLog is a run as the server holds it: its state and every event.
type runLog struct {
	run    *reinv1.Run
	events []*reinv1.Event
}

// fetchLog reads a run and all its events through the API.
func fetchLog(ctx context.Context, cl *client.Client, runID string) (runLog, error) {
	cctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	got, err := cl.Runs.GetRun(cctx, &reinv1.GetRunRequest{RunId: runID})
	if err != nil {
		return runLog{}, fmt.Errorf("GetRun %s: %w", runID, err)
	}
	l := runLog{run: got.GetRun()}
	req := &reinv1.ListEventsRequest{RunId: runID, PageSize: 1000}
	for {
		page, err := cl.Runs.ListEvents(cctx, req)
		if err != nil {
			return runLog{}, fmt.Errorf("ListEvents %s: %w", runID, err)
		}
		l.events = append(l.events, page.GetEvents()...)
		if page.GetNextPageToken() == "" {
			return l, nil
		}
		req.PageToken = page.GetNextPageToken()
	}
}

// gapFree says what is wrong with a log's sequences, or "": they must be
// 1..version, each event the run's.
func (l runLog) gapFree() string {
	for i, ev := range l.events {
		if ev.GetSequence() != uint64(i+1) || ev.GetRunId() != l.run.GetRunId() {
			return fmt.Sprintf("event %d of the log has run %s and sequence %d, want run %s and sequence %d",
				i+1, ev.GetRunId(), ev.GetSequence(), l.run.GetRunId(), i+1)
		}
	}
	if got := uint64(len(l.events)); got != l.run.GetVersion() {
		return fmt.Sprintf("the log holds %d events but the run is at version %d", got, l.run.GetVersion())
	}
	return ""
}

// count is how many events of the log have the payload.
func (l runLog) count(payload string) int {
	n := 0
	for _, ev := range l.events {
		if payloadName(ev) == payload {
			n++
		}
	}
	return n
}

// find returns the events with the payload.
func (l runLog) find(payload string) []*reinv1.Event {
	var out []*reinv1.Event
	for _, ev := range l.events {
		if payloadName(ev) == payload {
			out = append(out, ev)
		}
	}
	return out
}

// String is the log, one event a line, for failure messages.
func (l runLog) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "run %s: %s (%s) at version %d, last error %q\n", l.run.GetRunId(), l.run.GetStatus(),
		l.run.GetStatusReason(), l.run.GetVersion(), l.run.GetLastError())
	b.WriteString(eventsText(l.events))
	return b.String()
}

func eventsText(evs []*reinv1.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		fmt.Fprintf(&b, "  %3d %s %-20s %-22s %s\n", ev.GetSequence(), ev.GetRecordedAt().AsTime().Format("15:04:05.000"),
			ev.GetActor(), payloadName(ev), eventDetail(ev))
	}
	return b.String()
}

func eventDetail(ev *reinv1.Event) string {
	switch p := ev.GetPayload().(type) {
	case *reinv1.Event_StatusChanged:
		return fmt.Sprintf("%s → %s (%s) %s", p.StatusChanged.GetFrom(), p.StatusChanged.GetTo(), p.StatusChanged.GetReason(), p.StatusChanged.GetError())
	case *reinv1.Event_ModelRequested:
		return fmt.Sprintf("step %d resumed=%v", p.ModelRequested.GetStep(), p.ModelRequested.GetResumed())
	case *reinv1.Event_ToolRequested:
		return p.ToolRequested.GetTool() + " " + p.ToolRequested.GetCallId()
	case *reinv1.Event_ToolReturned:
		return p.ToolReturned.GetTool() + " " + p.ToolReturned.GetCallId() + " " + p.ToolReturned.GetError()
	case *reinv1.Event_WriteDispatched:
		return p.WriteDispatched.GetOperationId()
	case *reinv1.Event_WriteCommitted:
		return p.WriteCommitted.GetOperationId()
	case *reinv1.Event_WriteOutcomeUnknown:
		return p.WriteOutcomeUnknown.GetOperationId() + " " + p.WriteOutcomeUnknown.GetError()
	case *reinv1.Event_ApprovalDecided:
		return fmt.Sprintf("%s approved=%v", p.ApprovalDecided.GetProposalId(), p.ApprovalDecided.GetApproved())
	}
	return ""
}

// payloadName is the snake_case name of an event's payload.
func payloadName(ev *reinv1.Event) string {
	m := ev.ProtoReflect()
	od := m.Descriptor().Oneofs().ByName("payload")
	if od == nil {
		return "none"
	}
	fd := m.WhichOneof(od)
	if fd == nil {
		return "none"
	}
	return string(fd.Name())
}

// ledger is the fixture ledger: every Commit call the fixture tools took.
type ledger struct {
	lines   []string
	applied map[string]int // operation ID → "applied" lines
	repeat  map[string]int // operation ID → "repeat" lines
}

func readLedger(t *testing.T, path string) ledger {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	l := ledger{applied: map[string]int{}, repeat: map[string]int{}}
	for _, line := range strings.Split(string(data), "\n") {
		if line == "" {
			continue
		}
		l.lines = append(l.lines, line)
		f := strings.Split(line, "\t")
		if len(f) != 3 || f[1] != writeTool {
			t.Errorf("ledger line %q: want OPERATION_ID\\t%s\\tapplied|repeat", line, writeTool)
			continue
		}
		switch f[2] {
		case "applied":
			l.applied[f[0]]++
		case "repeat":
			l.repeat[f[0]]++
		default:
			t.Errorf("ledger line %q: kind %q, want applied or repeat", line, f[2])
		}
	}
	return l
}

// linesFor is the ledger's lines for one operation.
func (l ledger) linesFor(op string) []string {
	var out []string
	for _, line := range l.lines {
		if strings.HasPrefix(line, op+"\t") {
			out = append(out, line)
		}
	}
	return out
}

// writeProblems checks every approved write against the ledger: each
// write_committed's operation was applied exactly once, no operation was
// applied twice or dispatched again after it was applied (a "repeat"), and
// every applied operation has its write_committed in some run's log (no
// commit lost). It returns one line per problem.
func writeProblems(logs []runLog, l ledger) []string {
	var problems []string
	receipt := &structpb.Value{}
	if err := protojson.Unmarshal([]byte(receiptJSON), receipt); err != nil {
		panic(err)
	}
	committed := map[string]string{} // operation ID → run ID
	for _, rl := range logs {
		for _, ev := range rl.find("write_committed") {
			wc := ev.GetWriteCommitted()
			op := wc.GetOperationId()
			if prev, dup := committed[op]; dup {
				problems = append(problems, fmt.Sprintf("operation %s has write_committed in run %s and again in run %s (sequence %d)",
					op, prev, rl.run.GetRunId(), ev.GetSequence()))
			}
			committed[op] = rl.run.GetRunId()
			if n := l.applied[op]; n != 1 {
				problems = append(problems, fmt.Sprintf("run %s committed operation %s (write_committed at sequence %d), but the ledger applied it %d times: %q",
					rl.run.GetRunId(), op, ev.GetSequence(), n, l.linesFor(op)))
			}
			if !proto.Equal(wc.GetReceipt(), receipt) {
				problems = append(problems, fmt.Sprintf("run %s: write_committed at sequence %d has receipt %v, want the fixture's %v",
					rl.run.GetRunId(), ev.GetSequence(), wc.GetReceipt(), receipt))
			}
		}
		for _, ev := range rl.find("write_outcome_unknown") {
			problems = append(problems, fmt.Sprintf("run %s: write_outcome_unknown at sequence %d (%s), but the fixture's commit does not fail and its lookup always answers",
				rl.run.GetRunId(), ev.GetSequence(), ev.GetWriteOutcomeUnknown().GetError()))
		}
	}
	for op, n := range l.applied {
		if n > 1 {
			problems = append(problems, fmt.Sprintf("operation %s was applied %d times: %q", op, n, l.linesFor(op)))
		}
		if _, ok := committed[op]; !ok {
			problems = append(problems, fmt.Sprintf("operation %s was applied by the tool (%q) but no run's log has its write_committed: a commit was lost", op, l.linesFor(op)))
		}
	}
	for op, n := range l.repeat {
		problems = append(problems, fmt.Sprintf("operation %s was sent to the tool again %d times after it was applied (a blind second dispatch): %q", op, n, l.linesFor(op)))
	}
	return problems
}

// checkBolt opens the database read-only and runs bbolt's consistency
// check over it.
func checkBolt(t *testing.T, path string) {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("open %s read-only: %v", path, err)
	}
	defer db.Close()
	if err := db.View(func(tx *bbolt.Tx) error {
		var errs []error
		for err := range tx.Check() {
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}); err != nil {
		t.Errorf("bbolt check of %s: %v", path, err)
	}
}

// storedEvents reads a run's events from the store file of a server that is
// not running, read-only (nothing is written to it, not even bbolt's
// header), to see what a crash left on disk before a restart changes it.
// Each event's seal is checked as it is read.
func storedEvents(t *testing.T, path, runID string) []*reinv1.Event {
	t.Helper()
	s, err := bolt.Open(path, bolt.Options{ReadOnly: true, LockTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("open %s read-only: %v", path, err)
	}
	defer s.Close()
	var evs []*reinv1.Event
	for {
		page, err := s.Events(t.Context(), runID, uint64(len(evs)), 1024)
		if err != nil {
			t.Fatalf("read run %s from %s: %v", runID, path, err)
		}
		if len(page) == 0 {
			return evs
		}
		evs = append(evs, page...)
	}
}
