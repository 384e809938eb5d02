package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// reviseRefund sends a revision of the paused refund's proposal with args
// and reason, through rein approve --arguments.
func reviseRefund(t *testing.T, db, runID, proposalID, args string) result {
	t.Helper()
	return cli(t, "approve", runID, proposalID, "--arguments", writeFile(t, "args.json", args), "--reason", "only half was charged twice",
		"--db", db, "--tools", "fixture:"+example("refund", "tools.json"), "--json")
}

// A revision of the refund from 1200.00 to 600.00 is previewed by the tool
// again: the new proposal's preview says 600.00, it carries the reviser's
// reason and, the tool having no input schema, the flag that nothing
// checked its arguments; approved, the write commits 600.00.
func TestRevisionIsPreviewedAndCommittedAsRevised(t *testing.T) {
	db := newDB(t)
	runID, prop := pausedRefund(t, db)
	r := reviseRefund(t, db, runID, prop["proposal_id"].(string),
		`{"invoice_id": "INV-42", "amount": "600.00", "currency": "EUR", "reason": "duplicate charge"}`).mustExit(t, exitPaused)
	next := obj(t, obj(t, decodeOne(t, r.stdout)["pending"], "pending")["proposal"], "pending.proposal")
	if got := obj(t, obj(t, next["preview"], "preview")["refund"], "preview.refund")["amount"]; got != "600.00" {
		t.Errorf("the revision's preview says amount %v, want 600.00: %v", got, next["preview"])
	}
	if next["revision_reason"] != "only half was charged twice" || next["unchecked_arguments"] != true {
		t.Errorf("the revision: revision_reason %v, unchecked_arguments %v; want the reason, and true for a tool with no schema",
			next["revision_reason"], next["unchecked_arguments"])
	}
	out := decodeOne(t, cli(t, "approve", runID, next["proposal_id"].(string), "--db", db, "--tools", "fixture:"+example("refund", "tools.json"), "--json").mustExit(t, exitOK).stdout)
	if out["status"] != "completed" {
		t.Fatalf("after approving the revision: %v", out["status"])
	}
	var receipts []any
	for _, ev := range events(t, db, runID) {
		if ev["type"] == "proposal_revised" && obj(t, ev["proposal_revised"], "proposal_revised")["reason"] != "only half was charged twice" {
			t.Errorf("proposal_revised has no reason: %v", ev["proposal_revised"])
		}
		if ev["type"] == "write_committed" {
			receipts = append(receipts, obj(t, ev["write_committed"], "write_committed")["receipt"])
		}
	}
	if len(receipts) != 1 || obj(t, receipts[0], "receipt")["amount"] != "600.00" {
		t.Errorf("the write committed %v, want one receipt of 600.00", receipts)
	}
}

// The twins: a revision its tool's input schema refuses, or one its tool
// cannot preview (the template names an argument it lacks), is refused,
// naming why, and stores nothing; against a schema, a revision that passes
// is not flagged unchecked.
func TestRevisionRefusedStoresNothing(t *testing.T) {
	data, err := os.ReadFile(example("refund", "task.json"))
	if err != nil {
		t.Fatal(err)
	}
	var task map[string]any
	if err := json.Unmarshal(data, &task); err != nil {
		t.Fatal(err)
	}
	for _, g := range task["tools"].([]any) {
		if g := g.(map[string]any); g["name"] == "refunds.create" {
			g["input_schema"] = map[string]any{"type": "object", "properties": map[string]any{
				"amount": map[string]any{"type": "string", "pattern": `^[0-9]+\.[0-9]{2}$`},
			}, "required": []any{"amount"}}
		}
	}
	b, _ := json.Marshal(task)
	db := newDB(t)
	args := exampleRun("refund", db, "--json")
	args[1] = writeFile(t, "task.json", string(b))
	out := decodeOne(t, cli(t, args...).mustExit(t, exitPaused).stdout)
	runID := out["run_id"].(string)
	prop := obj(t, obj(t, out["pending"], "pending")["proposal"], "pending.proposal")
	for name, c := range map[string]struct{ args, says string }{
		"a number for a string":  {`{"invoice_id": "INV-42", "amount": 600, "currency": "EUR"}`, "amount"},
		"no currency to preview": {`{"invoice_id": "INV-42", "amount": "600.00"}`, "cannot preview"},
	} {
		before := len(events(t, db, runID))
		r := reviseRefund(t, db, runID, prop["proposal_id"].(string), c.args)
		if r.code == exitOK || r.code == exitPaused || !strings.Contains(r.stderr, c.says) {
			t.Errorf("%s: exit %d, stderr %q; want a refusal naming %q", name, r.code, r.stderr, c.says)
		}
		if after := len(events(t, db, runID)); after != before {
			t.Errorf("%s: a refused revision stored %d events", name, after-before)
		}
	}
	r := reviseRefund(t, db, runID, prop["proposal_id"].(string), `{"invoice_id": "INV-42", "amount": "600.00", "currency": "EUR"}`).mustExit(t, exitPaused)
	if next := obj(t, obj(t, decodeOne(t, r.stdout)["pending"], "pending")["proposal"], "proposal"); next["unchecked_arguments"] == true {
		t.Errorf("a revision checked against the tool's schema is flagged unchecked: %v", next)
	}
}
