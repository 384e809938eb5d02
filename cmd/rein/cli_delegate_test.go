package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestDelegateExampleTree runs the delegation example and reads its tree
// back: inspect --tree, list --parent, export --tree, and evaluate, whose
// tokens count over the tree.
func TestDelegateExampleTree(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	out := decodeOne(t, cli(t, append(exampleRun("delegate", db), "--json")...).mustExit(t, exitOK).stdout)
	runID := out["run_id"].(string)

	tree := decodeOne(t, cli(t, "inspect", runID, "--tree", "--db", db, "--json").mustExit(t, exitOK).stdout)
	kids, _ := tree["children"].([]any)
	if len(kids) != 2 {
		t.Fatalf("tree has %d children, want 2: %v", len(kids), tree)
	}
	spent := obj(t, tree["tree"], "tree")
	own := num(t, tree["tokens"], "tokens")
	if runs := num(t, spent["runs"], "tree.runs"); runs != 3 || num(t, spent["tokens"], "tree.tokens") <= own {
		t.Fatalf("tree spend %v (own tokens %d): want 3 runs and more tokens than the root's own", spent, own)
	}
	list := cli(t, "list", "--parent", runID, "--db", db, "--json").mustExit(t, exitOK).stdout
	for _, k := range kids {
		mustContain(t, "list --parent", list, obj(t, k, "child")["run_id"].(string))
	}
	// Its twin: a run with no children lists none.
	child := obj(t, kids[0], "child")["run_id"].(string)
	if got := strings.TrimSpace(cli(t, "list", "--parent", child, "--db", db, "--json").mustExit(t, exitOK).stdout); got != "[]" {
		t.Fatalf("list --parent of a leaf: %s", got)
	}
	text := cli(t, "inspect", runID, "--db", db).mustExit(t, exitOK).stdout
	mustContain(t, "inspect", text, "children    2 started, 0 open", "tree spend")

	file := writeFile(t, "tree.rein", "")
	cli(t, "export", runID, "--tree", "--db", db, "-o", file).mustExit(t, exitOK)
	mustContain(t, "inspect of the export", cli(t, "inspect", file).mustExit(t, exitOK).stdout, runID)
	// --tree reads a stored run, not a file.
	cli(t, "inspect", file, "--tree").mustExit(t, exitUsage)

	suite := writeFile(t, "suite.json", `{"cases": [`+exampleCase(t, "delegate", `{"status": "completed"}`)+`]}`)
	rep := decodeOne(t, cli(t, "evaluate", suite, "--json", "--db", newDB(t)).mustExit(t, exitOK).stdout)
	trial := obj(t, evalCases(t, rep)["delegate"]["trial_results"].([]any)[0], "trial")
	if got := num(t, trial["tokens"], "trial tokens"); got != num(t, spent["tokens"], "tree tokens") {
		t.Fatalf("evaluate counted %d tokens, want the tree's %d", got, num(t, spent["tokens"], "tree tokens"))
	}
}

// TestDelegatedWritePausesTheTree: a child's write pauses it for approval;
// rein run exits paused (10), rein pending names the child with its
// parent, and approving the child commits the write once and carries the
// tree to its end.
func TestDelegatedWritePausesTheTree(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	task := writeFile(t, "task.json", `{
  "goal": "Refund the duplicate charge on INV-42.",
  "tools": [{"name": "refunds.create", "description": "Refund an amount.", "tier": "TOOL_TIER_WRITE"}],
  "delegation": {"max_children": 1, "child_models": [{"provider": "script", "name": "refunder", "script": [
    {"decision": {"tool_call": {"tool": "refunds.create", "arguments": {"invoice_id": "INV-42", "amount": "1200.00", "currency": "EUR"}, "call_id": "w1"}}},
    {"decision": {"final_answer": {"text": "refunded ch_2"}}}
  ]}]}
}`)
	script := writeFile(t, "model.jsonl", `{"decision": {"delegate": {"tasks": [{"question": "Refund charge ch_2.", "tools": [{"name": "refunds.create"}]}]}}}
{"decision": {"final_answer": {"text": "the child refunded ch_2"}}}
`)
	tools := "fixture:" + example("refund", "tools.json")
	r := cli(t, "run", task, "--model", "script:"+script, "--tools", tools, "--db", db, "--json").mustExit(t, exitPaused)
	parent := decodeOne(t, r.stdout)["run_id"].(string)
	mustContain(t, "stderr", r.stderr, "waits for a person")

	var waiting []map[string]any
	if err := json.Unmarshal([]byte(cli(t, "pending", "--db", db, "--json").mustExit(t, exitOK).stdout), &waiting); err != nil || len(waiting) != 1 {
		t.Fatalf("pending %v (%v), want the child", waiting, err)
	}
	w := waiting[0]
	if parents, _ := w["parents"].([]any); len(parents) != 1 || parents[0] != parent {
		t.Fatalf("pending child's parents %v, want [%s]", w["parents"], parent)
	}
	child := w["run_id"].(string)
	prop := obj(t, obj(t, w["pending"], "pending")["proposal"], "proposal")["proposal_id"].(string)
	out := decodeOne(t, cli(t, "approve", child, prop, "--db", db, "--tools", tools, "--json").mustExit(t, exitOK).stdout)
	if out["run_id"] != parent || out["status"] != "completed" {
		t.Fatalf("after approve: %v, want the parent completed", out)
	}
	var commits int
	for _, ev := range events(t, db, child) {
		if ev["type"] == "write_committed" {
			commits++
		}
	}
	if commits != 1 {
		t.Fatalf("%d write_committed, want 1", commits)
	}
	// The twin: approving it again is refused.
	cli(t, "approve", child, prop, "--db", db, "--tools", tools).mustExit(t, exitError)
}
