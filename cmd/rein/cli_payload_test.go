package main

import (
	"strings"
	"testing"
)

// TestHugeProposalOverServer: a write whose preview is 6 MiB (over the 4
// MiB gRPC message limit) leaves its run readable over --server, and the
// tenant's listings whole: rein run pauses for approval, rein list and
// rein pending list it beside another run, rein inspect and rein watch read
// it, and rein approve commits it. Today the run's every read and the
// tenant's every list page were over the limit ("received message larger
// than max"), and rein watch retried that for ever.
func TestHugeProposalOverServer(t *testing.T) {
	fixtures := writeFile(t, "tools.json", `{"send": [{"preview": {"to": "bob", "diff": "`+strings.Repeat("x", 6<<20)+`"}, "receipt": "sent"}]}`)
	task := writeFile(t, "task.json", `{"goal": "Send it.", "tools": [{"name": "send", "tier": "TOOL_TIER_WRITE"}], "budget": {"max_steps": 3}}`)
	addr := serveInProcess(t, newDB(t), "--tools", "fixture:"+fixtures)

	small := decodeOne(t, cli(t, "run", task, "--model", "script:"+writeFile(t, "small.jsonl", `{"decision": {"final_answer": {"text": "nothing to send"}}}`+"\n"),
		"--server", addr, "--json").mustExit(t, exitOK).stdout)
	script := `{"decision": {"tool_call": {"tool": "send", "arguments": {"to": "bob"}, "call_id": "w1"}}}` + "\n" +
		`{"decision": {"final_answer": {"text": "Sent."}}}` + "\n"
	big := decodeOne(t, cli(t, "run", task, "--model", "script:"+writeFile(t, "big.jsonl", script), "--server", addr, "--json").mustExit(t, exitPaused).stdout)
	runID := big["run_id"].(string)
	prop := obj(t, obj(t, big["pending"], "pending")["proposal"], "proposal")
	if prop["preview_blob"] == nil || len(stringify(t, prop["preview"])) > 64<<10 {
		t.Fatalf("the pending proposal carries %d bytes of preview and blob %v; want a bounded summary and a blob", len(stringify(t, prop["preview"])), prop["preview_blob"])
	}

	list := cli(t, "list", "--server", addr, "--json").mustExit(t, exitOK)
	mustContain(t, "list", list.stdout, runID, small["run_id"].(string))
	mustContain(t, "pending", cli(t, "pending", "--server", addr, "--json").mustExit(t, exitOK).stdout, runID, prop["proposal_id"].(string))
	mustContain(t, "inspect", cli(t, "inspect", runID, "--server", addr, "--json").mustExit(t, exitOK).stdout, "needs_approval")
	out := decodeOne(t, cli(t, "approve", runID, prop["proposal_id"].(string), "--server", addr, "--json").mustExit(t, exitOK).stdout)
	if out["status"] != "completed" {
		t.Fatalf("after approve: %v, want completed", out["status"])
	}
	// Watched from the start over the server, the approval_requested
	// included, to the run's end.
	mustContain(t, "watch", cli(t, "watch", runID, "--server", addr).mustExit(t, exitOK).stdout, "approval_requested", "write_committed", "completed")
	// Replayed as stored, with the blobs its proposal was stored apart in.
	mustContain(t, "replay", cli(t, "replay", runID, "--server", addr).mustExit(t, exitOK).stdout, "ok "+runID)
}
