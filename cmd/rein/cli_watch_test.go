package main

import (
	"strings"
	"testing"
)

func TestWatchFollowsToTheEnd(t *testing.T) {
	db := newDB(t)
	out := decodeOne(t, cli(t, append(exampleRun("invoice", db), "--json")...).mustExit(t, exitOK).stdout)
	runID := out["run_id"].(string)
	version := num(t, out["version"], "version")

	// Lines for a person, one per event; the run is completed, so exit 0.
	lines := strings.Split(strings.TrimSpace(cli(t, "watch", runID, "--db", db).mustExit(t, exitOK).stdout), "\n")
	if len(lines) != version {
		t.Fatalf("%d lines, want one per event (%d)", len(lines), version)
	}
	mustContain(t, "the last line", lines[len(lines)-1], "status_changed", "completed")
	if strings.Contains(strings.Join(lines, ""), "\x1b[") {
		t.Fatal("colour codes written to a pipe")
	}

	// NDJSON from a sequence on.
	evs := decodeLines(t, cli(t, "watch", runID, "--after", "10", "--json", "--db", db).mustExit(t, exitOK).stdout)
	if len(evs) != version-10 || num(t, evs[0]["sequence"], "sequence") != 11 {
		t.Fatalf("watch --after 10: %d events from %v, want %d from 11", len(evs), evs[0]["sequence"], version-10)
	}
}

func TestWatchStopsAtAPauseOnTheEmbeddedServer(t *testing.T) {
	db := newDB(t)
	runID, _ := pausedRefund(t, db)
	r := cli(t, "watch", runID, "--db", db).mustExit(t, exitPaused)
	mustContain(t, "watch", r.stdout, "needs_approval")
}

func TestWatchRefusals(t *testing.T) {
	db := newDB(t)
	runID := decodeOne(t, cli(t, append(exampleRun("invoice", db), "--json")...).mustExit(t, exitOK).stdout)["run_id"].(string)
	cli(t, "watch", "run_missing", "--db", db).mustExit(t, exitNotFound)
	cli(t, "watch", "--db", db).mustExit(t, exitUsage)
	cli(t, "watch", "a", "--all", "--db", db).mustExit(t, exitUsage)
	cli(t, "watch", "--all", "--status", "bogus", "--db", db).mustExit(t, exitUsage)
	// Beyond the head is invalid input.
	cli(t, "watch", runID, "--after", "999", "--db", db).mustExit(t, exitUsage)
}
