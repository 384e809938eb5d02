package runstate

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
)

// allStatuses is every status a run can be in.
var allStatuses = []reinv1.RunStatus{
	running, needsInput, needsApproval,
	completed, exhausted, failed, denied, expired, cancelled,
}

// designTransitions is DESIGN §2's table, written out independently of
// transitions.go so that a change to either is caught.
var designTransitions = map[[2]reinv1.RunStatus]bool{
	{running, completed}:       true,
	{running, needsInput}:      true,
	{running, needsApproval}:   true,
	{running, exhausted}:       true,
	{running, failed}:          true,
	{running, denied}:          true,
	{running, cancelled}:       true,
	{needsInput, running}:      true,
	{needsInput, exhausted}:    true,
	{needsInput, cancelled}:    true,
	{needsApproval, running}:   true,
	{needsApproval, denied}:    true,
	{needsApproval, expired}:   true,
	{needsApproval, exhausted}: true,
	{needsApproval, cancelled}: true,
}

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

func TestLegalMatchesDesign(t *testing.T) {
	for _, from := range append(allStatuses, unspecified) {
		for _, to := range append(allStatuses, unspecified) {
			want := designTransitions[[2]reinv1.RunStatus{from, to}]
			if got := Legal(from, to); got != want {
				t.Errorf("Legal(%s, %s) = %v, want %v", StatusName(from), StatusName(to), got, want)
			}
		}
	}
	for _, s := range allStatuses {
		_, hasExits := transitions[s]
		if Terminal(s) == hasExits {
			t.Errorf("Terminal(%s) = %v, but the table has exits: %v", StatusName(s), Terminal(s), hasExits)
		}
	}
}

func TestApplyLegalTransitions(t *testing.T) {
	n := 0
	for _, from := range allStatuses {
		for _, to := range transitions[from] {
			n++
			t.Run(StatusName(from)+"_to_"+StatusName(to), func(t *testing.T) {
				s := stateAt(t, from)
				switch to {
				case needsApproval:
					s = mustApply(t, s, approvalRequested(s.Version+1, "p-2"))
				case needsInput:
					s = mustApply(t, s, inputRequested(s.Version+1))
				}
				ev := statusChanged(s.Version+1, from, to)
				orig := proto.Clone(ev)
				got, err := Apply(s, ev)
				if err != nil {
					t.Fatalf("Apply: %v", err)
				}
				if !proto.Equal(ev, orig) {
					t.Errorf("Apply mutated the event: %v", ev)
				}
				if got.Status != to {
					t.Errorf("status = %s, want %s", StatusName(got.Status), StatusName(to))
				}
				if got.Version != s.Version+1 {
					t.Errorf("version = %d, want %d", got.Version, s.Version+1)
				}
				if got.StatusReason != "test "+StatusName(to) {
					t.Errorf("status reason = %q", got.StatusReason)
				}
				if !got.UpdatedAt.Equal(at(got.Version)) {
					t.Errorf("updated at = %v, want %v", got.UpdatedAt, at(got.Version))
				}
				switch {
				case to == needsApproval:
					if got.Pending.GetProposal().GetProposalId() != "p-2" {
						t.Errorf("pending = %v, want proposal p-2", got.Pending)
					}
				case to == needsInput:
					if got.Pending.GetQuestion() == nil {
						t.Errorf("pending = %v, want a question", got.Pending)
					}
				case got.Pending != nil:
					t.Errorf("pending = %v after %s, want none", got.Pending, StatusName(to))
				}
				switch to {
				case completed:
					if got.Result.GetText() != "done" {
						t.Errorf("result = %v, want done", got.Result)
					}
				case failed:
					if got.LastError != "model client: quota" {
						t.Errorf("last error = %q", got.LastError)
					}
				}
			})
		}
	}
	if n != len(designTransitions) {
		t.Errorf("the table has %d transitions, DESIGN §2 has %d", n, len(designTransitions))
	}
}

func TestApplyIllegalTransitions(t *testing.T) {
	for _, from := range allStatuses {
		for _, to := range append(allStatuses, unspecified) {
			if designTransitions[[2]reinv1.RunStatus{from, to}] {
				continue
			}
			t.Run(StatusName(from)+"_to_"+StatusName(to), func(t *testing.T) {
				s := stateAt(t, from)
				want := ErrIllegalTransition
				if Terminal(from) {
					want = ErrTerminal
				}
				got, err := Apply(s, statusChanged(s.Version+1, from, to))
				if !errors.Is(err, want) {
					t.Fatalf("Apply: err = %v, want %v", err, want)
				}
				assertUnchanged(t, got, s)
			})
		}
	}
}

// TestApplyPauseNeedsPendingAction is the failure twin of the legal pauses:
// without the proposal or question first, the pause is refused.
func TestApplyPauseNeedsPendingAction(t *testing.T) {
	tests := []struct {
		name   string
		before []*reinv1.Event
		to     reinv1.RunStatus
	}{
		{"needs_approval_without_proposal", nil, needsApproval},
		{"needs_approval_after_question", []*reinv1.Event{inputRequested(2)}, needsApproval},
		{"needs_input_without_question", nil, needsInput},
		{"needs_input_after_proposal", []*reinv1.Event{approvalRequested(2, "p-1")}, needsInput},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := mustApply(t, stateAt(t, running), tc.before...)
			got, err := Apply(s, statusChanged(s.Version+1, running, tc.to))
			if !errors.Is(err, ErrIllegalTransition) {
				t.Fatalf("err = %v, want ErrIllegalTransition", err)
			}
			assertUnchanged(t, got, s)
		})
	}
}

func TestApplyStatusChangedFromMismatch(t *testing.T) {
	tests := []struct {
		name          string
		status        reinv1.RunStatus
		claimFrom, to reinv1.RunStatus
	}{
		{"running_claims_needs_input", running, needsInput, running},
		{"running_claims_needs_approval", running, needsApproval, denied},
		{"needs_input_claims_running", needsInput, running, cancelled},
		{"needs_approval_claims_needs_input", needsApproval, needsInput, running},
		{"needs_input_claims_unspecified", needsInput, unspecified, running},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := stateAt(t, tc.status)
			got, err := Apply(s, statusChanged(s.Version+1, tc.claimFrom, tc.to))
			if !errors.Is(err, ErrIllegalTransition) {
				t.Fatalf("err = %v, want ErrIllegalTransition", err)
			}
			assertUnchanged(t, got, s)
		})
	}
	// The twin: the same change with the right from is accepted.
	s := stateAt(t, needsInput)
	mustApply(t, s, statusChanged(s.Version+1, needsInput, cancelled))
}

func TestApplySequence(t *testing.T) {
	mid := mustApply(t, stateAt(t, running), modelRequested(2), modelReturned(3, 1, 1))
	tests := []struct {
		name string
		s    State
		ev   *reinv1.Event
	}{
		{"first_zero", State{}, runStarted(0)},
		{"first_two", State{}, runStarted(2)},
		{"zero", mid, modelRequested(0)},
		{"repeat", mid, modelRequested(mid.Version)},
		{"earlier", mid, modelRequested(1)},
		{"gap", mid, modelRequested(mid.Version + 2)},
		{"far_ahead", mid, modelRequested(1 << 40)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Apply(tc.s, tc.ev)
			if !errors.Is(err, ErrSequence) {
				t.Fatalf("err = %v, want ErrSequence", err)
			}
			assertUnchanged(t, got, tc.s)
		})
	}
	// The twin: version + 1 is accepted.
	if got := mustApply(t, mid, modelRequested(mid.Version+1)); got.Version != mid.Version+1 {
		t.Errorf("version = %d, want %d", got.Version, mid.Version+1)
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

func TestApplyAfterTerminal(t *testing.T) {
	next := map[string]func(seq uint64) *reinv1.Event{
		"run_started":     runStarted,
		"model_requested": modelRequested,
		"model_returned":  func(seq uint64) *reinv1.Event { return modelReturned(seq, 1, 1) },
		"tool_requested":  toolRequested,
		"input_requested": inputRequested,
		"budget_reached":  budgetReached,
		"no_payload":      envelope,
	}
	for _, status := range allStatuses {
		if !Terminal(status) {
			continue
		}
		for name, mk := range next {
			t.Run(StatusName(status)+"/"+name, func(t *testing.T) {
				s := stateAt(t, status)
				got, err := Apply(s, mk(s.Version+1))
				if !errors.Is(err, ErrTerminal) {
					t.Fatalf("err = %v, want ErrTerminal", err)
				}
				assertUnchanged(t, got, s)
			})
		}
	}
	// The twin: a paused run still takes a budget_reached.
	for _, status := range []reinv1.RunStatus{running, needsInput, needsApproval} {
		s := stateAt(t, status)
		mustApply(t, s, budgetReached(s.Version+1))
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

func TestApplyAll(t *testing.T) {
	good := []*reinv1.Event{
		runStarted(1), modelRequested(2), modelReturned(3, 10, 2), toolRequested(4),
		approvalRequested(5, "p-1"), statusChanged(6, running, needsApproval),
	}
	t.Run("ok", func(t *testing.T) {
		got, err := ApplyAll(State{}, good)
		if err != nil {
			t.Fatalf("ApplyAll: %v", err)
		}
		want := mustApply(t, State{}, good...)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("ApplyAll = %+v, want %+v", got, want)
		}
		if got.Version != 6 || got.Status != needsApproval {
			t.Errorf("version %d status %s, want 6 needs_approval", got.Version, StatusName(got.Status))
		}
	})

	bad := map[string]*reinv1.Event{
		"sequence": modelRequested(9),
		"illegal":  statusChanged(0, running, expired),
		"invalid":  envelope(0),
	}
	for i := range good {
		for kind, ev := range bad {
			t.Run(fmt.Sprintf("fail_at_%d_%s", i, kind), func(t *testing.T) {
				events := append([]*reinv1.Event(nil), good...)
				broken := proto.Clone(ev).(*reinv1.Event)
				if kind != "sequence" {
					broken.Sequence = uint64(i + 1)
				}
				events[i] = broken
				got, err := ApplyAll(State{}, events)
				if err == nil {
					t.Fatal("ApplyAll: err = nil, want an error")
				}
				assertUnchanged(t, got, State{})

				// From a non-zero start too.
				from := mustApply(t, State{}, good[:i]...)
				got, err = ApplyAll(from, events[i:])
				if err == nil {
					t.Fatal("ApplyAll from a run: err = nil, want an error")
				}
				assertUnchanged(t, got, from)
			})
		}
	}
	t.Run("fail_at_last_of_many", func(t *testing.T) {
		s := stateAt(t, running)
		events := []*reinv1.Event{modelRequested(2), modelReturned(3, 5, 5), modelRequested(4), modelRequested(5)}
		got, err := ApplyAll(s, events)
		if !errors.Is(err, ErrIllegalTransition) {
			t.Fatalf("err = %v, want ErrIllegalTransition", err)
		}
		assertUnchanged(t, got, s)
	})
}

func TestStateProtoRoundTrip(t *testing.T) {
	full := State{
		RunID:            testRunID,
		Status:           needsApproval,
		StatusReason:     "write proposed",
		Version:          42,
		Contract:         testContract(),
		Principal:        "alice",
		Tenant:           "acme",
		RequestID:        "req-1",
		Steps:            7,
		InputTokens:      1234,
		OutputTokens:     567,
		ToolCalls:        5,
		CostUSD:          0.125,
		Deadline:         epoch.Add(90 * time.Minute),
		ModelInFlight:    true,
		ApprovedWrite:    &reinv1.Proposal{ProposalId: "p-0", Tool: "write_file", Hash: "def", RunVersion: 30},
		WriteOperationID: "op_p-0",
		Pending: &reinv1.PendingAction{Action: &reinv1.PendingAction_Proposal{Proposal: &reinv1.Proposal{
			ProposalId: "p-1", Tool: "write_file", Hash: "abc", RunVersion: 41,
		}}},
		Result:    &reinv1.FinalAnswer{Text: "done", Data: structpb.NewNumberValue(3)},
		LastError: "no such file",
		CreatedAt: epoch,
		UpdatedAt: epoch.Add(time.Minute + 7*time.Nanosecond),
	}
	// Every field is set, so a field added to State without a round trip
	// fails here.
	v := reflect.ValueOf(full)
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Fatalf("test state leaves %s zero; set it", v.Type().Field(i).Name)
		}
	}

	check := func(t *testing.T, got State) {
		t.Helper()
		if !stateEqual(got, full) {
			t.Errorf("round trip:\n got  %+v\n want %+v", got, full)
		}
	}
	t.Run("with_contract", func(t *testing.T) {
		check(t, FromProto(full.Proto(true), nil))
	})
	t.Run("contract_apart", func(t *testing.T) {
		r := full.Proto(false)
		if r.Contract != nil {
			t.Errorf("Proto(false) carries the contract")
		}
		check(t, FromProto(r, full.Contract))
	})
	t.Run("through_bytes", func(t *testing.T) {
		b, err := proto.Marshal(full.Proto(false))
		if err != nil {
			t.Fatal(err)
		}
		var r reinv1.Run
		if err := proto.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		check(t, FromProto(&r, testContract()))
	})
	t.Run("zero_times_stay_zero", func(t *testing.T) {
		s := full
		s.Deadline, s.CreatedAt, s.UpdatedAt = time.Time{}, time.Time{}, time.Time{}
		r := s.Proto(true)
		if r.Deadline != nil || r.CreatedAt != nil || r.UpdatedAt != nil {
			t.Errorf("zero times encoded: %v %v %v", r.Deadline, r.CreatedAt, r.UpdatedAt)
		}
		got := FromProto(r, nil)
		if !got.Deadline.IsZero() || !got.CreatedAt.IsZero() || !got.UpdatedAt.IsZero() {
			t.Errorf("zero times decoded as %v %v %v", got.Deadline, got.CreatedAt, got.UpdatedAt)
		}
	})
	t.Run("a_folded_run", func(t *testing.T) {
		s := mustApply(t, stateAt(t, running), modelRequested(2), modelReturned(3, 9, 4), toolRequested(4),
			approvalRequested(5, "p-9"), modelRequested(6))
		if !s.ModelInFlight {
			t.Fatal("expected a model call in flight")
		}
		if got := FromProto(s.Proto(true), nil); !stateEqual(got, s) {
			t.Errorf("round trip:\n got  %+v\n want %+v", got, s)
		}
	})
}

// stateEqual compares states field by field: protos by value, times by
// instant.
func stateEqual(a, b State) bool {
	return a.RunID == b.RunID && a.Status == b.Status && a.StatusReason == b.StatusReason &&
		a.Version == b.Version && proto.Equal(a.Contract, b.Contract) &&
		a.Principal == b.Principal && a.Tenant == b.Tenant && a.RequestID == b.RequestID &&
		a.Steps == b.Steps && a.InputTokens == b.InputTokens && a.OutputTokens == b.OutputTokens &&
		a.ToolCalls == b.ToolCalls && a.Deadline.Equal(b.Deadline) && a.ModelInFlight == b.ModelInFlight &&
		proto.Equal(a.Pending, b.Pending) && proto.Equal(a.Result, b.Result) && a.LastError == b.LastError &&
		a.CreatedAt.Equal(b.CreatedAt) && a.UpdatedAt.Equal(b.UpdatedAt)
}
