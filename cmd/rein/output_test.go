package main

import (
	"testing"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// A checks_completed line says how many checks ran, passed and failed, and
// names the failed ones.
func TestChecksCompletedSummary(t *testing.T) {
	check := func(name string, passed bool) *reinv1.CheckResult {
		return &reinv1.CheckResult{Name: name, Passed: passed}
	}
	for _, tc := range []struct {
		name    string
		results []*reinv1.CheckResult
		want    string
	}{
		{"one passed", []*reinv1.CheckResult{check("done", true)}, "1 check: 1 passed"},
		{"one of two failed", []*reinv1.CheckResult{check("lint", true), check("unit", false)}, "2 checks: 1 passed, 1 failed (unit)"},
		{"all failed", []*reinv1.CheckResult{check("lint", false), check("unit", false)}, "2 checks: 0 passed, 2 failed (lint, unit)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := &reinv1.Event{Sequence: 7, Payload: &reinv1.Event_ChecksCompleted{
				ChecksCompleted: &reinv1.ChecksCompleted{Results: tc.results, WorkspaceHash: "ab"},
			}}
			if got := eventSummary(ev); got != tc.want {
				t.Errorf("eventSummary = %q, want %q", got, tc.want)
			}
		})
	}
}
