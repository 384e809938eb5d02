package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunDetachQueued: on a server that runs one run at a time, rein run
// --detach starts each run, prints it (the second one queued, at its
// place) and exits 0 without following; rein list --status queued lists
// the queued ones; rein cancel cancels a queued one. The twin: --detach
// without --server is refused.
func TestRunDetachQueued(t *testing.T) {
	addr := serveInProcess(t, newDB(t), "--tools", "fixture:"+example("invoice", "tools.json"), "--max-running", "1")
	// A model that takes its time, so the first run holds the one slot.
	slow := filepath.Join(t.TempDir(), "slow.jsonl")
	if err := os.WriteFile(slow, []byte(`{"decision": {"final_answer": {"text": "done"}}, "delay_ms": 60000}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	type started struct {
		RunID         string `json:"run_id"`
		Status        string `json:"status"`
		QueuePosition uint32 `json:"queue_position"`
	}
	var runs []started
	for range 3 {
		r := cli(t, "run", example("invoice", "task.json"), "--model", "script:"+slow, "--server", addr, "--detach", "--json")
		r.mustExit(t, exitOK)
		var s started
		if err := json.Unmarshal([]byte(r.stdout), &s); err != nil {
			t.Fatalf("rein run --detach printed %q: %v", r.stdout, err)
		}
		runs = append(runs, s)
	}
	if runs[2].Status != "queued" || runs[2].QueuePosition == 0 {
		t.Fatalf("the third run is %+v, want queued with its place", runs[2])
	}
	list := cli(t, "list", "--server", addr, "--status", "queued")
	list.mustExit(t, exitOK)
	if !strings.Contains(list.stdout, runs[2].RunID) || strings.Contains(list.stdout, runs[0].RunID) || !strings.Contains(list.stdout, "queued #") {
		t.Fatalf("rein list --status queued:\n%s\nwant the queued run %s and not the running %s", list.stdout, runs[2].RunID, runs[0].RunID)
	}
	cli(t, "cancel", runs[2].RunID, "--server", addr).mustExit(t, exitOK)
	cli(t, "cancel", runs[0].RunID, "--server", addr).mustExit(t, exitOK)
	cli(t, "cancel", runs[1].RunID, "--server", addr).mustExit(t, exitOK)

	refused := cli(t, "run", example("invoice", "task.json"), "--model", "script:"+slow, "--db", newDB(t), "--detach")
	refused.mustExit(t, exitUsage)
	mustContain(t, "stderr", refused.stderr, "--detach needs --server")
}

// TestServeModelLimitRefused: a --model-limit or --max-running that
// cannot be used stops rein serve before anything opens, with exit 2 and
// the reason. The twin (a good limit serves) is TestRunDetachQueued's
// server, and TestSharedRateLimit in internal/engine.
func TestServeModelLimitRefused(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--model-limit", "openai=requests:10"}, "give PROVIDER/MODEL=requests:N,tokens:N"},
		{[]string{"--model-limit", "openai/gpt-4o=requests:0"}, `"requests:0" is not NAME:N with N above 0`},
		{[]string{"--max-running", "-1"}, "--max-running -1: give 0 (no limit) or more"},
	} {
		db := newDB(t)
		r := cli(t, append([]string{"serve", "--listen", "127.0.0.1:0", "--db", db}, c.args...)...)
		r.mustExit(t, exitUsage)
		mustContain(t, "stderr", r.stderr, c.want)
		mustNotExist(t, db)
	}
}
