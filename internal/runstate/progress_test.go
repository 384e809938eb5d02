package runstate

// Tests of what the fold derives for the step loop: the open tool call, the
// calls per tool, repeated failing checks, the recorded price, and whether a
// write is in flight.

import (
	"errors"
	"testing"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

func checks(seq uint64, passed bool, tail string) *reinv1.Event {
	e := envelope(seq)
	e.Payload = &reinv1.Event_ChecksCompleted{ChecksCompleted: &reinv1.ChecksCompleted{Results: []*reinv1.CheckResult{
		{Name: "unit", Passed: passed, OutputTail: tail},
	}}}
	return e
}

func priced(ev *reinv1.Event, in, out float64) *reinv1.Event {
	ev.GetModelRequested().Price = &reinv1.ModelPrice{InputPerMtok: in, OutputPerMtok: out}
	return ev
}

func TestOpenCallAndCallsByTool(t *testing.T) {
	s := mustApply(t, stateAt(t, running), toolRequested(2))
	if s.OpenCall.GetCallId() != "call-2" || s.OpenCallTier != reinv1.ToolTier_TOOL_TIER_READ || s.CallsByTool["read_file"] != 1 {
		t.Fatalf("after tool_requested: open %v (%v), calls %v", s.OpenCall, s.OpenCallTier, s.CallsByTool)
	}
	before := s.CallsByTool
	s = mustApply(t, s, toolReturned(3, ""), toolRequested(4))
	if s.CallsByTool["read_file"] != 2 || before["read_file"] != 1 {
		t.Fatalf("calls %v, and the earlier state's %v: want 2, and the earlier map untouched", s.CallsByTool, before)
	}
	if s.OpenCall.GetCallId() != "call-4" {
		t.Fatalf("open call %v, want call-4", s.OpenCall)
	}
	// A proposal answers the call too.
	p := mustApply(t, s, approvalRequested(5, "p-1"))
	if p.OpenCall != nil {
		t.Fatalf("after approval_requested the call is still open: %v", p.OpenCall)
	}
	r := mustApply(t, s, toolReturned(5, "boom"))
	if r.OpenCall != nil || r.CallsByTool["read_file"] != 2 {
		t.Fatalf("after tool_returned: open %v, calls %v", r.OpenCall, r.CallsByTool)
	}

	// The failure twin: a tool call on a paused run is refused and counts
	// nothing.
	paused := stateAt(t, needsInput)
	if _, err := Apply(paused, toolRequested(4)); !errors.Is(err, ErrIllegalTransition) {
		t.Fatalf("tool_requested on a paused run: %v, want ErrIllegalTransition", err)
	}
	if paused.CallsByTool != nil || paused.OpenCall != nil {
		t.Fatalf("refused event changed the state: %v %v", paused.CallsByTool, paused.OpenCall)
	}
}

func TestFailingChecksRepeat(t *testing.T) {
	s := mustApply(t, stateAt(t, running), checks(2, false, "FAIL a"), checks(3, false, "FAIL a"))
	if s.FailingChecks == "" || s.FailingChecksRepeated != 2 {
		t.Fatalf("two identical failures: %q × %d, want a hash × 2", s.FailingChecks, s.FailingChecksRepeated)
	}
	other := mustApply(t, s, checks(4, false, "FAIL b"))
	if other.FailingChecks == s.FailingChecks || other.FailingChecksRepeated != 1 {
		t.Fatalf("a different failure: %q × %d, want a new hash × 1", other.FailingChecks, other.FailingChecksRepeated)
	}
	pass := mustApply(t, s, checks(4, true, "ok"))
	if pass.FailingChecks != "" || pass.FailingChecksRepeated != 0 {
		t.Fatalf("passing checks: %q × %d, want none", pass.FailingChecks, pass.FailingChecksRepeated)
	}
	// A committed write resets the count; a refused one does not.
	s = mustApply(t, s, approvalRequested(4, "p1"), statusChanged(5, running, needsApproval), decided(6, "p1", true), dispatched(7, "p1", "op1"))
	refusedEv := envelope(8)
	refusedEv.Payload = &reinv1.Event_WriteRefused{WriteRefused: &reinv1.WriteRefused{ProposalId: "p1", OperationId: "op1"}}
	if refused := mustApply(t, s, refusedEv); refused.FailingChecksRepeated != 2 {
		t.Fatalf("after a refused write the repeat count is %d, want 2 kept", refused.FailingChecksRepeated)
	}
	if done := mustApply(t, s, committed(8, "p1", "op1")); done.FailingChecks != "" || done.FailingChecksRepeated != 0 {
		t.Fatalf("after a committed write: %q × %d, want reset", done.FailingChecks, done.FailingChecksRepeated)
	}
	if ChecksHash(&reinv1.ChecksCompleted{}) != "" {
		t.Fatal("no results hash as a failure")
	}
}

func TestPriceFollowsTheLog(t *testing.T) {
	s := mustApply(t, stateAt(t, running), priced(modelRequested(2), 3, 15), modelReturned(3, 1, 1))
	if s.Price.GetInputPerMtok() != 3 {
		t.Fatalf("price %v, want the recorded one", s.Price)
	}
	s = mustApply(t, s, modelRequested(4))
	if s.Price.GetInputPerMtok() != 3 {
		t.Fatalf("a call that records no price dropped the earlier one: %v", s.Price)
	}
	s = mustApply(t, s, modelReturned(5, 1, 1), priced(modelRequested(6), 1, 2))
	if s.Price.GetInputPerMtok() != 1 || s.Price.GetOutputPerMtok() != 2 {
		t.Fatalf("price %v, want the latest recorded", s.Price)
	}
}

func TestWriteInFlight(t *testing.T) {
	s := mustApply(t, paused(t), decided(4, "p1", true))
	if s.WriteInFlight() {
		t.Fatal("approved but not dispatched: not in flight")
	}
	s = mustApply(t, s, dispatched(5, "p1", "op1"))
	if !s.WriteInFlight() {
		t.Fatal("dispatched with no outcome: in flight")
	}
	if u := mustApply(t, s, unknown(6, "p1", "op1")); u.WriteInFlight() {
		t.Fatal("an unknown outcome waits for a person: not in flight")
	}
	if c := mustApply(t, s, committed(6, "p1", "op1")); c.WriteInFlight() {
		t.Fatal("committed: not in flight")
	}
}
