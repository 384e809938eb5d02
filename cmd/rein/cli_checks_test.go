package main

import (
	"os"
	"path/filepath"
	"testing"
)

const checksTask = `{
  "goal": "Leave done.txt in the workspace.",
  "checks": [{"name": "done", "argv": ["test", "-f", "done.txt"], "timeout": "10s"}],
  "budget": {"max_steps": 3}
}`

// checksRun runs checksTask with the model answering at once.
func checksRun(t *testing.T, db string, extra ...string) []string {
	t.Helper()
	script := `{"decision": {"final_answer": {"text": "Done."}}, "usage": {"input_tokens": 10, "output_tokens": 5}}` + "\n"
	return append([]string{"run", writeFile(t, "task.json", checksTask),
		"--model", "script:" + writeFile(t, "model.jsonl", script), "--db", db}, extra...)
}

// rein run --workspace runs the task's completion checks in the workspace.
func TestRunChecksPass(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "done.txt"), []byte("yes\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := cli(t, checksRun(t, db, "--workspace", dir)...).mustExit(t, 0)
	s := decodeOne(t, r.stdout)
	if s["status"] != "completed" {
		t.Fatalf("status = %v, want completed", s["status"])
	}
	runID, _ := s["run_id"].(string)
	var found []string
	for _, ev := range events(t, db, runID) {
		if ev["type"] == "checks_completed" {
			found = append(found, stringify(t, ev))
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d checks_completed events, want 1", len(found))
	}
	mustContain(t, "checks_completed", found[0], `"name":"done"`, `"passed":true`, "workspace_hash")
}

// Without --workspace, a task with checks is refused before anything runs.
func TestRunChecksNeedWorkspace(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	r := cli(t, checksRun(t, db)...)
	if r.code == 0 {
		t.Fatalf("a task with checks and no --workspace: exit 0; stdout:\n%s", r.stdout)
	}
	mustContain(t, "stderr", r.stderr, "checks", "--workspace")
}
