package main

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestExitCodesDocumented: every exit code the CLI can return is a row of
// the README's exit-code table, and the table lists no code the CLI lacks.
func TestExitCodesDocumented(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(readme), "### Exit codes")
	if !ok {
		t.Fatal("README has no \"### Exit codes\" section")
	}
	table, _, _ = strings.Cut(table, "\n\n\n")
	documented := map[int]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\| (\d+) \|`).FindAllStringSubmatch(table, -1) {
		n, _ := strconv.Atoi(m[1])
		documented[n] = true
	}
	codes := []int{exitOK, exitError, exitUsage, exitNotFound, exitDenied, exitUnavailable, exitPaused, exitBudget, exitFailed, exitRefused, exitCancelled}
	for _, c := range codes {
		if !documented[c] {
			t.Errorf("exit code %d is not in the README's exit-code table", c)
		}
		delete(documented, c)
	}
	for c := range documented {
		t.Errorf("the README documents exit code %d, which the CLI never returns", c)
	}
}
