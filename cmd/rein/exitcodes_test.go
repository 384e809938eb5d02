package main

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// exitCodesPage is the page, from this package's directory, that holds the
// CLI's exit-code table.
const exitCodesPage = "../../docs/cli.md"

// TestExitCodesDocumented: every exit code the CLI can return is a row of
// the exit-code table in docs/cli.md, and the table lists no code the CLI
// lacks.
func TestExitCodesDocumented(t *testing.T) {
	page, err := os.ReadFile(exitCodesPage)
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(page), "\n## Exit codes\n")
	if !ok {
		t.Fatalf("%s has no \"## Exit codes\" section", exitCodesPage)
	}
	// The section ends at the next heading.
	if i := regexp.MustCompile(`(?m)^#{1,2} `).FindStringIndex(table); i != nil {
		table = table[:i[0]]
	}
	documented := map[int]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\| (\d+) \|`).FindAllStringSubmatch(table, -1) {
		n, _ := strconv.Atoi(m[1])
		documented[n] = true
	}
	codes := []int{exitOK, exitError, exitUsage, exitNotFound, exitDenied, exitUnavailable, exitPaused, exitBudget, exitFailed, exitRefused, exitCancelled}
	for _, c := range codes {
		if !documented[c] {
			t.Errorf("exit code %d is not in the exit-code table of %s", c, exitCodesPage)
		}
		delete(documented, c)
	}
	for c := range documented {
		t.Errorf("%s documents exit code %d, which the CLI never returns", exitCodesPage, c)
	}
}
