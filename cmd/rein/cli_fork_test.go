package main

import "testing"

func TestForkGoesOnFromTheForkPoint(t *testing.T) {
	db := newDB(t)
	parent := decodeOne(t, cli(t, append(exampleRun("invoice", db), "--json")...).mustExit(t, exitOK).stdout)
	// Sequence 11 is the read's result: the fork pays only for the last step.
	out := decodeOne(t, cli(t, "fork", parent["run_id"].(string), "--at", "11", "--db", db,
		"--tools", "fixture:"+example("invoice", "tools.json"), "--json").mustExit(t, exitOK).stdout)
	if out["status"] != "completed" || out["run_id"] == parent["run_id"] {
		t.Fatalf("fork: %v", out)
	}
	evs := events(t, db, out["run_id"].(string))
	started := obj(t, evs[0]["run_started"], "run_started")
	if started["parent_run_id"] != parent["run_id"] || num(t, started["parent_sequence"], "parent_sequence") != 11 {
		t.Fatalf("run_started: %v", started)
	}
	calls := 0
	for _, ev := range evs[11:] {
		if ev["type"] == "model_requested" {
			calls++
		}
	}
	if calls != 1 {
		t.Fatalf("%d model calls after the fork point, want 1", calls)
	}
	// Twins: a fork point inside a step, past the end, or no --at.
	cli(t, "fork", parent["run_id"].(string), "--at", "3", "--db", db).mustExit(t, exitUsage)
	cli(t, "fork", parent["run_id"].(string), "--at", "99", "--db", db).mustExit(t, exitUsage)
	cli(t, "fork", parent["run_id"].(string), "--db", db).mustExit(t, exitUsage)
	cli(t, "fork", "run_missing", "--at", "2", "--db", db).mustExit(t, exitNotFound)
}
