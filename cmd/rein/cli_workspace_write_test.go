package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const writeTask = `{
  "goal": "Write the launch day into notes.txt.",
  "tools": [{"name": "fs.write", "tier": "TOOL_TIER_WRITE"}],
  "budget": {"max_steps": 3, "timeout": "300s"}
}`

// pausedWrite runs writeTask over a fresh workspace holding notes.txt to its
// pause for approval, and returns the workspace, run ID and proposal ID.
func pausedWrite(t *testing.T, db string) (dir, runID, propID string) {
	t.Helper()
	dir = t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("launch: tbd\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	script := `{"decision": {"tool_call": {"tool": "fs.write", "arguments": {"path": "notes.txt", "content": "launch: Tuesday\n"}, "call_id": "w1"}}}` + "\n" +
		`{"decision": {"final_answer": {"text": "Written."}}}` + "\n"
	out := decodeOne(t, cli(t, "run", writeFile(t, "task.json", writeTask), "--model", "script:"+writeFile(t, "model.jsonl", script),
		"--workspace", dir, "--db", db, "--json").mustExit(t, exitPaused).stdout)
	prop := obj(t, obj(t, out["pending"], "pending")["proposal"], "proposal")
	mustContain(t, "the preview", stringify(t, prop["preview"]), "-launch: tbd", "+launch: Tuesday")
	if b, _ := os.ReadFile(filepath.Join(dir, "notes.txt")); string(b) != "launch: tbd\n" {
		t.Fatalf("a proposal changed the file: %q", b)
	}
	return dir, out["run_id"].(string), prop["proposal_id"].(string)
}

// TestApproveWorkspaceWrite: the write path on the embedded default, end to
// end: proposed with a diff, nothing written; approved with the same
// --workspace, written once; the run completes.
func TestApproveWorkspaceWrite(t *testing.T) {
	db := newDB(t)
	dir, runID, propID := pausedWrite(t, db)
	out := decodeOne(t, cli(t, "approve", runID, propID, "--workspace", dir, "--db", db, "--json").mustExit(t, exitOK).stdout)
	if out["status"] != "completed" {
		t.Fatalf("after approve: %v, want completed", out["status"])
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "notes.txt")); string(b) != "launch: Tuesday\n" {
		t.Fatalf("notes.txt is %q after the approved write", b)
	}
	if got := eventTypes(events(t, db, runID)); strings.Count(got, "write_committed") != 1 {
		t.Fatalf("events %s, want one write_committed", got)
	}
}

// TestApproveStaleWorkspaceWrite: the twin: a file changed after the
// proposal is not overwritten; the workspace refuses the write, which is an
// observation for the model (write_refused), and the run goes on.
func TestApproveStaleWorkspaceWrite(t *testing.T) {
	db := newDB(t)
	dir, runID, propID := pausedWrite(t, db)
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("launch: Monday (edited by hand)\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := cli(t, "approve", runID, propID, "--workspace", dir, "--db", db, "--json").mustExit(t, exitOK)
	if s := decodeOne(t, r.stdout); s["status"] != "completed" {
		t.Fatalf("after a stale approve: %v, want the run carried on to its end", s["status"])
	}
	mustContain(t, "stderr", r.stderr, "write_refused", "the file changed since the proposal")
	if b, _ := os.ReadFile(filepath.Join(dir, "notes.txt")); string(b) != "launch: Monday (edited by hand)\n" {
		t.Fatalf("the person's edit was overwritten: %q", b)
	}
	got := eventTypes(events(t, db, runID))
	if strings.Contains(got, "write_committed") || !strings.Contains(got, "write_refused,status_changed,model_requested") {
		t.Fatalf("events %s, want write_refused and the run going on, with no write_committed", got)
	}
}
