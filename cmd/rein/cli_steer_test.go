package main

import (
	"strings"
	"testing"
)

// pausingTask is a task whose run reads once and pauses on its budget
// before the second model call.
func pausingTask(t *testing.T) string {
	return writeFile(t, "task.json", `{
  "goal": "look the invoice up, then answer",
  "tools": [{"name": "lookup", "tier": "TOOL_TIER_READ"}],
  "budget": {"max_steps": 1, "on_exhausted": "BUDGET_ACTION_PAUSE"},
  "model": {"provider": "script", "script": [
    {"decision": {"tool_call": {"tool": "lookup", "call_id": "c1", "arguments": {}}}},
    {"decision": {"final_answer": {"text": "paid"}}}
  ]}
}`)
}

func lookupTools(t *testing.T) string {
	return "fixture:" + writeFile(t, "tools.json", `{"lookup": [{"output": "INV-42 paid"}]}`)
}

// A run paused on its budget exits 10, is listed as waiting for a budget,
// refuses a raise that leaves its limit reached (exit 1, nothing
// recorded), and carries on to its end after a raise (exit 0).
func TestBudgetRaisesAPausedRun(t *testing.T) {
	db := newDB(t)
	tools := lookupTools(t)
	out := decodeOne(t, cli(t, "run", pausingTask(t), "--db", db, "--tools", tools, "--json").mustExit(t, exitPaused).stdout)
	runID := out["run_id"].(string)
	if out["status"] != "needs_budget" {
		t.Fatalf("status %v, want needs_budget", out["status"])
	}
	mustContain(t, "pending", cli(t, "pending", "--db", db).mustExit(t, exitOK).stdout, runID, "budget", "max_steps")
	// Without --json, stderr says what answers the pause.
	r := cli(t, "run", pausingTask(t), "--db", db, "--tools", tools).mustExit(t, exitPaused)
	mustContain(t, "run's stderr", r.stderr, "is needs_budget (max_steps: ", "raise it: rein budget run_", "--add-steps N")

	cli(t, "budget", runID, "--db", db, "--tools", tools).mustExit(t, exitUsage)
	before := len(events(t, db, runID))
	r = cli(t, "budget", runID, "--add-usd", "1", "--db", db, "--tools", tools)
	if r.code != exitError || !strings.Contains(r.stderr, "--add-steps") {
		t.Fatalf("a raise of dollars for a run paused on max_steps: exit %d, stderr %q; want 1 naming --add-steps", r.code, r.stderr)
	}
	if after := len(events(t, db, runID)); after != before {
		t.Fatalf("a refused raise changed the log: %d → %d events", before, after)
	}

	out = decodeOne(t, cli(t, "budget", runID, "--add-steps", "1", "--reason", "worth it", "--db", db, "--tools", tools, "--json").mustExit(t, exitOK).stdout)
	if out["status"] != "completed" {
		t.Fatalf("after the raise: status %v, want completed", out["status"])
	}
	var kinds []string
	for _, ev := range events(t, db, runID) {
		kinds = append(kinds, ev["type"].(string))
	}
	mustContain(t, "the log", strings.Join(kinds, ","), "budget_reached,status_changed,budget_raised,status_changed,model_requested")
}

// A message to a paused run is refused naming the command that answers
// it, and one to a run that ended says so; neither records anything.
func TestSteerRefusesPausedAndEnded(t *testing.T) {
	db := newDB(t)
	tools := lookupTools(t)
	out := decodeOne(t, cli(t, "run", pausingTask(t), "--db", db, "--tools", tools, "--json").mustExit(t, exitPaused).stdout)
	runID := out["run_id"].(string)
	before := len(events(t, db, runID))
	r := cli(t, "steer", runID, "use the EUR ledger", "--db", db)
	if r.code != exitError || !strings.Contains(r.stderr, "rein budget") {
		t.Fatalf("steer of a run paused on its budget: exit %d, stderr %q; want 1 naming rein budget", r.code, r.stderr)
	}
	cli(t, "budget", runID, "--add-steps", "1", "--db", db, "--tools", tools).mustExit(t, exitOK)
	r = cli(t, "steer", runID, "too late", "--db", db)
	if r.code != exitError || !strings.Contains(r.stderr, "ended") {
		t.Fatalf("steer of a completed run: exit %d, stderr %q; want 1 saying it ended", r.code, r.stderr)
	}
	if got := len(events(t, db, runID)); got != before+5 {
		t.Errorf("the log has %d events, want %d: the raise's 2 and 3 of the run's, no message", got, before+5)
	}
	cli(t, "steer", runID, "", "--db", db).mustExit(t, exitUsage)
	cli(t, "steer", "run_missing", "hello", "--db", db).mustExit(t, exitNotFound)
}

// rein approve --arguments revises the pending proposal: it prints the run
// waiting for approval of the revision (exit 10), which then is approved
// like any proposal; arguments that are not a JSON object are refused
// (exit 2) and the superseded proposal can no longer be approved (exit 1).
func TestApproveWithEditedArguments(t *testing.T) {
	db := newDB(t)
	runID, prop := pausedRefund(t, db)
	tools := "fixture:" + example("refund", "tools.json")
	oldID := prop["proposal_id"].(string)
	bad := writeFile(t, "bad.json", `["not", "an", "object"]`)
	cli(t, "approve", runID, oldID, "--arguments", bad, "--db", db, "--tools", tools).mustExit(t, exitUsage)

	edited := writeFile(t, "edited.json", `{"invoice_id": "INV-42", "amount": "1000.00", "currency": "EUR", "reason": "duplicate charge, less the fee"}`)
	out := decodeOne(t, cli(t, "approve", runID, oldID, "--arguments", edited, "--db", db, "--tools", tools, "--json").mustExit(t, exitPaused).stdout)
	revised := obj(t, obj(t, out["pending"], "pending")["proposal"], "pending.proposal")
	newID := revised["proposal_id"].(string)
	if newID == oldID || revised["revised_by"] == nil || obj(t, revised["arguments"], "arguments")["amount"] != "1000.00" {
		t.Fatalf("revised proposal %v: want a new ID, its reviser and the new amount", revised)
	}
	if r := cli(t, "approve", runID, oldID, "--hash", prop["hash"].(string), "--db", db, "--tools", tools); r.code != exitError {
		t.Fatalf("approving the superseded proposal: exit %d, stderr %q; want 1", r.code, r.stderr)
	}
	out = decodeOne(t, cli(t, "approve", runID, newID, "--db", db, "--tools", tools, "--json").mustExit(t, exitOK).stdout)
	if out["status"] != "completed" {
		t.Fatalf("after approving the revision: %v", out["status"])
	}
	var kinds []string
	for _, ev := range events(t, db, runID) {
		kinds = append(kinds, ev["type"].(string))
	}
	mustContain(t, "the log", strings.Join(kinds, ","), "approval_requested,status_changed,proposal_revised,approval_decided,write_dispatched,write_committed")
}
