package main

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

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

// The events that record a call say how long it took, as the run measured
// it; an event without a duration (a log from before rein measured them)
// says nothing of it.
func TestEventSummariesShowDurations(t *testing.T) {
	ms := func(n int) *durationpb.Duration { return durationpb.New(time.Duration(n) * time.Millisecond) }
	final := &reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: "done"}}}
	for _, tc := range []struct {
		name string
		ev   *reinv1.Event
		want string
	}{
		{"model", &reinv1.Event{Payload: &reinv1.Event_ModelReturned{ModelReturned: &reinv1.ModelReturned{Decision: final, CostUsd: 0.00014, Duration: ms(1250), FinishReason: "stop"}}},
			"final_answer \"done\" ($0.000140, 1.25s, stop)"},
		{"model untimed", &reinv1.Event{Payload: &reinv1.Event_ModelReturned{ModelReturned: &reinv1.ModelReturned{Decision: final}}}, "final_answer \"done\""},
		{"tool", &reinv1.Event{Payload: &reinv1.Event_ToolReturned{ToolReturned: &reinv1.ToolReturned{Tool: "search", OutputBytes: 30, Duration: ms(12)}}}, "search (30 bytes, 12ms)"},
		{"tool error", &reinv1.Event{Payload: &reinv1.Event_ToolReturned{ToolReturned: &reinv1.ToolReturned{Tool: "search", Error: "boom", Duration: ms(3)}}}, "search error (3ms): boom"},
		{"tool untimed", &reinv1.Event{Payload: &reinv1.Event_ToolReturned{ToolReturned: &reinv1.ToolReturned{Tool: "search", OutputBytes: 30}}}, "search (30 bytes)"},
		{"write", &reinv1.Event{Payload: &reinv1.Event_WriteCommitted{WriteCommitted: &reinv1.WriteCommitted{OperationId: "op_1", Receipt: structpb.NewStringValue("re_1"), Duration: ms(45)}}},
			`operation op_1, receipt "re_1", in 45ms`},
		{"checks", &reinv1.Event{Payload: &reinv1.Event_ChecksCompleted{ChecksCompleted: &reinv1.ChecksCompleted{Results: []*reinv1.CheckResult{{Name: "unit", Passed: true}}, Duration: ms(2000)}}},
			"1 check: 1 passed, in 2s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := eventSummary(tc.ev); got != tc.want {
				t.Errorf("eventSummary = %q, want %q", got, tc.want)
			}
		})
	}
}
