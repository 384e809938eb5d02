package main

import (
	"regexp"
	"strings"
	"testing"
)

// TestListLabelAndCursor: --label keeps the runs carrying it, --limit
// leaves a cursor on stderr, and --after it lists the rest, with no run
// twice; the twins: a label that is not KEY=VALUE, a label no run
// carries.
func TestListLabelAndCursor(t *testing.T) {
	db := newDB(t)
	var invoices []string
	for range 2 {
		invoices = append(invoices, decodeOne(t, cli(t, append(exampleRun("invoice", db), "--json")...).mustExit(t, exitOK).stdout)["run_id"].(string))
	}
	refund, _ := pausedRefund(t, db)

	first := cli(t, "list", "--db", db, "--label", "example=invoice", "--label", "team=billing", "--limit", "1", "--output", "json").mustExit(t, exitOK)
	page1 := decodeListJSON(t, first.stdout)
	m := regexp.MustCompile(`rein list --after (\S+)`).FindStringSubmatch(first.stderr)
	if len(page1) != 1 || m == nil {
		t.Fatalf("page 1: %d runs, stderr %q; want 1 and a cursor", len(page1), first.stderr)
	}
	second := cli(t, "list", "--db", db, "--label", "example=invoice", "--label", "team=billing", "--limit", "1", "--after", m[1], "--json").mustExit(t, exitOK)
	page2 := decodeListJSON(t, second.stdout)
	if len(page2) != 1 || page2[0]["run_id"] == page1[0]["run_id"] {
		t.Fatalf("page 2: %v after %v", page2, page1)
	}
	got := []string{page1[0]["run_id"].(string), page2[0]["run_id"].(string)}
	if !strings.Contains(strings.Join(invoices, ","), got[0]) || !strings.Contains(strings.Join(invoices, ","), got[1]) {
		t.Fatalf("listed %v, want the invoice runs %v (not the refund %s)", got, invoices, refund)
	}
	// The last page leaves no cursor.
	if strings.Contains(second.stderr, "--after") {
		t.Fatalf("last page printed a cursor: %s", second.stderr)
	}
	// All billing runs: the refund too.
	mustContain(t, "team=billing", cli(t, "list", "--db", db, "--label", "team=billing").mustExit(t, exitOK).stdout, refund, invoices[0], invoices[1])

	if out := cli(t, "list", "--db", db, "--label", "example=none", "--json").mustExit(t, exitOK).stdout; len(decodeListJSON(t, out)) != 0 {
		t.Fatalf("a label no run carries listed %s", out)
	}
	mustContain(t, "bad label", cli(t, "list", "--db", db, "--label", "team").mustExit(t, exitUsage).stderr, `--label "team": expected KEY=VALUE`)
}

// TestOutputFlag: --output json is --json; --output table the lines for a
// person; a value that is neither, or --json against --output table, is a
// usage error.
func TestOutputFlag(t *testing.T) {
	db := newDB(t)
	runID := decodeOne(t, cli(t, append(exampleRun("invoice", db), "--output", "json")...).mustExit(t, exitOK).stdout)["run_id"].(string)
	if runs := decodeListJSON(t, cli(t, "list", "--db", db, "--output", "json").mustExit(t, exitOK).stdout); len(runs) != 1 || runs[0]["run_id"] != runID {
		t.Fatalf("list --output json: %v", runs)
	}
	table := cli(t, "list", "--db", db, "--output", "table").mustExit(t, exitOK).stdout
	mustContain(t, "list --output table", table, "RUN_ID", "STATUS", runID)
	t.Setenv("REIN_OUTPUT", "json")
	decodeListJSON(t, cli(t, "list", "--db", db).mustExit(t, exitOK).stdout)
	// A flag is above the environment.
	mustContain(t, "--output table over REIN_OUTPUT", cli(t, "list", "--db", db, "--output", "table").mustExit(t, exitOK).stdout, "RUN_ID")
	t.Setenv("REIN_OUTPUT", "")
	cli(t, "list", "--db", db, "--output", "yaml").mustExit(t, exitUsage)
	cli(t, "list", "--db", db, "--output", "table", "--json").mustExit(t, exitUsage)
}
