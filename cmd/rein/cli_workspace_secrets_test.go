package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunWorkspaceReadShowsNoKeyPiece: with --secrets, a run that reads a
// slice of a workspace file cut through a key records the marker, not the
// piece: rein gives the workspace the server's secrets.
func TestRunWorkspaceReadShowsNoKeyPiece(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	dir := t.TempDir()
	const head = "OPENAI_API_KEY="
	if err := os.WriteFile(filepath.Join(dir, ".env"), []byte(head+openaiKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// From the key's fifth byte, five bytes: a piece of it.
	offset, limit := len(head)+4, 5
	script := fmt.Sprintf(`{"decision": {"tool_call": {"tool": "fs.read", "arguments": {"path": ".env", "offset": %d, "limit": %d}}}, "usage": {"input_tokens": 10, "output_tokens": 5}}`, offset, limit) + "\n" +
		`{"decision": {"final_answer": {"text": "done"}}, "usage": {"input_tokens": 10, "output_tokens": 5}}` + "\n"
	r := cli(t, "run", writeFile(t, "task.json", workspaceTask),
		"--model", "script:"+writeFile(t, "model.jsonl", script),
		"--workspace", dir, "--secrets", secretsFile(t, 0o600), "--db", db).mustExit(t, 0)
	ev := toolReturned(t, db, r.stdout)
	mustContain(t, "tool_returned", ev, "[secret OPENAI_API_KEY]")
	if piece := openaiKey[4 : 4+limit]; strings.Contains(ev, piece) {
		t.Errorf("the tool_returned event holds %q of the key:\n%s", piece, ev)
	}
}
