package main

import (
	"os"
	"testing"
)

// TestCheckNotesATornLog: rein check notes a log a crash left without its
// header and exits 0 (it holds no record, and the next start makes it
// anew), as --json too, with ok true; the read-only commands and a start
// work beside it. (A log damaged in its middle is a problem, exit 1:
// bolt's TestDamagedRecordIsDataLoss.) The twin: the clean check beside no
// log prints no note.
func TestCheckNotesATornLog(t *testing.T) {
	db := newDB(t)
	startExample(t, "invoice", db, 0)
	r := cli(t, "check", "--db", db).mustExit(t, exitOK)
	if r.stdout != "" {
		t.Fatalf("check of a clean store printed %q", r.stdout)
	}
	if err := os.WriteFile(db+"-wal", make([]byte, 16), 0o600); err != nil {
		t.Fatal(err)
	}
	r = cli(t, "check", "--db", db).mustExit(t, exitOK)
	mustContain(t, "check beside a log of zeros", r.stdout, "note: ", "no whole header")
	r = cli(t, "check", "--db", db, "--json").mustExit(t, exitOK)
	mustContain(t, "check --json beside a log of zeros", r.stdout, `"ok":true`, `"note":true`)
	cli(t, "list", "--db", db).mustExit(t, exitOK)
	startExample(t, "invoice", db, 0)
}
