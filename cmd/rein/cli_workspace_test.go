package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const workspaceTask = `{
  "goal": "Say what the notes file says.",
  "tools": [{"name": "fs.read", "tier": "TOOL_TIER_READ"}],
  "budget": {"max_steps": 3, "timeout": "120s"}
}`

// workspaceRun runs workspaceTask on db with the file tools over a fresh
// workspace holding notes.txt; the model reads path, then answers.
func workspaceRun(t *testing.T, db, path string) []string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("the launch is on Tuesday\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	script := `{"decision": {"tool_call": {"tool": "fs.read", "arguments": {"path": "` + path + `"}}}, "usage": {"input_tokens": 10, "output_tokens": 5}}` + "\n" +
		`{"decision": {"final_answer": {"text": "Tuesday."}}, "usage": {"input_tokens": 10, "output_tokens": 5}}` + "\n"
	return []string{"run", writeFile(t, "task.json", workspaceTask),
		"--model", "script:" + writeFile(t, "model.jsonl", script),
		"--workspace", dir, "--db", db}
}

// toolReturned is the one tool_returned event of the run in stdout.
func toolReturned(t *testing.T, db, stdout string) string {
	t.Helper()
	runID, _ := decodeOne(t, stdout)["run_id"].(string)
	var found []string
	for _, ev := range events(t, db, runID) {
		if ev["type"] == "tool_returned" {
			found = append(found, stringify(t, ev))
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d tool_returned events, want 1", len(found))
	}
	return found[0]
}

func TestRunWorkspaceRead(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	r := cli(t, workspaceRun(t, db, "notes.txt")...).mustExit(t, 0)
	if s := decodeOne(t, r.stdout); s["status"] != "completed" {
		t.Errorf("status = %v, want completed", s["status"])
	}
	mustContain(t, "tool_returned", toolReturned(t, db, r.stdout), "the launch is on Tuesday")
}

func TestRunWorkspaceReadOutsideRefused(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	r := cli(t, workspaceRun(t, db, "../../etc/passwd")...).mustExit(t, 0)
	ev := toolReturned(t, db, r.stdout)
	mustContain(t, "tool_returned", ev, "climbs out of the workspace root")
	if strings.Contains(ev, "root:") {
		t.Errorf("the tool read outside the workspace:\n%s", ev)
	}
}

func TestRunWorkspaceNotADirectory(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	args := workspaceRun(t, db, "notes.txt")
	for i, a := range args {
		if a == "--workspace" {
			args[i+1] = filepath.Join(args[i+1], "notes.txt")
		}
	}
	r := cli(t, args...)
	if r.code == 0 {
		t.Fatalf("a file as --workspace: exit 0")
	}
	mustContain(t, "stderr", r.stderr, "--workspace", "not a directory")
	mustNotExist(t, db)
}

func stringify(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
