package main

import (
	"strings"
	"testing"
)

// TestCompleteRunIDs: `rein __complete inspect ""` (what the shell
// completion scripts call) lists the store's run IDs from ListRuns, and
// a prefix narrows them; the twin: no store, no IDs and an error
// directive, not a crash.
func TestCompleteRunIDs(t *testing.T) {
	isolateConfig(t)
	db := newDB(t)
	a := decodeOne(t, cli(t, append(exampleRun("invoice", db), "--json")...).mustExit(t, exitOK).stdout)["run_id"].(string)
	b, _ := pausedRefund(t, db)
	for _, name := range []string{"inspect", "watch", "approve"} {
		out := cli(t, "__complete", name, "--db", db, "").mustExit(t, exitOK).stdout
		mustContain(t, name+" completion", out, a+"\tcompleted", b+"\tneeds_approval", ":4")
	}
	out := cli(t, "__complete", "inspect", "--db", db, b[:len(b)-2]).mustExit(t, exitOK).stdout
	if strings.Contains(out, a) || !strings.Contains(out, b) {
		t.Fatalf("completion of a prefix of %s: %s", b, out)
	}
	out = cli(t, "__complete", "inspect", "--db", newDB(t)+".missing", "").mustExit(t, exitOK).stdout
	if strings.Contains(out, "run_") || !strings.Contains(out, ":1") {
		t.Fatalf("completion with no store: %s", out)
	}
}
