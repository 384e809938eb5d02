package main

// Tests of what the CLI's server refuses because it cannot carry it out
// (issue 13 §2): an approval on an embedded server started without the
// run's tool flags.

import (
	"testing"
)

// TestApproveWithoutTheToolFlagsIsRefused: rein approve on the embedded
// server without --tools (the run was started with them) exits non-zero
// naming the write's tool and the flags to give, and the run's log in the
// db is unchanged, byte for byte; approving with the flags then commits the
// write. Today the approval was recorded, dispatched and left unknown.
func TestApproveWithoutTheToolFlagsIsRefused(t *testing.T) {
	db := newDB(t)
	runID, prop := pausedRefund(t, db)
	before := cli(t, "events", runID, "--json", "--db", db).mustExit(t, exitOK).stdout

	r := cli(t, "approve", runID, prop["proposal_id"].(string), "--db", db)
	if r.code == exitOK || r.code == exitPaused {
		t.Fatalf("approve without --tools: exit %d, want a refusal\n%s", r.code, r.stderr)
	}
	mustContain(t, "stderr", r.stderr, `"refunds.create"`, "--tools", "--workspace", "--tool-server", "--mcp")
	if after := cli(t, "events", runID, "--json", "--db", db).mustExit(t, exitOK).stdout; after != before {
		t.Fatalf("the refused approve changed the run's log:\nbefore %s\nafter  %s", before, after)
	}

	out := decodeOne(t, cli(t, "approve", runID, prop["proposal_id"].(string), "--db", db,
		"--tools", "fixture:"+example("refund", "tools.json"), "--json").mustExit(t, exitOK).stdout)
	if out["status"] != "completed" {
		t.Fatalf("approve with --tools: status %v, want completed", out["status"])
	}
}
