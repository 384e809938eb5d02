package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// cardFields are the fields rein pending and rein inspect add to a paused
// run's summary (docs/cli.md).
var cardFields = []string{"proposal_id", "spend", "evidence", "approve_does"}

// cardTask is the refund example's task with a limit on every count the
// card shows.
func cardTask(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(example("refund", "task.json"))
	if err != nil {
		t.Fatal(err)
	}
	var task map[string]any
	if err := json.Unmarshal(data, &task); err != nil {
		t.Fatal(err)
	}
	b := obj(t, task["budget"], "budget")
	b["max_tool_calls"], b["max_cost_usd"] = 7, 2.5
	out, err := json.Marshal(task)
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, "task.json", string(out))
}

// pendingOne is the one run rein pending --json lists.
func pendingOne(t *testing.T, db string) map[string]any {
	t.Helper()
	var waiting []map[string]any
	if err := json.Unmarshal([]byte(cli(t, "pending", "--db", db, "--json").mustExit(t, exitOK).stdout), &waiting); err != nil || len(waiting) != 1 {
		t.Fatalf("rein pending --json: %v %v, want one run", waiting, err)
	}
	return waiting[0]
}

// A refund waiting for approval carries the approver's card in rein pending
// --json and rein inspect --json alike: the proposal's id, the spend beside
// the contract's limits, invoices.get's result as the evidence, and the
// console's sentence of what Approve does; the text forms show them too.
func TestPendingCardOfAProposal(t *testing.T) {
	db := newDB(t)
	args := exampleRun("refund", db, "--json")
	args[1] = cardTask(t)
	out := decodeOne(t, cli(t, args...).mustExit(t, exitPaused).stdout)
	runID := out["run_id"].(string)
	pid := obj(t, obj(t, out["pending"], "pending")["proposal"], "pending.proposal")["proposal_id"].(string)

	got := pendingOne(t, db)
	if got["proposal_id"] != pid {
		t.Errorf("proposal_id = %v, want %s", got["proposal_id"], pid)
	}
	spend := obj(t, got["spend"], "spend")
	for name, want := range map[string][2]float64{
		"tokens":     {out["tokens"].(float64), 20000},
		"cost_usd":   {out["cost_usd"].(float64), 2.5},
		"tool_calls": {out["tool_calls"].(float64), 7},
	} {
		s := obj(t, spend[name], "spend."+name)
		if s["used"] != want[0] || s["limit"] != want[1] {
			t.Errorf("spend.%s = %v, want used %v of limit %v", name, s, want[0], want[1])
		}
	}
	ev, _ := got["evidence"].([]any)
	if len(ev) != 1 {
		t.Fatalf("evidence = %v, want invoices.get's one result", got["evidence"])
	}
	e := obj(t, ev[0], "evidence[0]")
	if e["tool"] != "invoices.get" || e["call_id"] != "c1" || e["sequence"] != 5.0 {
		t.Errorf("evidence[0] = %v, want invoices.get's call c1 at #5", e)
	}
	mustContain(t, "evidence[0].result", e["result"].(string), `"invoice_id":"INV-42"`, `"id":"ch_2"`)
	does := "Approve runs refunds.create with these arguments once, with idempotency key op_" + pid + "; the run " + runID + " then goes on."
	if got["approve_does"] != does {
		t.Errorf("approve_does = %q, want %q", got["approve_does"], does)
	}

	inspect := decodeOne(t, cli(t, "inspect", runID, "--db", db, "--json").mustExit(t, exitOK).stdout)
	for _, f := range cardFields {
		a, _ := json.Marshal(inspect[f])
		b, _ := json.Marshal(got[f])
		if string(a) != string(b) {
			t.Errorf("rein inspect --json's %s = %s, rein pending --json's %s", f, a, b)
		}
	}
	lines := []string{"spend", "tokens 805 of 20000, cost $0.0000 of $2.50, tool calls 2 of 7",
		"evidence", "#5 invoices.get (c1): {", "approve", does}
	mustContain(t, "rein pending", cli(t, "pending", "--db", db).mustExit(t, exitOK).stdout, lines...)
	mustContain(t, "rein inspect", cli(t, "inspect", runID, "--db", db).mustExit(t, exitOK).stdout, lines...)
}

// The twins: a run waiting for input has its spend but no proposal, no
// evidence and no approve_does; a run that waits for no one has no card.
func TestPendingCardOnlyForAProposal(t *testing.T) {
	db := newDB(t)
	ask := writeFile(t, "ask.jsonl", `{"decision": {"ask_human": {"question": "Which invoice?"}}}`+"\n")
	args := exampleRun("refund", db, "--json")
	args[3] = "script:" + ask
	asked := decodeOne(t, cli(t, args...).mustExit(t, exitPaused).stdout)["run_id"].(string)
	inspect := decodeOne(t, cli(t, "inspect", asked, "--db", db, "--json").mustExit(t, exitOK).stdout)
	for what, got := range map[string]map[string]any{"rein pending --json": pendingOne(t, db), "rein inspect --json": inspect} {
		if s := obj(t, got["spend"], what+" spend"); obj(t, s["tokens"], "spend.tokens")["limit"] != 20000.0 {
			t.Errorf("%s: spend = %v, want the token limit 20000", what, s)
		}
		for _, f := range []string{"proposal_id", "evidence", "approve_does"} {
			if v, ok := got[f]; ok {
				t.Errorf("%s of a run waiting for input has %s = %v", what, f, v)
			}
		}
	}
	text := cli(t, "pending", "--db", db).mustExit(t, exitOK).stdout
	if strings.Contains(text, "approve ") || strings.Contains(text, "evidence") {
		t.Errorf("rein pending shows a proposal's card for a question:\n%s", text)
	}

	done := decodeOne(t, cli(t, "run", example("invoice", "task.json"), "--model", "script:"+example("invoice", "model.jsonl"),
		"--tools", "fixture:"+example("invoice", "tools.json"), "--db", db, "--json").mustExit(t, exitOK).stdout)["run_id"].(string)
	finished := decodeOne(t, cli(t, "inspect", done, "--db", db, "--json").mustExit(t, exitOK).stdout)
	for _, f := range cardFields {
		if v, ok := finished[f]; ok {
			t.Errorf("rein inspect --json of a completed run has %s = %v", f, v)
		}
	}
	if text := cli(t, "inspect", done, "--db", db).mustExit(t, exitOK).stdout; strings.Contains(text, "approve ") || strings.Contains(text, "spend ") {
		t.Errorf("rein inspect of a completed run shows a card:\n%s", text)
	}
}

// The evidence is bounded: the last 10 tool results before the proposal,
// each cut to evidenceBytes on a rune's edge; a result after the proposal
// is not evidence for it. The twin: a short result is whole, not clipped.
func TestProposalEvidenceIsBounded(t *testing.T) {
	var evs []*reinv1.Event
	for i := range 12 {
		out := structpb.NewStringValue(fmt.Sprintf("result %d", i))
		if i == 11 {
			out = structpb.NewStringValue(strings.Repeat("é", evidenceBytes))
		}
		evs = append(evs, &reinv1.Event{Sequence: uint64(i + 1), Payload: &reinv1.Event_ToolReturned{ToolReturned: &reinv1.ToolReturned{Tool: "t", CallId: fmt.Sprint(i), Output: out}}})
	}
	evs = append(evs,
		&reinv1.Event{Sequence: 13, Payload: &reinv1.Event_ApprovalRequested{ApprovalRequested: &reinv1.ApprovalRequested{Proposal: &reinv1.Proposal{ProposalId: "p1"}}}},
		&reinv1.Event{Sequence: 14, Payload: &reinv1.Event_ToolReturned{ToolReturned: &reinv1.ToolReturned{Tool: "after"}}})
	got := proposalEvidence(evs, "p1")
	if len(got) != evidenceItems || got[0].Sequence != 3 || got[len(got)-1].Sequence != 12 {
		t.Fatalf("evidence holds %d results, #%d to #%d; want the last %d before the proposal, #3 to #12", len(got), got[0].Sequence, got[len(got)-1].Sequence, evidenceItems)
	}
	last := got[len(got)-1]
	if !last.Clipped || len(last.Result) > evidenceBytes || !utf8.ValidString(last.Result) {
		t.Errorf("a long result: %d bytes, clipped %v, valid UTF-8 %v; want at most %d bytes of whole runes, clipped", len(last.Result), last.Clipped, utf8.ValidString(last.Result), evidenceBytes)
	}
	if first := got[0]; first.Clipped || first.Result != "result 2" {
		t.Errorf("a short result = %q, clipped %v; want it whole", first.Result, first.Clipped)
	}
}
