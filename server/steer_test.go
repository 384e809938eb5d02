package server

import (
	"context"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// lookupCall is a scripted reply that reads the contract's lookup tool,
// answered after delay.
func lookupCall(delay time.Duration) *reinv1.ScriptedReply {
	r := decision(&reinv1.Decision{Action: &reinv1.Decision_ToolCall{ToolCall: &reinv1.ToolCall{
		Tool: "lookup", CallId: "c1", Arguments: &structpb.Struct{},
	}}})
	r.DelayMs = uint32(delay.Milliseconds())
	return r
}

// waitRest watches a run from after its version after until it pauses or
// ends, and returns it.
func (s *tcpServer) waitRest(t *testing.T, who, runID string, after uint64) *reinv1.Run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := s.client.WatchRun(ctx, &reinv1.WatchRunRequest{RunId: runID, AfterSequence: after}, as(who))
	if err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatalf("watch ended before the run paused or ended: %v", err)
		}
		if sc := ev.GetEvent().GetStatusChanged(); sc != nil && sc.GetTo() != reinv1.RunStatus_RUN_STATUS_RUNNING {
			got, err := s.client.GetRun(ctx, &reinv1.GetRunRequest{RunId: runID}, as(who))
			if err != nil {
				t.Fatal(err)
			}
			return got.GetRun()
		}
	}
}

// A message to a running run over the API: the operator may send it (once
// per request ID), a viewer or an approver may not, another tenant finds
// no run; the run's log records it with its sender, and a run that ended
// takes none.
func TestSteerRunRoles(t *testing.T) {
	s := newTCPServer(t, Config{Directory: testDirectory(t)})
	ctx := context.Background()
	resp, err := s.client.StartRun(ctx, &reinv1.StartRunRequest{RequestId: rand.Text(),
		Contract: contract(nil, lookupCall(time.Second), final("done"))}, as("a-operator"))
	if err != nil {
		t.Fatal(err)
	}
	runID := resp.GetRun().GetRunId()
	req := &reinv1.SteerRunRequest{RunId: runID, Text: "use the EUR ledger", RequestId: "steer-1"}
	for who, want := range map[string]codes.Code{"a-viewer": codes.PermissionDenied, "a-approver": codes.PermissionDenied, "b-operator": codes.NotFound} {
		if _, err := s.client.SteerRun(ctx, req, as(who)); status.Code(err) != want {
			t.Errorf("SteerRun as %s: %v, want %s", who, err, want)
		}
	}
	got, err := s.client.SteerRun(ctx, req, as("a-operator"))
	if err != nil || !got.GetCreated() {
		t.Fatalf("SteerRun as the operator: created %v, %v", got.GetCreated(), err)
	}
	again, err := s.client.SteerRun(ctx, req, as("a-admin"))
	if err != nil || again.GetCreated() {
		t.Errorf("SteerRun again with its request ID: created %v, %v; want the run, nothing recorded", again.GetCreated(), err)
	}
	run := s.waitRest(t, "a-operator", runID, 0)
	if run.GetStatus() != reinv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Fatalf("run is %v, want completed", run.GetStatus())
	}
	evs, err := s.client.ListEvents(ctx, &reinv1.ListEventsRequest{RunId: runID}, as("a-viewer"))
	if err != nil {
		t.Fatal(err)
	}
	var steered []*reinv1.Event
	for _, ev := range evs.GetEvents() {
		if ev.GetRunSteered() != nil {
			steered = append(steered, ev)
		}
	}
	if len(steered) != 1 || steered[0].GetActor() != "principal:a-operator" || steered[0].GetRunSteered().GetText() != "use the EUR ledger" {
		t.Errorf("run_steered events %v, want the operator's one message", steered)
	}
	_, err = s.client.SteerRun(ctx, &reinv1.SteerRunRequest{RunId: runID, Text: "more", RequestId: "steer-2"}, as("a-operator"))
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "ended") {
		t.Errorf("SteerRun on a completed run: %v, want FailedPrecondition saying it ended", err)
	}
	if _, err := s.client.SteerRun(ctx, &reinv1.SteerRunRequest{RunId: runID, RequestId: "steer-3"}, as("a-operator")); status.Code(err) != codes.InvalidArgument {
		t.Errorf("SteerRun with no text: %v, want InvalidArgument", err)
	}
}

// A run paused on its budget is raised over the API by an approver or an
// operator, not a viewer; a raise that leaves the limit reached is
// refused and changes nothing; the run then carries on to its end.
func TestRaiseBudgetRoles(t *testing.T) {
	s := newTCPServer(t, Config{Directory: testDirectory(t)})
	ctx := context.Background()
	c := contract(nil, lookupCall(0), final("done"))
	c.Budget = &reinv1.Budget{MaxSteps: 1, OnExhausted: reinv1.BudgetAction_BUDGET_ACTION_PAUSE}
	run := s.startAs(t, "a-operator", c)
	if run.GetStatus() != reinv1.RunStatus_RUN_STATUS_NEEDS_BUDGET || run.GetPending().GetBudget().GetLimit() != "max_steps" {
		t.Fatalf("run is %v pending %v, want needs_budget on max_steps", run.GetStatus(), run.GetPending())
	}
	raise := &reinv1.RaiseBudgetRequest{RunId: run.GetRunId(), AddSteps: 1}
	for who, want := range map[string]codes.Code{"a-viewer": codes.PermissionDenied, "b-operator": codes.NotFound} {
		if _, err := s.client.RaiseBudget(ctx, raise, as(who)); status.Code(err) != want {
			t.Errorf("RaiseBudget as %s: %v, want %s", who, err, want)
		}
	}
	_, err := s.client.RaiseBudget(ctx, &reinv1.RaiseBudgetRequest{RunId: run.GetRunId(), AddCostUsd: 1}, as("a-approver"))
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "max_steps") {
		t.Errorf("a raise that leaves max_steps reached: %v, want FailedPrecondition naming it", err)
	}
	if got, _ := s.client.GetRun(ctx, &reinv1.GetRunRequest{RunId: run.GetRunId()}, as("a-viewer")); got.GetRun().GetVersion() != run.GetVersion() {
		t.Errorf("a refused raise changed the run: version %d → %d", run.GetVersion(), got.GetRun().GetVersion())
	}
	for name, r := range map[string]*reinv1.RaiseBudgetRequest{
		"a million dollars and one": {RunId: run.GetRunId(), AddCostUsd: 1000001},
		"a negative amount":         {RunId: run.GetRunId(), AddCostUsd: -1},
		"two years":                 {RunId: run.GetRunId(), ExtendDeadline: durationpb.New(2 * 365 * 24 * time.Hour)},
	} {
		if _, err := s.client.RaiseBudget(ctx, r, as("a-approver")); status.Code(err) != codes.InvalidArgument {
			t.Errorf("a raise of %s: %v, want InvalidArgument", name, err)
		}
	}
	raised, err := s.client.RaiseBudget(ctx, raise, as("a-approver"))
	if err != nil {
		t.Fatalf("RaiseBudget as an approver: %v", err)
	}
	if raised.GetRun().GetBudgetRaised().GetSteps() != 1 {
		t.Errorf("budget_raised = %v, want 1 step", raised.GetRun().GetBudgetRaised())
	}
	if end := s.waitRest(t, "a-operator", run.GetRunId(), raised.GetRun().GetVersion()); end.GetStatus() != reinv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Errorf("after the raise the run is %v, want completed", end.GetStatus())
	}
}
