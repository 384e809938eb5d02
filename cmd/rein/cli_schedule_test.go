package main

import (
	"strings"
	"testing"
	"time"
)

// TestScheduleCommands: rein schedule create, list, trigger, pause and
// delete against a server; the schedule's ticks start runs labelled with
// it. The twins: without --server, and with an expression that does not
// parse, nothing is created.
func TestScheduleCommands(t *testing.T) {
	addr := serveInProcess(t, newDB(t), "--tools", "fixture:"+example("invoice", "tools.json"))
	task, model := example("invoice", "task.json"), "script:"+example("invoice", "model.jsonl")
	noServer := cli(t, "schedule", "create", "nightly", "--cron", "@every 1s", "--task", task, "--db", newDB(t))
	noServer.mustExit(t, exitUsage)
	mustContain(t, "stderr", noServer.stderr, "rein schedule needs --server")
	bad := cli(t, "schedule", "create", "nightly", "--cron", "every night", "--task", task, "--model", model, "--server", addr)
	if bad.code == exitOK {
		t.Fatal("a bad cron expression was taken")
	}
	mustContain(t, "stderr", bad.stderr, "every night", "five fields")

	cli(t, "schedule", "create", "ticker", "--cron", "@every 1s", "--task", task, "--model", model, "--overlap", "allow", "--server", addr).mustExit(t, exitOK)
	list := cli(t, "schedule", "list", "--server", addr)
	list.mustExit(t, exitOK)
	mustContain(t, "rein schedule list", list.stdout, "ticker", "@every 1s", "UTC", "active")
	deadline := time.Now().Add(20 * time.Second)
	for {
		runs := cli(t, "list", "--server", addr, "--label", "schedule=ticker")
		if strings.Count(runs.stdout, "run_") >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the schedule started no two runs in 20 s:\n%s", runs.stdout)
		}
		<-time.After(100 * time.Millisecond)
	}
	trig := cli(t, "schedule", "trigger", "ticker", "--server", addr, "--json")
	trig.mustExit(t, exitOK)
	mustContain(t, "rein schedule trigger", trig.stdout, `"run_id"`)
	cli(t, "schedule", "pause", "ticker", "--server", addr).mustExit(t, exitOK)
	mustContain(t, "rein schedule list", cli(t, "schedule", "list", "--server", addr).stdout, "paused")
	cli(t, "schedule", "delete", "ticker", "--server", addr).mustExit(t, exitOK)
	gone := cli(t, "schedule", "delete", "ticker", "--server", addr)
	if gone.code == exitOK {
		t.Error("a second delete succeeded")
	}
}
