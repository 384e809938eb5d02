package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
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

// `rein watch --all` prints a run's creation as "created → running", not as
// a change from an unspecified status with an empty reason.
func TestWatchAllPrintsACreation(t *testing.T) {
	db := newDB(t)
	runID := decodeOne(t, cli(t, append(exampleRun("invoice", db), "--json")...).mustExit(t, exitOK).stdout)["run_id"].(string)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := newWatchWriter("→ completed")
	var errb bytes.Buffer
	code := make(chan int, 1)
	go func() {
		code <- Run(ctx, []string{"watch", "--all", "--db", db}, strings.NewReader(""), out, &errb)
	}()
	select {
	case <-out.seen:
	case c := <-code:
		t.Fatalf("watch --all exited %d before the completion:\n%s\nstderr:\n%s", c, out, errb.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("watch --all did not print the completion within 20s:\n%s", out)
	}
	cancel()
	if c := <-code; c != exitOK {
		t.Fatalf("watch --all interrupted: exit %d, want 0\nstderr:\n%s", c, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want the creation and the completion:\n%s", len(lines), out)
	}
	mustContain(t, "the first line", lines[0], runID+" created → running v1")
	mustContain(t, "the last line", lines[1], runID+" running → completed (final_answer)")
	for _, bad := range []string{"unspecified", "()"} {
		if strings.Contains(out.String(), bad) {
			t.Errorf("watch --all prints %q:\n%s", bad, out)
		}
	}
}
