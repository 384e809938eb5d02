package main

// End-to-end tests of rein delete and rein deletions over a real rein serve
// (the helpers are in cli_lifecycle_test.go).

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/reinhq/rein/internal/auth"
)

// deletions decodes the JSON array rein delete --json and rein deletions
// --json print.
func deletions(t *testing.T, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		t.Fatalf("not a JSON array of deletion records: %v\n%s", err, s)
	}
	return out
}

// oneDeletion is the one record of a rein delete --json.
func oneDeletion(t *testing.T, r result) map[string]any {
	t.Helper()
	recs := deletions(t, r.stdout)
	if len(recs) != 1 {
		t.Fatalf("%d records, want one:\n%s", len(recs), r.stdout)
	}
	return recs[0]
}

// wantDeletion fails the test unless rec is runID's record with these
// fields.
func wantDeletion(t *testing.T, rec map[string]any, runID, by, reason string, archived bool) {
	t.Helper()
	if rec["run_id"] != runID || rec["deleted_by"] != by || rec["reason"] != reason || rec["archived"] != archived ||
		rec["status"] != "completed" || rec["deleted_at"] == "" {
		t.Errorf("deletion record %v, want run %s, deleted_by %q, reason %q, archived %v, status completed, a deleted_at",
			rec, runID, by, reason, archived)
	}
}

// TestLifecycleDeleteErases: rein delete erases a run that ended, live or
// archived: it prints the deletion record, the run's bytes are gone from
// the store's file (a marker in its goal is there before, not after) and
// its object from DB.archive, inspect and events say it was deleted (not
// found), rein list no longer lists it, and rein deletions does. Deleting
// it again exits 0 with the same record. The twin of the bytes' absence is
// their presence before the delete.
func TestLifecycleDeleteErases(t *testing.T) {
	db := newDB(t)
	arch := defaultArchiveDir(db)
	const marker, keptMarker = "lifecycle-delete-marker-4e1f09", "lifecycle-delete-kept-93ab51"
	first := serveLifecycle(t, db, "--tools", invoiceTools)
	runID := runMarked(t, first.addr, marker)
	kept := runMarked(t, first.addr, keptMarker)
	if !storeHolds(t, db, marker) {
		t.Fatalf("the store's file does not hold %q before the delete: the check below proves nothing", marker)
	}
	r := cli(t, "delete", runID, "--reason", "test", "--server", first.addr, "--json").mustExit(t, exitOK)
	rec := oneDeletion(t, r)
	wantDeletion(t, rec, runID, "principal:local", "test", false)
	if storeHolds(t, db, marker) {
		t.Errorf("the store's file still holds %q after the delete", marker)
	}
	if !storeHolds(t, db, keptMarker) {
		t.Errorf("the store's file lost the run that was not deleted")
	}
	for _, cmd := range []string{"inspect", "events"} {
		r := cli(t, cmd, runID, "--server", first.addr).mustExit(t, exitNotFound)
		mustContain(t, cmd+" stderr", r.stderr, runID, "was deleted", "test", "rein deletions")
	}
	if listed(t, runID, "--server", first.addr) != nil {
		t.Errorf("rein list lists the deleted run")
	}
	if listed(t, kept, "--server", first.addr) == nil {
		t.Errorf("rein list does not list the run that was not deleted")
	}
	cli(t, "inspect", kept, "--server", first.addr).mustExit(t, exitOK)
	recs := deletions(t, cli(t, "deletions", "--server", first.addr, "--json").mustExit(t, exitOK).stdout)
	if len(recs) != 1 {
		t.Fatalf("rein deletions lists %v, want the one record", recs)
	}
	sameJSON(t, "rein deletions", recs[0], rec)
	again := oneDeletion(t, cli(t, "delete", runID, "--reason", "again", "--server", first.addr, "--json").mustExit(t, exitOK))
	sameJSON(t, "deleting again", again, rec)
	table := cli(t, "deletions", "--server", first.addr).mustExit(t, exitOK).stdout
	mustContain(t, "rein deletions", table, "RUN_ID", runID, "completed", "principal:local", "test")
	first.stop()

	// An archived run: its object goes too.
	const archivedMarker = "lifecycle-delete-archived-6d2c77"
	second := serveLifecycle(t, db, "--tools", invoiceTools, "--archive-after", "0s", "--lifecycle-every", "100ms")
	archived := runMarked(t, second.addr, archivedMarker)
	key := waitArchived(t, archived, "--server", second.addr)
	waitArchived(t, kept, "--server", second.addr) // it ended before: archived as well
	if files := archivedFiles(t, arch); !contains(files, key) {
		t.Fatalf("%s holds %q, want %s in it", arch, files, key)
	}
	rec = oneDeletion(t, cli(t, "delete", archived, "--reason", "erasure request", "--server", second.addr, "--json").mustExit(t, exitOK))
	wantDeletion(t, rec, archived, "principal:local", "erasure request", true)
	if files := archivedFiles(t, arch); contains(files, key) {
		t.Errorf("%s still holds %s after the delete: %q", arch, key, files)
	}
	if storeHolds(t, db, archivedMarker) {
		t.Errorf("the store's file still holds %q after the delete", archivedMarker)
	}
	r = cli(t, "inspect", archived, "--server", second.addr).mustExit(t, exitNotFound)
	mustContain(t, "inspect stderr", r.stderr, "was deleted", "erasure request")
	if got := deletions(t, cli(t, "deletions", "--server", second.addr, "--json").mustExit(t, exitOK).stdout); len(got) != 2 || got[0]["run_id"] != archived {
		t.Errorf("rein deletions lists %v, want the two records, newest first", got)
	}
	second.stop()

	// The embedded rein deletes too, and scrubs the file it opened.
	rec = oneDeletion(t, cli(t, "delete", kept, "--reason", "embedded", "--db", db, "--json").mustExit(t, exitOK))
	wantDeletion(t, rec, kept, "principal:local", "embedded", true)
	if storeHolds(t, db, keptMarker) {
		t.Errorf("the store's file still holds %q after an embedded delete", keptMarker)
	}
	if files := archivedFiles(t, arch); len(files) != 0 {
		t.Errorf("%s holds %q after every run was deleted, want nothing", arch, files)
	}
	cli(t, "inspect", kept, "--db", db).mustExit(t, exitNotFound)
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// TestLifecycleDeleteRefusals: the twins of TestLifecycleDeleteErases. No
// --reason is a usage error (exit 2) and reaches no server; a run that has
// not ended (the refund example, paused for approval) is refused with
// FailedPrecondition (exit 1), saying to cancel it first, and it reads as
// before; a run the server never held is not found (exit 3). None leaves a
// deletion record.
func TestLifecycleDeleteRefusals(t *testing.T) {
	db := newDB(t)
	s := serveLifecycle(t, db, "--tools", "fixture:"+example("refund", "tools.json"))
	paused := decodeOne(t, cli(t, "run", example("refund", "task.json"), "--model", "script:"+example("refund", "model.jsonl"),
		"--server", s.addr, "--json").mustExit(t, exitPaused).stdout)["run_id"].(string)
	before := cli(t, "inspect", paused, "--server", s.addr, "--json").mustExit(t, exitOK).stdout
	beforeEvents := cli(t, "events", paused, "--server", s.addr, "--json").mustExit(t, exitOK).stdout

	for _, args := range [][]string{
		{"delete", paused, "--server", s.addr},
		{"delete", paused, "--reason", "", "--server", s.addr},
		{"delete", paused, "--db", newDB(t)},
	} {
		r := cli(t, args...).mustExit(t, exitUsage)
		mustContain(t, "stderr", r.stderr, "--reason is required")
	}
	cli(t, "delete", "--reason", "test", "--server", s.addr).mustExit(t, exitUsage)

	r := cli(t, "delete", paused, "--reason", "test", "--server", s.addr).mustExit(t, exitError)
	mustContain(t, "stderr", r.stderr, paused, "needs_approval", "cancel it first", "rein cancel "+paused)
	if r.stdout != "" {
		t.Errorf("stdout %q, want nothing", r.stdout)
	}
	if got := cli(t, "inspect", paused, "--server", s.addr, "--json").mustExit(t, exitOK).stdout; got != before {
		t.Errorf("a refused delete changed the run:\n%s\nwant:\n%s", got, before)
	}
	if got := cli(t, "events", paused, "--server", s.addr, "--json").mustExit(t, exitOK).stdout; got != beforeEvents {
		t.Errorf("a refused delete changed the run's events")
	}

	r = cli(t, "delete", "run_missing", "--reason", "test", "--server", s.addr).mustExit(t, exitNotFound)
	mustContain(t, "stderr", r.stderr, "run_missing")
	if recs := deletions(t, cli(t, "deletions", "--server", s.addr, "--json").mustExit(t, exitOK).stdout); len(recs) != 0 {
		t.Errorf("refused deletes left records: %v", recs)
	}
}

// TestLifecycleDeleteNeedsAdmin: with --tokens, an operator's rein delete
// and rein deletions are refused PermissionDenied (exit 4) and change
// nothing; an admin of another tenant does not see the run (exit 3); an
// admin of the run's tenant deletes it, and the record names them.
func TestLifecycleDeleteNeedsAdmin(t *testing.T) {
	tokens := writeFile(t, "tokens.json", `{"principals": [
		{"id": "op", "tenant": "default", "roles": ["operator"], "token_sha256": "`+auth.HashToken("op-token")+`"},
		{"id": "other", "tenant": "acme", "roles": ["admin"], "token_sha256": "`+auth.HashToken("other-token")+`"},
		{"id": "root", "tenant": "default", "roles": ["admin"], "token_sha256": "`+auth.HashToken("root-token")+`"}]}`)
	s := serveLifecycle(t, newDB(t), "--tools", invoiceTools, "--tokens", tokens)
	runID := runMarked(t, s.addr, "lifecycle-roles", "--token", "op-token")
	before := cli(t, "inspect", runID, "--server", s.addr, "--token", "op-token", "--json").mustExit(t, exitOK).stdout

	r := cli(t, "delete", runID, "--reason", "test", "--server", s.addr, "--token", "op-token").mustExit(t, exitDenied)
	mustContain(t, "stderr", r.stderr, "admin")
	cli(t, "deletions", "--server", s.addr, "--token", "op-token").mustExit(t, exitDenied)
	cli(t, "delete", runID, "--reason", "test", "--server", s.addr, "--token", "other-token").mustExit(t, exitNotFound)
	if got := cli(t, "inspect", runID, "--server", s.addr, "--token", "op-token", "--json").mustExit(t, exitOK).stdout; got != before {
		t.Errorf("a refused delete changed the run:\n%s\nwant:\n%s", got, before)
	}

	rec := oneDeletion(t, cli(t, "delete", runID, "--reason", "test", "--server", s.addr, "--token", "root-token", "--json").mustExit(t, exitOK))
	wantDeletion(t, rec, runID, "principal:root", "test", false)
	if rec["tenant"] != "default" {
		t.Errorf("record tenant %v, want default", rec["tenant"])
	}
	cli(t, "inspect", runID, "--server", s.addr, "--token", "op-token").mustExit(t, exitNotFound)
	// Another tenant's admin sees neither the record nor that it was deleted.
	if recs := deletions(t, cli(t, "deletions", "--server", s.addr, "--token", "other-token", "--json").mustExit(t, exitOK).stdout); len(recs) != 0 {
		t.Errorf("another tenant's admin lists %v, want no record", recs)
	}
	r = cli(t, "inspect", runID, "--server", s.addr, "--token", "other-token").mustExit(t, exitNotFound)
	if strings.Contains(r.stderr, "deleted") {
		t.Errorf("another tenant learns the run was deleted: %s", r.stderr)
	}
}
