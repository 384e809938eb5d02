package main

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
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
	// Every file, and each child of a tree on its own.
	want := len(files)
	for _, f := range files {
		want += treeRuns(t, f) - 1
	}
	if got != want || len(files) == 0 {
		t.Fatalf("%d runs matched, want %d:\n%s", got, want, r.stdout)
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

// TestReplayAndInspectReadBothForms: a directory holding a recording in
// text form (as under testdata/) and the same run in binary form (as rein
// export writes it) replays both, and inspect and events show the same run
// from either.
func TestReplayAndInspectReadBothForms(t *testing.T) {
	dir := t.TempDir()
	data, err := os.ReadFile(filepath.Join(recordingsDir, "approve.rein"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(data, []byte("{")) {
		t.Fatalf("approve.rein starts %.20q, want the text form", data)
	}
	text := filepath.Join(dir, "approve.rein")
	if err := os.WriteFile(text, data, 0o600); err != nil {
		t.Fatal(err)
	}
	x, err := export.Read(bytes.NewReader(data), text)
	if err != nil {
		t.Fatal(err)
	}
	var bin bytes.Buffer
	if err := export.Write(&bin, x); err != nil {
		t.Fatal(err)
	}
	binary := filepath.Join(dir, "approve-binary.rein")
	if err := os.WriteFile(binary, bin.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	r := cli(t, "replay", dir).mustExit(t, exitOK)
	mustContain(t, "replay output", r.stdout, "ok "+text+" (run "+x.GetRunId(), "ok "+binary+" (run "+x.GetRunId())
	for _, args := range [][]string{{"inspect", "--json"}, {"events", "--json"}} {
		fromText := cli(t, append(args, text)...).mustExit(t, exitOK).stdout
		fromBinary := cli(t, append(args, binary)...).mustExit(t, exitOK).stdout
		if fromText == "" || fromText != fromBinary {
			t.Errorf("%s: text form\n%s\nbinary form\n%s", strings.Join(args, " "), fromText, fromBinary)
		}
	}
	if j := decodeOne(t, cli(t, "inspect", "--json", text).stdout); !reflect.DeepEqual(j["run_id"], x.GetRunId()) {
		t.Errorf("inspect of the text form: %v", j)
	}
}

// TestCorruptedTextRecordingRefused is the twin: a text recording cut short
// is refused by replay (alone or in its directory) and by inspect, with an
// error that names the file and says it is damaged; nothing is replayed.
func TestCorruptedTextRecordingRefused(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(recordingsDir, "approve.rein"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cut := filepath.Join(dir, "approve.rein")
	if err := os.WriteFile(cut, data[:len(data)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"replay", cut}, {"replay", dir}, {"replay", cut, "--json"}, {"inspect", cut}} {
		r := cli(t, args...).mustExit(t, exitUsage)
		mustContain(t, strings.Join(args, " ")+": stderr", r.stderr, cut, "damaged or truncated", "text form", "does not parse")
		if strings.Contains(r.stdout, "ok ") || strings.Contains(r.stdout, "DIVERGED") {
			t.Errorf("%s: stdout %q, want no replay", strings.Join(args, " "), r.stdout)
		}
	}
}

// treeRuns counts the runs of an export file's tree.
func treeRuns(t *testing.T, path string) int {
	t.Helper()
	x, err := readExportFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var count func(x *reinv1.RunExport) int
	count = func(x *reinv1.RunExport) int {
		n := 1
		for _, c := range x.GetChildren() {
			n += count(c)
		}
		return n
	}
	return count(x)
}
