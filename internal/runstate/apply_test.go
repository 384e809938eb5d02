package runstate

// The events and states the package's tests build (envelope, runStarted, …,
// mustApply, stateAt), and the tests of Apply on each kind of event: the
// first event, events that are invalid later, model calls, and the counters.

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

const (
	unspecified   = reinv1.RunStatus_RUN_STATUS_UNSPECIFIED
	running       = reinv1.RunStatus_RUN_STATUS_RUNNING
	needsInput    = reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT
	needsApproval = reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL
	completed     = reinv1.RunStatus_RUN_STATUS_COMPLETED
	exhausted     = reinv1.RunStatus_RUN_STATUS_BUDGET_EXHAUSTED
	failed        = reinv1.RunStatus_RUN_STATUS_FAILED
	denied        = reinv1.RunStatus_RUN_STATUS_DENIED
	expired       = reinv1.RunStatus_RUN_STATUS_EXPIRED
	cancelled     = reinv1.RunStatus_RUN_STATUS_CANCELLED
	needsBudget   = reinv1.RunStatus_RUN_STATUS_NEEDS_BUDGET
)

const testRunID = "run-0001"

// epoch is the test clock; event seq is recorded at epoch + seq seconds.
var epoch = time.Date(2030, 1, 2, 3, 4, 5, 600, time.UTC)

func at(seq uint64) time.Time { return epoch.Add(time.Duration(seq) * time.Second) }

// envelope is an event of testRunID with no payload.
func envelope(seq uint64) *reinv1.Event {
	return &reinv1.Event{
		RunId:      testRunID,
		Sequence:   seq,
		RecordedAt: timestamppb.New(at(seq)),
		Actor:      "harness",
	}
}

func testContract() *reinv1.TaskContract {
	return &reinv1.TaskContract{Goal: "fix the flaky test", Labels: map[string]string{"team": "infra"}}
}

func runStarted(seq uint64) *reinv1.Event {
	e := envelope(seq)
	e.Actor = "principal:alice"
	e.Payload = &reinv1.Event_RunStarted{RunStarted: &reinv1.RunStarted{
		Contract:  testContract(),
		Principal: "alice",
		Tenant:    "acme",
		RequestId: "req-1",
		Deadline:  timestamppb.New(epoch.Add(time.Hour)),
	}}
	return e
}

func modelRequested(seq uint64) *reinv1.Event {
	e := envelope(seq)
	e.Payload = &reinv1.Event_ModelRequested{ModelRequested: &reinv1.ModelRequested{
		InputHash: fmt.Sprintf("hash-%d", seq), Model: "scripted/test",
	}}
	return e
}

func modelReturned(seq, in, out uint64) *reinv1.Event {
	e := envelope(seq)
	e.Actor = "model"
	e.Payload = &reinv1.Event_ModelReturned{ModelReturned: &reinv1.ModelReturned{
		Decision: &reinv1.Decision{Action: &reinv1.Decision_ToolCall{ToolCall: &reinv1.ToolCall{Tool: "read_file", CallId: "c1"}}},
		Usage:    &reinv1.Usage{InputTokens: in, OutputTokens: out},
	}}
	return e
}

func toolRequested(seq uint64) *reinv1.Event {
	e := envelope(seq)
	e.Payload = &reinv1.Event_ToolRequested{ToolRequested: &reinv1.ToolRequested{
		CallId: fmt.Sprintf("call-%d", seq), Tool: "read_file", Tier: reinv1.ToolTier_TOOL_TIER_READ,
	}}
	return e
}

func toolReturned(seq uint64, errText string) *reinv1.Event {
	e := envelope(seq)
	e.Actor = "tool:read_file"
	e.Payload = &reinv1.Event_ToolReturned{ToolReturned: &reinv1.ToolReturned{
		CallId: "call", Tool: "read_file", Output: structpb.NewStringValue("contents"), Error: errText,
	}}
	return e
}

func approvalRequested(seq uint64, proposalID string) *reinv1.Event {
	e := envelope(seq)
	e.Payload = &reinv1.Event_ApprovalRequested{ApprovalRequested: &reinv1.ApprovalRequested{
		Proposal: &reinv1.Proposal{ProposalId: proposalID, Tool: "write_file", Hash: "h", RunVersion: seq - 1},
	}}
	return e
}

func inputRequested(seq uint64) *reinv1.Event {
	e := envelope(seq)
	e.Payload = &reinv1.Event_InputRequested{InputRequested: &reinv1.InputRequested{
		Question: &reinv1.Question{Text: "which branch?"},
	}}
	return e
}

func budgetReached(seq uint64) *reinv1.Event {
	e := envelope(seq)
	e.Payload = &reinv1.Event_BudgetReached{BudgetReached: &reinv1.BudgetReached{Limit: "deadline"}}
	return e
}

func statusChanged(seq uint64, from, to reinv1.RunStatus) *reinv1.Event {
	e := envelope(seq)
	sc := &reinv1.StatusChanged{From: from, To: to, Reason: "test " + StatusName(to)}
	switch to {
	case completed:
		sc.Result = &reinv1.FinalAnswer{Text: "done"}
	case failed:
		sc.Error = "model client: quota"
	}
	e.Payload = &reinv1.Event_StatusChanged{StatusChanged: sc}
	return e
}

// mustApply applies events to s and fails the test on an error.
func mustApply(t *testing.T, s State, events ...*reinv1.Event) State {
	t.Helper()
	for _, ev := range events {
		var err error
		if s, err = Apply(s, ev); err != nil {
			t.Fatalf("Apply(%s, seq %d): %v", PayloadName(ev), ev.GetSequence(), err)
		}
	}
	return s
}

// stateAt is a run brought to status by a legal history.
func stateAt(t *testing.T, status reinv1.RunStatus) State {
	t.Helper()
	s := mustApply(t, State{}, runStarted(1))
	switch status {
	case running:
	case needsInput:
		s = mustApply(t, s, inputRequested(2), statusChanged(3, running, needsInput))
	case needsApproval:
		s = mustApply(t, s, approvalRequested(2, "p-1"), statusChanged(3, running, needsApproval))
	case needsBudget:
		s = mustApply(t, s, budgetPaused(2), statusChanged(3, running, needsBudget))
	case expired:
		s = mustApply(t, s, approvalRequested(2, "p-1"), statusChanged(3, running, needsApproval),
			statusChanged(4, needsApproval, expired))
	default:
		s = mustApply(t, s, statusChanged(2, running, status))
	}
	if s.Status != status {
		t.Fatalf("stateAt(%s): status is %s", StatusName(status), StatusName(s.Status))
	}
	return s
}

// assertUnchanged fails when got is not the state Apply was given.
func assertUnchanged(t *testing.T, got, want State) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("state changed on error:\n got  %+v\n want %+v", got, want)
	}
}

func TestApplyRunStarted(t *testing.T) {
	ev := runStarted(1)
	s := mustApply(t, State{}, ev)
	rs := ev.GetRunStarted()
	if s.RunID != testRunID || s.Status != running || s.Version != 1 ||
		s.Principal != "alice" || s.Tenant != "acme" || s.RequestID != "req-1" {
		t.Errorf("state = %+v", s)
	}
	if !proto.Equal(s.Contract, rs.GetContract()) {
		t.Errorf("contract = %v, want %v", s.Contract, rs.GetContract())
	}
	if !s.Deadline.Equal(rs.GetDeadline().AsTime()) {
		t.Errorf("deadline = %v, want %v", s.Deadline, rs.GetDeadline().AsTime())
	}
	if !s.CreatedAt.Equal(at(1)) || !s.UpdatedAt.Equal(at(1)) {
		t.Errorf("created at %v, updated at %v, want both %v", s.CreatedAt, s.UpdatedAt, at(1))
	}
	if s.Steps != 0 || s.Tokens() != 0 || s.ToolCalls != 0 || s.ModelInFlight || s.Pending != nil {
		t.Errorf("a new run has counters or pending set: %+v", s)
	}

	noDeadline := runStarted(1)
	noDeadline.GetRunStarted().Deadline = nil
	if s := mustApply(t, State{}, noDeadline); !s.Deadline.IsZero() {
		t.Errorf("deadline = %v without a timeout, want zero", s.Deadline)
	}
}

func TestApplyFirstEventInvalid(t *testing.T) {
	noRunID := runStarted(1)
	noRunID.RunId = ""
	noContract := runStarted(1)
	noContract.GetRunStarted().Contract = nil
	tests := []struct {
		name string
		ev   *reinv1.Event
	}{
		{"nil_event", nil},
		{"no_payload", envelope(1)},
		{"model_requested", modelRequested(1)},
		{"status_changed", statusChanged(1, unspecified, running)},
		{"budget_reached", budgetReached(1)},
		{"no_run_id", noRunID},
		{"no_contract", noContract},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Apply(State{}, tc.ev)
			if !errors.Is(err, ErrInvalidEvent) {
				t.Fatalf("err = %v, want ErrInvalidEvent", err)
			}
			assertUnchanged(t, got, State{})
		})
	}
}

func TestApplyInvalidLaterEvent(t *testing.T) {
	otherRun := modelRequested(2)
	otherRun.RunId = "run-0002"
	noProposalID := approvalRequested(2, "")
	tests := []struct {
		name string
		ev   *reinv1.Event
	}{
		{"run_started_twice", runStarted(2)},
		{"no_payload", envelope(2)},
		{"other_run", otherRun},
		{"approval_without_proposal_id", noProposalID},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := stateAt(t, running)
			got, err := Apply(s, tc.ev)
			if !errors.Is(err, ErrInvalidEvent) {
				t.Fatalf("err = %v, want ErrInvalidEvent", err)
			}
			assertUnchanged(t, got, s)
		})
	}
}

func TestApplyModelCalls(t *testing.T) {
	tests := []struct {
		name   string
		before []*reinv1.Event
		ev     *reinv1.Event
	}{
		{"returned_without_request", nil, modelReturned(2, 1, 1)},
		{"returned_twice", []*reinv1.Event{modelRequested(2), modelReturned(3, 1, 1)}, modelReturned(4, 1, 1)},
		{"requested_twice", []*reinv1.Event{modelRequested(2)}, modelRequested(3)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := mustApply(t, stateAt(t, running), tc.before...)
			got, err := Apply(s, tc.ev)
			if !errors.Is(err, ErrIllegalTransition) {
				t.Fatalf("err = %v, want ErrIllegalTransition", err)
			}
			assertUnchanged(t, got, s)
		})
	}

	t.Run("request_then_return", func(t *testing.T) {
		s := mustApply(t, stateAt(t, running), modelRequested(2))
		if !s.ModelInFlight {
			t.Errorf("model in flight = false after model_requested")
		}
		s = mustApply(t, s, modelReturned(3, 1, 1))
		if s.ModelInFlight {
			t.Errorf("model in flight = true after model_returned")
		}
		mustApply(t, s, modelRequested(4))
	})
	t.Run("resumed_repeats_the_step", func(t *testing.T) {
		s := mustApply(t, stateAt(t, running), modelRequested(2))
		resumed := modelRequested(3)
		resumed.GetModelRequested().Resumed = true
		s = mustApply(t, s, resumed)
		if s.Steps != 1 || !s.ModelInFlight {
			t.Errorf("after a resumed call: steps %d, in flight %v, want 1, true", s.Steps, s.ModelInFlight)
		}
		mustApply(t, s, modelReturned(4, 1, 1))
	})
	t.Run("resumed_without_call_in_flight", func(t *testing.T) {
		for _, before := range [][]*reinv1.Event{nil, {modelRequested(2), modelReturned(3, 1, 1)}} {
			s := mustApply(t, stateAt(t, running), before...)
			resumed := modelRequested(s.Version + 1)
			resumed.GetModelRequested().Resumed = true
			got, err := Apply(s, resumed)
			if !errors.Is(err, ErrIllegalTransition) {
				t.Fatalf("after %d events: err = %v, want ErrIllegalTransition", len(before)+1, err)
			}
			assertUnchanged(t, got, s)
		}
	})
	t.Run("requested_needs_running", func(t *testing.T) {
		s := stateAt(t, needsInput)
		got, err := Apply(s, modelRequested(s.Version+1))
		if !errors.Is(err, ErrIllegalTransition) {
			t.Fatalf("err = %v, want ErrIllegalTransition", err)
		}
		assertUnchanged(t, got, s)
	})
	t.Run("terminal_clears_in_flight", func(t *testing.T) {
		s := mustApply(t, stateAt(t, running), modelRequested(2), statusChanged(3, running, cancelled))
		if s.ModelInFlight {
			t.Errorf("model in flight = true in a cancelled run")
		}
	})
}

func TestApplyCounters(t *testing.T) {
	s := mustApply(t, stateAt(t, running),
		modelRequested(2), modelReturned(3, 100, 7), toolRequested(4), toolReturned(5, ""),
		modelRequested(6), modelReturned(7, 250, 30), toolRequested(8), toolReturned(9, "no such file"),
		modelRequested(10), modelReturned(11, 400, 0), toolRequested(12),
	)
	if s.Steps != 3 {
		t.Errorf("steps = %d, want 3", s.Steps)
	}
	if s.ToolCalls != 3 {
		t.Errorf("tool calls = %d, want 3", s.ToolCalls)
	}
	if s.InputTokens != 750 || s.OutputTokens != 37 || s.Tokens() != 787 {
		t.Errorf("tokens = %d in + %d out = %d, want 750 + 37 = 787", s.InputTokens, s.OutputTokens, s.Tokens())
	}
	if s.LastError != "no such file" {
		t.Errorf("last error = %q, want the tool's error", s.LastError)
	}
	if s.Version != 12 {
		t.Errorf("version = %d, want 12", s.Version)
	}

	// A step that is requested but not yet returned counts, its tokens do not.
	s = mustApply(t, s, modelRequested(13))
	if s.Steps != 4 || s.Tokens() != 787 {
		t.Errorf("after an unanswered request: steps = %d, tokens = %d, want 4, 787", s.Steps, s.Tokens())
	}
}

// budgetPaused is a budget_reached that pauses the run for a raise.
func budgetPaused(seq uint64) *reinv1.Event {
	ev := envelope(seq)
	ev.Payload = &reinv1.Event_BudgetReached{BudgetReached: &reinv1.BudgetReached{
		Limit: "max_steps", Detail: "the run made 3 of its 3 model calls", RaiseBy: timestamppb.New(at(seq).Add(time.Hour)),
	}}
	return ev
}
