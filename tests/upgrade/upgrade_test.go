// Package upgrade_test upgrades a real bbolt-backed `rein serve` from an old
// build to this one under runs in flight (issue 49, "Safe deploys"):
//
//   - TestBoltUpgrade builds the old build from git (REIN_UPGRADE_OLD_COMMIT,
//     by default the commit before issue 49's work) and this checkout's
//     build, starts the old server with runs paused for approval, paused
//     for input, and ended (a delegation tree among them), checks them with
//     this build's `rein upgrade check` against the old server, stops it,
//     starts this build on the same file, and carries every paused run to
//     its scripted end with this build's CLI; `rein upgrade check` then
//     finds nothing diverged.
//   - TestRollingUpgrade starts three replicas of the old build on one etcd
//     with runs queued, running, paused for approval, paused for input and
//     delegating, replaces them one by one with this build while more runs
//     start and people decide, kills one with SIGKILL on the way, and checks
//     that every run ends as its script leads, each approved write applied
//     once by the fixture ledger, no running run stalled past the lease TTL
//     and no replica logged a fold failure; where this build has `rein
//     cluster finalize`, it finalizes, and the old build then refuses to
//     start if the finalized store format is newer than its own.
//     REIN_UPGRADE_RUNS sets how many runs (200 unless set).
//
// The old build is built once per commit and kept under the system's
// temporary directory (rein-upgrade-old/COMMIT), so a second run of the test
// costs only this checkout's build. Without the commit in git's history (a
// shallow clone) the test is skipped and says how to fetch it; with
// REIN_REQUIRE_OLD_BUILD set (CI) it fails instead.
package upgrade_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBoltUpgrade: the old build's server on a bbolt file, with runs paused
// for approval and for input and runs that ended, is stopped and this
// build's started on the same file: the check of the old server passes
// before the deploy, every paused run carries on to its scripted end
// through this build's CLI, and the check after the deploy passes too.
func TestBoltUpgrade(t *testing.T) {
	root := moduleRoot(t)
	oldBin, commit := oldBuild(t, root)
	newBin := newBuild(t)
	ex := func(name, file string) string { return filepath.Join(root, "examples", name, file) }
	dir := t.TempDir()
	db := filepath.Join(dir, "rein.db")
	tools := ex("refund", "tools.json")
	ask := filepath.Join(dir, "ask.jsonl")
	if err := os.WriteFile(ask, []byte(`{"decision": {"ask_human": {"question": "Which invoice?"}}}
{"decision": {"final_answer": {"text": "Noted the invoice."}}}
`), 0o600); err != nil {
		t.Fatal(err)
	}

	old := serve(t, oldBin, db, tools)
	run := func(want int, task, model string) string {
		out := cli(t, oldBin, want, "run", task, "--model", "script:"+model, "--server", old.addr, "--json")
		return summary(t, out)["run_id"].(string)
	}
	approval := run(10, ex("refund", "task.json"), ex("refund", "model.jsonl"))
	input := run(10, ex("refund", "task.json"), ask)
	invoice := run(0, ex("invoice", "task.json"), ex("invoice", "model.jsonl"))
	tree := run(0, ex("delegate", "task.json"), ex("delegate", "model.jsonl"))
	t.Logf("on the old build (%s): paused for approval %s, for input %s; ended %s and the tree %s", commit, approval, input, invoice, tree)

	// Before the deploy: this build checks the old server's runs.
	out := cli(t, newBin, 0, "upgrade", "check", "--server", old.addr)
	for _, id := range []string{approval, input, invoice, tree} {
		if !strings.Contains(out, "ok "+id+" ") {
			t.Errorf("upgrade check against the old server does not pass run %s:\n%s", id, out)
		}
	}
	if !strings.Contains(out, "6 runs: 6 checked (6 equal, 0 diverged, 0 failed), 0 skipped") {
		t.Errorf("upgrade check against the old server:\n%s\nwant 6 runs (the tree's two children among them), all equal", out)
	}
	old.stop(t)

	// The deploy: this build on the same file.
	srv := serve(t, newBin, db, tools)
	inspect := func(id string) map[string]any {
		return summary(t, cli(t, newBin, 0, "inspect", id, "--server", srv.addr, "--json"))
	}
	for id, want := range map[string]string{approval: "needs_approval", input: "needs_input", invoice: "completed", tree: "completed"} {
		if got := inspect(id)["status"]; got != want {
			t.Errorf("after the upgrade run %s is %v, want %s", id, got, want)
		}
	}
	proposal, _ := inspect(approval)["proposal_id"].(string)
	if proposal == "" {
		t.Fatalf("run %s paused for approval shows no proposal_id after the upgrade: %v", approval, inspect(approval))
	}
	got := summary(t, cli(t, newBin, 0, "approve", approval, proposal, "--server", srv.addr, "--json"))
	if got["status"] != "completed" {
		t.Errorf("the approved run %s ended %v, want completed", approval, got["status"])
	}
	got = summary(t, cli(t, newBin, 0, "input", input, "INV-42", "--server", srv.addr, "--json"))
	if got["status"] != "completed" {
		t.Errorf("the run %s given its input ended %v, want completed", input, got["status"])
	}

	// After the deploy: every run, the two carried on by this build among
	// them, replays the same.
	out = cli(t, newBin, 0, "upgrade", "check", "--server", srv.addr)
	if !strings.Contains(out, "6 runs: 6 checked (6 equal, 0 diverged, 0 failed), 0 skipped") {
		t.Errorf("upgrade check after the upgrade:\n%s\nwant 6 runs, all equal", out)
	}
	if strings.Contains(srv.logText(), "level=ERROR") {
		t.Errorf("this build's server logged errors on the old build's file:\n%s", srv.logText())
	}

	// This build wrote its store format (7) to the file, which the old
	// build, from before store formats, cannot read: it refuses the file
	// by its layout mark and leaves it as it was. (The way back is the
	// backup taken before the upgrade: docs/upgrading.md.)
	srv.stop(t)
	before, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	back := exec.Command(oldBin, "serve", "--db", db, "--listen", "127.0.0.1:0", "--tools", "fixture:"+tools, "--reflection=false")
	back.Env = cleanEnv()
	refused, err := runWithin(back, 30*time.Second)
	if back.ProcessState.ExitCode() <= 0 || !strings.Contains(refused, `"rein-store-4"`) {
		t.Errorf("the old build on the file this build wrote: exit %d (%v), want a refusal naming \"rein-store-4\":\n%s", back.ProcessState.ExitCode(), err, refused)
	}
	if after, err := os.ReadFile(db); err != nil || !bytes.Equal(before, after) {
		t.Errorf("the old build's refusal changed the file (%v)", err)
	}
}
