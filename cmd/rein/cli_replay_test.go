package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reinhq/rein/internal/export"
)

const recordingsDir = "../../testdata/recordings"

func TestReplayRecordingsMatch(t *testing.T) {
	r := cli(t, "replay", recordingsDir).mustExit(t, exitOK)
	files, _ := filepath.Glob(filepath.Join(recordingsDir, "*.rein"))
	got := 0
	for _, line := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(line, "ok ") {
			got++
		}
	}
	if got != len(files) || len(files) == 0 {
		t.Fatalf("%d runs matched, want %d:\n%s", got, len(files), r.stdout)
	}
	// A stored run replays too.
	db := newDB(t)
	runID := decodeOne(t, cli(t, append(exampleRun("refund", db), "--json")...).mustExit(t, exitPaused).stdout)["run_id"].(string)
	cli(t, "replay", runID, "--db", db).mustExit(t, exitOK)
}

// TestReplayNamesTheDivergence is the twin: a recording whose log the
// harness would not make again (an altered input hash at sequence 2) fails
// with that sequence named.
func TestReplayNamesTheDivergence(t *testing.T) {
	f, err := os.Open(filepath.Join(recordingsDir, "approve.rein"))
	if err != nil {
		t.Fatal(err)
	}
	x, err := export.Read(f, "approve.rein")
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	x.GetEvents()[1].GetModelRequested().InputHash = "0000"
	path := filepath.Join(t.TempDir(), "altered.rein")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := export.Write(out, x); err != nil {
		t.Fatal(err)
	}
	out.Close()
	r := cli(t, "replay", path)
	if r.code != exitError {
		t.Fatalf("exit %d, want 1\n%s%s", r.code, r.stdout, r.stderr)
	}
	mustContain(t, "replay output", r.stdout, "DIVERGED", "at sequence 2", "model_requested", "field:    model_requested.input_hash")
	j := decodeOne(t, cli(t, "replay", path, "--json").stdout)
	if j["match"] != false || num(t, j["sequence"], "sequence") != 2 || j["field"] != "model_requested.input_hash" {
		t.Fatalf("replay --json: %v", j)
	}
}
