package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
)

// refundTask is the refund example's task with its budget's timeout and
// its approval's proposal_ttl set.
func refundTask(t *testing.T, timeout, ttl string) string {
	t.Helper()
	data, err := os.ReadFile(example("refund", "task.json"))
	if err != nil {
		t.Fatal(err)
	}
	var task map[string]any
	if err := json.Unmarshal(data, &task); err != nil {
		t.Fatal(err)
	}
	obj(t, task["budget"], "budget")["timeout"] = timeout
	obj(t, task["approval"], "approval")["proposal_ttl"] = ttl
	out, err := json.Marshal(task)
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, "task.json", string(out))
}

// jsonTime parses a time the JSON output gives.
func jsonTime(t *testing.T, v any, what string) time.Time {
	t.Helper()
	s, _ := v.(string)
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("%s = %#v: %v", what, v, err)
	}
	return at
}

// A proposal whose TTL outlives the run's deadline waits until the
// deadline, and every face says so: rein run's pending, rein pending (JSON
// and text) and rein inspect give the deadline and "run_deadline", not the
// proposal's expiry an hour away; rein run warns of the contract.
func TestPauseEndsAtTheRunsDeadline(t *testing.T) {
	db := newDB(t)
	args := exampleRun("refund", db, "--json")
	args[1] = refundTask(t, "120s", "3600s")
	r := cli(t, args...).mustExit(t, exitPaused)
	mustContain(t, "rein run's stderr", r.stderr, "warning: contract.approval.proposal_ttl (1h0m0s) outlives contract.budget.timeout (2m0s)")
	out := decodeOne(t, r.stdout)
	pending := obj(t, out["pending"], "pending")
	deadline := jsonTime(t, out["deadline"], "deadline")
	if by := pending["ends_by"]; by != "run_deadline" {
		t.Errorf("pending.ends_by = %v, want run_deadline", by)
	}
	if at := jsonTime(t, pending["ends_at"], "pending.ends_at"); !at.Equal(deadline) {
		t.Errorf("pending.ends_at = %v, want the run's deadline %v", at, deadline)
	}
	if exp := jsonTime(t, obj(t, pending["proposal"], "pending.proposal")["expires_at"], "expires_at"); !exp.After(deadline) {
		t.Errorf("the proposal expires at %v, not after the deadline %v: the test proves nothing", exp, deadline)
	}
	runID := out["run_id"].(string)
	var waiting []map[string]any
	if err := json.Unmarshal([]byte(cli(t, "pending", "--db", db, "--json").mustExit(t, exitOK).stdout), &waiting); err != nil || len(waiting) != 1 {
		t.Fatalf("rein pending --json: %v %v", waiting, err)
	}
	if p := obj(t, waiting[0]["pending"], "pending"); p["ends_by"] != "run_deadline" || !jsonTime(t, p["ends_at"], "ends_at").Equal(deadline) {
		t.Errorf("rein pending --json: %v, want ends_at %v by run_deadline", p, deadline)
	}
	text := cli(t, "pending", "--db", db).mustExit(t, exitOK).stdout
	mustContain(t, "rein pending", text, runID, "ends "+deadline.UTC().Format(time.RFC3339)+" by run_deadline")
	inspect := cli(t, "inspect", runID, "--db", db).mustExit(t, exitOK).stdout
	mustContain(t, "rein inspect", inspect, "ends "+deadline.UTC().Format(time.RFC3339)+", the run's deadline")
}

// The twin: a TTL shorter than the run's timeout ends the pause when the
// proposal expires, and the contract draws no warning.
func TestPauseEndsWhenTheProposalExpires(t *testing.T) {
	db := newDB(t)
	args := exampleRun("refund", db, "--json")
	args[1] = refundTask(t, "3600s", "600s")
	r := cli(t, args...).mustExit(t, exitPaused)
	if strings.Contains(r.stderr, "warning") {
		t.Errorf("rein run warned of a contract whose numbers agree:\n%s", r.stderr)
	}
	out := decodeOne(t, r.stdout)
	pending := obj(t, out["pending"], "pending")
	exp := jsonTime(t, obj(t, pending["proposal"], "pending.proposal")["expires_at"], "expires_at")
	if by := pending["ends_by"]; by != "proposal_ttl" {
		t.Errorf("pending.ends_by = %v, want proposal_ttl", by)
	}
	if at := jsonTime(t, pending["ends_at"], "pending.ends_at"); !at.Equal(exp) {
		t.Errorf("pending.ends_at = %v, want the proposal's expiry %v", at, exp)
	}
	if deadline := jsonTime(t, out["deadline"], "deadline"); !exp.Before(deadline) {
		t.Errorf("the proposal expires at %v, not before the deadline %v: the test proves nothing", exp, deadline)
	}
	inspect := cli(t, "inspect", out["run_id"].(string), "--db", db).mustExit(t, exitOK).stdout
	mustContain(t, "rein inspect", inspect, "ends "+exp.UTC().Format(time.RFC3339)+", when the proposal expires")
}
