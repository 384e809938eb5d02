package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reinhq/rein/internal/auth"
	"github.com/reinhq/rein/internal/export"
	"github.com/reinhq/rein/internal/storeformat"
)

// upgradeTokens is a tokens file with an admin and a viewer of tenant
// acme, the recordings' under testdata.
func upgradeTokens(t *testing.T) string {
	t.Helper()
	return writeFile(t, "tokens.json", `{"principals": [
		{"id": "ci", "tenant": "acme", "roles": ["admin"], "token_sha256": "`+auth.HashToken("admin-token")+`"},
		{"id": "watcher", "tenant": "acme", "roles": ["viewer"], "token_sha256": "`+auth.HashToken("viewer-token")+`"}]}`)
}

// alteredRecording writes testdata's recording name with its model input
// hash at sequence 2 altered: a log this build's harness would not make, as
// if an older build's step had recorded it.
func alteredRecording(t *testing.T, name string) string {
	t.Helper()
	f, err := os.Open(filepath.Join(recordingsDir, name))
	if err != nil {
		t.Fatal(err)
	}
	x, err := export.Read(f, name)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	x.GetEvents()[1].GetModelRequested().InputHash = "0000"
	path := filepath.Join(t.TempDir(), "altered-"+name)
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if err := export.Write(out, x); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestUpgradeCheckOverServer: rein upgrade check --server with an admin's
// token replays a server's runs (a delegation tree that ended and was
// archived, a run paused for approval, one paused for input) and exits 0;
// a viewer's token is refused (exit 4); once a run whose log this build
// would not make is in the store, the check exits 1 and names it, the
// sequence and the field.
func TestUpgradeCheckOverServer(t *testing.T) {
	srv := serveLifecycle(t, newDB(t), "--tokens", upgradeTokens(t), "--tools", "fixture:"+example("refund", "tools.json"),
		"--archive-after", "0s", "--lifecycle-every", "100ms")
	as := func(token string, args ...string) result {
		return cli(t, append(args, "--server", srv.addr, "--token", token)...)
	}
	tree := decodeOne(t, as("admin-token", "run", example("delegate", "task.json"), "--model", "script:"+example("delegate", "model.jsonl"), "--json").
		mustExit(t, exitOK).stdout)["run_id"].(string)
	refund := decodeOne(t, as("admin-token", "run", example("refund", "task.json"), "--model", "script:"+example("refund", "model.jsonl"), "--json").
		mustExit(t, exitPaused).stdout)["run_id"].(string)
	as("admin-token", "import", filepath.Join(recordingsDir, "paused_input.rein")).mustExit(t, exitOK)
	waitArchived(t, tree, "--server", srv.addr, "--token", "admin-token")

	r := as("admin-token", "upgrade", "check").mustExit(t, exitOK)
	mustContain(t, "upgrade check", r.stdout, "ok "+tree+" (completed, archived,", "ok "+refund+" (needs_approval,", "(needs_input,",
		"5 runs: 5 checked (5 equal, 0 diverged, 0 failed), 0 skipped", fmt.Sprintf("formats: store %d, this build %s, finalization needed: no", storeformat.Current, storeformat.This()))
	if strings.Contains(r.stdout, "DIVERGED") {
		t.Fatalf("a clean store diverged:\n%s", r.stdout)
	}

	r = as("admin-token", "upgrade", "check", "--tenant", "default").mustExit(t, exitOK)
	mustContain(t, "upgrade check --tenant default by acme's admin", r.stderr, `tenant "default"`, "own tenant's runs only")

	r = as("viewer-token", "upgrade", "check").mustExit(t, exitDenied)
	mustContain(t, "a viewer's upgrade check", r.stderr, "needs the admin role", "admin's token")
	if r.stdout != "" {
		t.Errorf("a refused check printed %q", r.stdout)
	}

	planted := alteredRecording(t, "approve.rein")
	as("admin-token", "import", planted).mustExit(t, exitOK)
	runID := decodeOne(t, cli(t, "inspect", planted, "--json").mustExit(t, exitOK).stdout)["run_id"].(string)
	r = as("admin-token", "upgrade", "check")
	if r.code != exitError {
		t.Fatalf("upgrade check of a store with a planted divergence: exit %d, want 1\n%s%s", r.code, r.stdout, r.stderr)
	}
	mustContain(t, "upgrade check", r.stdout, "DIVERGED "+runID+" ", "at sequence 2", "field:    model_requested.input_hash",
		"6 runs: 6 checked (5 equal, 1 diverged, 0 failed)")
	mustContain(t, "upgrade check's stderr", r.stderr, "1 of 6 runs checked diverged")

	lines := decodeLines(t, as("admin-token", "upgrade", "check", "--json").mustExit(t, exitError).stdout)
	var diverged []map[string]any
	for _, l := range lines[:len(lines)-1] {
		if l["result"] == "diverged" {
			diverged = append(diverged, l)
		}
	}
	if len(diverged) != 1 || diverged[0]["run_id"] != runID || num(t, diverged[0]["sequence"], "sequence") != 2 || diverged[0]["field"] != "model_requested.input_hash" {
		t.Fatalf("upgrade check --json diverged lines: %v", diverged)
	}
	sum := obj(t, lines[len(lines)-1]["summary"], "summary")
	if num(t, sum["diverged"], "diverged") != 1 || num(t, sum["equal"], "equal") != 5 {
		t.Fatalf("upgrade check --json summary: %v", sum)
	}
}

// TestUpgradeCheckOnDB: --db reads the file read-only, every tenant's runs;
// --tenant, --since and --sample (with --seed) choose the runs; a file a
// server holds is refused with a pointer to --server, and so is --server
// with --db.
func TestUpgradeCheckOnDB(t *testing.T) {
	db := newDB(t)
	// Four recordings of tenant acme, imported by its admin; the three
	// that end (the one paused for approval expires on import, its
	// deadline long past) are archived beside the file.
	srv := serveLifecycle(t, db, "--tokens", upgradeTokens(t), "--archive-after", "0s", "--lifecycle-every", "100ms")
	var ended []string
	for _, f := range []string{"completed.rein", "paused_approval.rein", "paused_input.rein", "denied.rein"} {
		path := filepath.Join(recordingsDir, f)
		cli(t, "import", path, "--server", srv.addr, "--token", "admin-token").mustExit(t, exitOK)
		if f != "paused_input.rein" {
			ended = append(ended, decodeOne(t, cli(t, "inspect", path, "--json").mustExit(t, exitOK).stdout)["run_id"].(string))
		}
	}
	for _, id := range ended {
		waitArchived(t, id, "--server", srv.addr, "--token", "admin-token")
	}
	srv.stop()
	// A run of tenant default, made now.
	fresh := decodeOne(t, cli(t, append(exampleRun("invoice", db), "--json")...).mustExit(t, exitOK).stdout)["run_id"].(string)
	info, err := os.Stat(db)
	if err != nil {
		t.Fatal(err)
	}

	r := cli(t, "upgrade", "check", "--db", db).mustExit(t, exitOK)
	mustContain(t, "upgrade check --db", r.stdout, "ok "+fresh, "5 runs: 5 checked (5 equal")
	for _, id := range ended {
		mustContain(t, "upgrade check --db", r.stdout, "ok "+id+" (")
	}
	if n := strings.Count(r.stdout, ", archived, "); n != len(ended) {
		t.Errorf("upgrade check --db read %d archived runs, want %d:\n%s", n, len(ended), r.stdout)
	}
	if after, err := os.Stat(db); err != nil || after.ModTime() != info.ModTime() || after.Size() != info.Size() {
		t.Errorf("upgrade check changed the file: %v, %v → %v", err, info, after)
	}

	// The twin: without the archive the archived runs cannot be read, and
	// the check fails rather than pass them over.
	arch := db + ".archive"
	if err := os.Rename(arch, arch+".away"); err != nil {
		t.Fatal(err)
	}
	r = cli(t, "upgrade", "check", "--db", db).mustExit(t, exitError)
	mustContain(t, "upgrade check --db without its archive", r.stdout, "FAILED "+ended[0]+" (", "could not be read", "5 runs: 5 checked (2 equal, 0 diverged, 3 failed)")
	mustContain(t, "upgrade check --db without its archive", r.stderr, "3 of 5 runs could not be checked")
	if err := os.Rename(arch+".away", arch); err != nil {
		t.Fatal(err)
	}

	// The recordings were made long ago (but the one paused for approval,
	// whose deadline passed, expired on import); the fresh run now.
	r = cli(t, "upgrade", "check", "--db", db, "--since", "1h").mustExit(t, exitOK)
	mustContain(t, "upgrade check --since 1h", r.stdout, "ok "+fresh, "(expired,", "2 runs: 2 checked")
	r = cli(t, "upgrade", "check", "--db", db, "--tenant", "acme").mustExit(t, exitOK)
	mustContain(t, "upgrade check --tenant acme", r.stdout, "4 runs: 4 checked")
	if strings.Contains(r.stdout, fresh) {
		t.Errorf("upgrade check --tenant acme checked tenant default's run %s:\n%s", fresh, r.stdout)
	}
	r = cli(t, "upgrade", "check", "--db", db, "--tenant", "nobody").mustExit(t, exitOK)
	mustContain(t, "upgrade check --tenant nobody", r.stdout, "0 runs: 0 checked")

	pick := func(seed string) string {
		out := cli(t, "upgrade", "check", "--db", db, "--sample", "2", "--seed", seed).mustExit(t, exitOK).stdout
		mustContain(t, "upgrade check --sample 2", out, "5 runs: 2 checked", "--seed "+seed)
		return out
	}
	if a, b := pick("7"), pick("7"); a != b {
		t.Errorf("one seed picked two samples:\n%s\n%s", a, b)
	}

	cli(t, "upgrade", "check", "--db", db, "--sample", "-1").mustExit(t, exitUsage)
	r = cli(t, "upgrade", "check", "--db", db, "--server", "127.0.0.1:1").mustExit(t, exitUsage)
	mustContain(t, "upgrade check --db --server", r.stderr, "not both")

	serveInProcess(t, db)
	r = cli(t, "upgrade", "check", "--db", db).mustExit(t, exitUnavailable)
	mustContain(t, "upgrade check of a file a server holds", r.stderr, "locked by another process", "--server")
}
