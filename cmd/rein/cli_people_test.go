package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// pausedRefund runs the refund example to its pause and returns the run ID
// and the pending proposal.
func pausedRefund(t *testing.T, db string) (string, map[string]any) {
	t.Helper()
	out := decodeOne(t, cli(t, append(exampleRun("refund", db), "--json")...).mustExit(t, exitPaused).stdout)
	pending := obj(t, out["pending"], "pending")
	return out["run_id"].(string), obj(t, pending["proposal"], "pending.proposal")
}

func TestApproveCommitsAndCarriesOn(t *testing.T) {
	db := newDB(t)
	runID, prop := pausedRefund(t, db)
	tools := "fixture:" + example("refund", "tools.json")

	// pending lists it, with its hash.
	list := cli(t, "pending", "--db", db, "--json").mustExit(t, exitOK)
	mustContain(t, "pending", list.stdout, runID, prop["proposal_id"].(string), prop["hash"].(string))

	out := decodeOne(t, cli(t, "approve", runID, prop["proposal_id"].(string), "--reason", "ok", "--db", db, "--tools", tools, "--json").mustExit(t, exitOK).stdout)
	if out["status"] != "completed" {
		t.Fatalf("after approve: status %v, want completed", out["status"])
	}
	var kinds []string
	for _, ev := range events(t, db, runID) {
		kinds = append(kinds, ev["type"].(string))
	}
	log := strings.Join(kinds, ",")
	mustContain(t, "the log", log, "approval_decided,write_dispatched,write_committed,status_changed")
	if strings.Count(log, "write_committed") != 1 {
		t.Fatalf("log %s: want exactly one write_committed", log)
	}
	// Nothing waits any more.
	if got := cli(t, "pending", "--db", db, "--json").mustExit(t, exitOK).stdout; strings.TrimSpace(got) != "[]" {
		t.Fatalf("pending after approval: %s", got)
	}
	// Approving again is refused, and changes nothing.
	before := len(events(t, db, runID))
	r := cli(t, "approve", runID, prop["proposal_id"].(string), "--db", db, "--tools", tools)
	if r.code != exitError || !strings.Contains(r.stderr, "completed") {
		t.Fatalf("second approve: exit %d, stderr %q; want 1 naming the run's status", r.code, r.stderr)
	}
	if after := len(events(t, db, runID)); after != before {
		t.Fatalf("a refused approve changed the log: %d → %d events", before, after)
	}
}

func TestApproveWrongHashChangesNothing(t *testing.T) {
	db := newDB(t)
	runID, prop := pausedRefund(t, db)
	before := len(events(t, db, runID))
	r := cli(t, "approve", runID, prop["proposal_id"].(string), "--hash", "deadbeef", "--db", db,
		"--tools", "fixture:"+example("refund", "tools.json"))
	if r.code != exitError || !strings.Contains(r.stderr, "hash") {
		t.Fatalf("approve with a wrong hash: exit %d, stderr %q", r.code, r.stderr)
	}
	if after := len(events(t, db, runID)); after != before {
		t.Fatalf("a refused approve changed the log: %d → %d events", before, after)
	}
	cli(t, "approve", "run_missing", "prop_x", "--db", db).mustExit(t, exitNotFound)
}

func TestDenyGoesOnOrEnds(t *testing.T) {
	db := newDB(t)
	runID, prop := pausedRefund(t, db)
	// The rejection is an observation; the refund script then answers.
	out := decodeOne(t, cli(t, "deny", runID, prop["proposal_id"].(string), "--reason", "not a duplicate", "--db", db, "--json").mustExit(t, exitOK).stdout)
	if out["status"] != "completed" {
		t.Fatalf("after deny: status %v, want completed (the model goes on)", out["status"])
	}
	for _, ev := range events(t, db, runID) {
		if ev["type"] == "write_dispatched" {
			t.Fatal("a rejected write was dispatched")
		}
	}

	db2 := newDB(t)
	runID2, prop2 := pausedRefund(t, db2)
	out = decodeOne(t, cli(t, "deny", runID2, prop2["proposal_id"].(string), "--end", "--db", db2, "--json").mustExit(t, exitRefused).stdout)
	if out["status"] != "denied" {
		t.Fatalf("deny --end: status %v, want denied", out["status"])
	}
}

func TestInputAndCancel(t *testing.T) {
	db := newDB(t)
	ask := `{"decision": {"ask_human": {"question": "Which invoice?"}}}`
	done := `{"decision": {"final_answer": {"text": "thanks"}}}`
	out := decodeOne(t, cli(t, append(lookupRun(t, db, ask, done), "--json")...).mustExit(t, exitPaused).stdout)
	runID := out["run_id"].(string)

	// input - reads stdin.
	var stdout, stderr bytes.Buffer
	code := Run(context.Background(), []string{"input", runID, "-", "--db", db, "--json"}, strings.NewReader("INV-42\n"), &stdout, &stderr)
	if code != exitOK {
		t.Fatalf("input: exit %d\n%s", code, stderr.String())
	}
	if got := decodeOne(t, stdout.String()); got["status"] != "completed" {
		t.Fatalf("after input: %v", got["status"])
	}
	found := false
	for _, ev := range events(t, db, runID) {
		if p, ok := ev["input_provided"].(map[string]any); ok && p["text"] == "INV-42" {
			found = true
		}
	}
	if !found {
		t.Fatal("no input_provided with the answer in the log")
	}
	// Input to a run that is not waiting, and cancel of a finished run, are refused.
	cli(t, "input", runID, "more", "--db", db).mustExit(t, exitError)
	r := cli(t, "cancel", runID, "--db", db)
	if r.code != exitError || !strings.Contains(r.stderr, "completed") {
		t.Fatalf("cancel of a completed run: exit %d, %q", r.code, r.stderr)
	}

	// Cancel of a paused run.
	db2 := newDB(t)
	out = decodeOne(t, cli(t, append(lookupRun(t, db2, ask), "--json")...).mustExit(t, exitPaused).stdout)
	got := decodeOne(t, cli(t, "cancel", out["run_id"].(string), "--reason", "no longer needed", "--db", db2, "--json").mustExit(t, exitOK).stdout)
	if got["status"] != "cancelled" {
		t.Fatalf("cancel: status %v", got["status"])
	}
}
