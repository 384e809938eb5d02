package main

// End-to-end tests of the run lifecycle through the CLI, over a real
// `rein serve` in this process on a temporary bbolt file: a run that ended
// is archived to DB.archive and reads alike (inspect, events, export,
// replay, fork, watch) from the server, from the embedded commands and
// after a restart; rein delete erases it, leaving a deletion record and no
// byte of it in the store's file; retention does the same by policy.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// invoiceTools is the invoice example's fixture tools, for rein serve.
var invoiceTools = "fixture:" + example("invoice", "tools.json")

// lifecycleServer is one `rein serve` in this process.
type lifecycleServer struct {
	addr string
	log  *watchWriter
	stop func() // ends it and checks it exited 0; idempotent
}

// serveLifecycle runs rein serve on db, on a free loopback port, until stop
// or the test's end.
func serveLifecycle(t *testing.T, db string, extra ...string) *lifecycleServer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &lifecycleServer{log: newWatchWriter("rein serving")}
	done := make(chan int, 1)
	args := append([]string{"serve", "--listen", "127.0.0.1:0", "--db", db}, extra...)
	go func() { done <- Run(ctx, args, strings.NewReader(""), &bytes.Buffer{}, s.log) }()
	var once sync.Once
	s.stop = func() {
		once.Do(func() {
			cancel()
			if code := <-done; code != exitOK {
				t.Errorf("serve exited %d:\n%s", code, s.log)
			}
		})
	}
	t.Cleanup(s.stop)
	select {
	case <-s.log.seen:
	case code := <-done:
		t.Fatalf("serve exited %d:\n%s", code, s.log)
	case <-time.After(30 * time.Second):
		t.Fatalf("serve did not start:\n%s", s.log)
	}
	m := regexp.MustCompile(`addr=(127\.0\.0\.1:\d+)`).FindStringSubmatch(s.log.String())
	if m == nil {
		t.Fatalf("no address in serve's log:\n%s", s.log)
	}
	s.addr = m[1]
	return s
}

// pollUntil calls ok every 50ms until it holds, failing the test after d.
func pollUntil(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !ok() {
		select {
		case <-tick.C:
		case <-deadline.C:
			if !ok() {
				t.Fatalf("%s: not within %s", what, d)
			}
			return
		}
	}
}

// listed is the run of `rein list --json` with runID, nil when it is not
// listed.
func listed(t *testing.T, runID string, args ...string) map[string]any {
	t.Helper()
	out := cli(t, append([]string{"list", "--json", "--limit", "1000"}, args...)...).mustExit(t, exitOK).stdout
	for _, r := range decodeListJSON(t, out) {
		if r["run_id"] == runID {
			return r
		}
	}
	return nil
}

// waitArchived polls rein list until it shows runID archived, and returns
// its archive key.
func waitArchived(t *testing.T, runID string, args ...string) string {
	t.Helper()
	var key string
	pollUntil(t, 30*time.Second, "run "+runID+" archived", func() bool {
		k, _ := listed(t, runID, args...)["archived"].(string)
		key = k
		return k != ""
	})
	return key
}

// archivedFiles lists the files under an archive's directory, by their
// slash-separated path in it.
func archivedFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// markedTask writes the invoice example's task with marker in its goal, so
// that the store's file can be searched for the run's bytes.
func markedTask(t *testing.T, marker string) string {
	t.Helper()
	b, err := os.ReadFile(example("invoice", "task.json"))
	if err != nil {
		t.Fatal(err)
	}
	task := strings.Replace(string(b), "invoice INV-42 is paid", "invoice INV-42 ("+marker+") is paid", 1)
	if task == string(b) {
		t.Fatal("the invoice example's goal changed: update markedTask")
	}
	return writeFile(t, "task.json", task)
}

// runMarked runs the marked invoice task on the server at addr and returns
// its run ID.
func runMarked(t *testing.T, addr, marker string, args ...string) string {
	t.Helper()
	out := cli(t, append([]string{"run", markedTask(t, marker), "--model", "script:" + example("invoice", "model.jsonl"),
		"--server", addr, "--json"}, args...)...).mustExit(t, exitOK).stdout
	return decodeOne(t, out)["run_id"].(string)
}

// storeHolds reports whether the store's file or its log (FILE-wal, which
// holds what each commit wrote until a checkpoint moves it into the file)
// holds s.
func storeHolds(t *testing.T, db, s string) bool {
	t.Helper()
	for _, path := range []string{db, db + "-wal"} {
		b, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) && path != db {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(s)) {
			return true
		}
	}
	return false
}

// TestLifecycleArchivedRunReadsAlike: a run that ended before the server was
// told to archive is archived at its first sweep, under
// TENANT/YYYY/MM/DD/RUN.rein in DB.archive, and reads as it did before:
// inspect, events, watch, export (which inspects and replays), replay and
// fork over the server; then, the server stopped, the embedded commands
// read it from DB.archive, and a server restarted on the same --db, with no
// lifecycle flag, lists and reads it. The twins: a paused run is not
// archived, a server not told to archive makes no archive, and with
// DB.archive moved away the embedded inspect fails (exit 5), naming the
// run's archive key.
func TestLifecycleArchivedRunReadsAlike(t *testing.T) {
	db := newDB(t)
	arch := defaultArchiveDir(db)
	first := serveLifecycle(t, db, "--tools", invoiceTools)
	runID := decodeOne(t, cli(t, "run", example("invoice", "task.json"), "--model", "script:"+example("invoice", "model.jsonl"),
		"--server", first.addr, "--json").mustExit(t, exitOK).stdout)["run_id"].(string)
	ask := writeFile(t, "ask.jsonl", `{"decision": {"ask_human": {"question": "Which invoice?"}}}`+"\n")
	paused := decodeOne(t, cli(t, "run", example("invoice", "task.json"), "--model", "script:"+ask,
		"--server", first.addr, "--json").mustExit(t, exitPaused).stdout)["run_id"].(string)

	reads := func(addr string) (inspect map[string]any, evs, watch string) {
		inspect = decodeOne(t, cli(t, "inspect", runID, "--server", addr, "--json").mustExit(t, exitOK).stdout)
		evs = cli(t, "events", runID, "--server", addr, "--json").mustExit(t, exitOK).stdout
		watch = cli(t, "watch", runID, "--server", addr).mustExit(t, exitOK).stdout
		return inspect, evs, watch
	}
	before, beforeEvents, beforeWatch := reads(first.addr)
	if r := listed(t, runID, "--server", first.addr); r == nil || r["archived"] != nil {
		t.Fatalf("a server that does not archive lists the run as %v, want it listed, not archived", r)
	}
	first.stop()
	if _, err := os.Stat(arch); err == nil {
		t.Fatalf("%s exists, but no server was told to archive", arch)
	}

	second := serveLifecycle(t, db, "--tools", invoiceTools, "--archive-after", "0s", "--lifecycle-every", "100ms")
	key := waitArchived(t, runID, "--server", second.addr)
	if !regexp.MustCompile(`^[^/]+/\d{4}/\d\d/\d\d/` + regexp.QuoteMeta(runID) + `\.rein$`).MatchString(key) {
		t.Errorf("archive key %q, want TENANT/YYYY/MM/DD/%s.rein", key, runID)
	}
	if files := archivedFiles(t, arch); len(files) != 1 || files[0] != key {
		t.Errorf("%s holds %q, want the one object %q", arch, files, key)
	}
	if r := listed(t, paused, "--server", second.addr); r == nil || r["archived"] != nil || r["status"] != "needs_input" {
		t.Errorf("the paused run lists as %v, want it needs_input and not archived", r)
	}
	table := cli(t, "list", "--server", second.addr).mustExit(t, exitOK).stdout
	mustContain(t, "rein list", table, "(archived: rein inspect "+runID+")")

	after, afterEvents, afterWatch := reads(second.addr)
	// inspect folds the run's events, wherever they are read from: it
	// prints what it did before, with no archive key (rein list has it).
	sameJSON(t, "inspect of the archived run", after, before)
	if afterEvents != beforeEvents {
		t.Errorf("events of the archived run:\n%s\nwant as before:\n%s", afterEvents, beforeEvents)
	}
	if afterWatch != beforeWatch {
		t.Errorf("watch of the archived run:\n%s\nwant as before:\n%s", afterWatch, beforeWatch)
	}

	file := filepath.Join(t.TempDir(), "archived.rein")
	cli(t, "export", runID, "--server", second.addr, "-o", file).mustExit(t, exitOK)
	sameJSON(t, "inspect of the export", decodeOne(t, cli(t, "inspect", file, "--json").mustExit(t, exitOK).stdout), before)
	cli(t, "replay", file).mustExit(t, exitOK)
	cli(t, "replay", runID, "--server", second.addr).mustExit(t, exitOK)

	fork := decodeOne(t, cli(t, "fork", runID, "--at", "1", "--server", second.addr, "--json").mustExit(t, exitOK).stdout)
	if fork["status"] != "completed" || fork["run_id"] == runID {
		t.Fatalf("fork of the archived run: %v", fork)
	}
	started := obj(t, decodeLines(t, cli(t, "events", fork["run_id"].(string), "--server", second.addr, "--json").mustExit(t, exitOK).stdout)[0]["run_started"], "run_started")
	if started["parent_run_id"] != runID || num(t, started["parent_sequence"], "parent_sequence") != 1 {
		t.Errorf("the fork's run_started: %v, want parent %s at 1", started, runID)
	}
	// The twins: a fork point inside a step, and a run the server lacks.
	cli(t, "fork", runID, "--at", "3", "--server", second.addr).mustExit(t, exitUsage)
	cli(t, "inspect", "run_missing", "--server", second.addr).mustExit(t, exitNotFound)
	waitArchived(t, fork["run_id"].(string), "--server", second.addr)
	second.stop()

	// The embedded commands read the archive beside --db.
	embedded := decodeOne(t, cli(t, "inspect", runID, "--db", db, "--json").mustExit(t, exitOK).stdout)
	sameJSON(t, "embedded inspect of the archived run", embedded, after)
	if got := cli(t, "events", runID, "--db", db, "--json").mustExit(t, exitOK).stdout; got != beforeEvents {
		t.Errorf("embedded events of the archived run:\n%s\nwant as before:\n%s", got, beforeEvents)
	}
	if got, _ := listed(t, runID, "--db", db)["archived"].(string); got != key {
		t.Errorf("embedded rein list: archived %q, want %q", got, key)
	}
	embeddedFile := filepath.Join(t.TempDir(), "embedded.rein")
	cli(t, "export", runID, "--db", db, "-o", embeddedFile).mustExit(t, exitOK)
	sameJSON(t, "inspect of the embedded export", decodeOne(t, cli(t, "inspect", embeddedFile, "--json").mustExit(t, exitOK).stdout), before)
	t.Run("archive moved away", func(t *testing.T) {
		moved := arch + ".moved"
		if err := os.Rename(arch, moved); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := os.Rename(moved, arch); err != nil {
				t.Fatal(err)
			}
		}()
		r := cli(t, "inspect", runID, "--db", db).mustExit(t, exitUnavailable)
		mustContain(t, "stderr", r.stderr, runID, "archive", key)
		if r.stdout != "" {
			t.Errorf("stdout %q, want nothing", r.stdout)
		}
	})

	// A server restarted with no lifecycle flag reads DB.archive too.
	third := serveLifecycle(t, db)
	if got := waitArchived(t, runID, "--server", third.addr); got != key {
		t.Errorf("after a restart the run lists archived under %q, want %q", got, key)
	}
	sameJSON(t, "inspect after a restart", decodeOne(t, cli(t, "inspect", runID, "--server", third.addr, "--json").mustExit(t, exitOK).stdout), after)
	if got := cli(t, "events", runID, "--server", third.addr, "--json").mustExit(t, exitOK).stdout; got != beforeEvents {
		t.Errorf("events after a restart:\n%s\nwant as before:\n%s", got, beforeEvents)
	}
}

// sameJSON fails the test unless got and want, JSON objects, are equal.
func sameJSON(t *testing.T, what string, got, want map[string]any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		g, _ := json.MarshalIndent(got, "", "  ")
		w, _ := json.MarshalIndent(want, "", "  ")
		t.Errorf("%s:\n%s\nwant:\n%s", what, g, w)
	}
}

// TestLifecycleRetention: with --archive-after 0s --retain 2s, a run that
// ended is archived, then deleted by policy once 2s passed: rein deletions
// lists it, deleted_by "policy:retain" and archived, rein list no longer
// lists it, inspect says it was deleted, and neither DB.archive nor the
// store's file holds it. The twin: a run paused for input has not ended,
// so it is neither archived nor deleted, and reads as before.
func TestLifecycleRetention(t *testing.T) {
	db := newDB(t)
	const marker = "lifecycle-retention-marker-0b7a3d"
	s := serveLifecycle(t, db, "--tools", invoiceTools, "--archive-after", "0s", "--retain", "2s", "--lifecycle-every", "100ms")
	ask := writeFile(t, "ask.jsonl", `{"decision": {"ask_human": {"question": "Which invoice?"}}}`+"\n")
	paused := decodeOne(t, cli(t, "run", example("invoice", "task.json"), "--model", "script:"+ask,
		"--server", s.addr, "--json").mustExit(t, exitPaused).stdout)["run_id"].(string)
	pausedBefore := cli(t, "inspect", paused, "--server", s.addr, "--json").mustExit(t, exitOK).stdout
	runID := runMarked(t, s.addr, marker)

	var rec map[string]any
	pollUntil(t, 30*time.Second, "run "+runID+" deleted by retention", func() bool {
		for _, r := range deletions(t, cli(t, "deletions", "--server", s.addr, "--json").mustExit(t, exitOK).stdout) {
			if r["run_id"] == runID {
				rec = r
				return true
			}
		}
		return false
	})
	wantDeletion(t, rec, runID, "policy:retain", "retention of 2s ended", true)
	if listed(t, runID, "--server", s.addr) != nil {
		t.Errorf("rein list lists the run retention deleted")
	}
	r := cli(t, "inspect", runID, "--server", s.addr).mustExit(t, exitNotFound)
	mustContain(t, "inspect stderr", r.stderr, "was deleted", "policy:retain")
	if files := archivedFiles(t, defaultArchiveDir(db)); len(files) != 0 {
		t.Errorf("the archive holds %q after retention deleted its one run", files)
	}
	if storeHolds(t, db, marker) {
		t.Errorf("the store's file still holds %q after retention deleted the run", marker)
	}

	if p := listed(t, paused, "--server", s.addr); p == nil || p["archived"] != nil {
		t.Errorf("the paused run lists as %v, want it listed and not archived", p)
	}
	if got := cli(t, "inspect", paused, "--server", s.addr, "--json").mustExit(t, exitOK).stdout; got != pausedBefore {
		t.Errorf("the paused run changed:\n%s\nwant:\n%s", got, pausedBefore)
	}
	if recs := deletions(t, cli(t, "deletions", "--server", s.addr, "--json").mustExit(t, exitOK).stdout); len(recs) != 1 {
		t.Errorf("rein deletions lists %v, want the one record", recs)
	}
}
