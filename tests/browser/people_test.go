package browser

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// People act on live runs from the console: a message to a running run, a
// raise of a budget a run paused on, a revision of a proposed write.

// slowContract's first model call takes delayMs; then the model makes the
// calls of contract(goal) picked by replies (0: read, 1: write, 2: answer).
func slowContract(goal string, delayMs uint32, replies ...int) *reinv1.TaskContract {
	c := contract(goal)
	var script []*reinv1.ScriptedReply
	for _, i := range replies {
		script = append(script, c.Model.Script[i])
	}
	script[0].DelayMs = delayMs
	c.Model.Script = script
	return c
}

// fill sets the value of the element sel names, as typing it whole would.
func fill(t *testing.T, ctx context.Context, sel, value string) {
	t.Helper()
	if !eval[bool](t, ctx, fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e) return false;
	  e.value = %q; e.dispatchEvent(new Event("input", {bubbles: true})); return e.value === %q; })()`, sel, value, value)) {
		t.Fatalf("could not set %s to %q", sel, value)
	}
}

// events are the run's events, by kind, as the Go client reads them.
func events(t *testing.T, ctx context.Context, s *server, runID string) []*reinv1.Event {
	t.Helper()
	got, err := s.runs.ListEvents(as(ctx, "ops"), &reinv1.ListEventsRequest{RunId: runID})
	if err != nil {
		t.Fatal(err)
	}
	return got.GetEvents()
}

// steerRun: a message typed on a running run's page is recorded once, by
// the person who sent it, and read by the model's next call; the box goes
// once the run has ended.
func steerRun(t *testing.T, ctx, ana context.Context, s *server) {
	// The first model call takes 8s, room for a loaded machine to load the
	// page: the run is running while the person writes; the call after the
	// read takes the message in.
	got, err := s.runs.StartRun(as(ctx, "ops"), &reinv1.StartRunRequest{RequestId: "steer", Contract: slowContract("summarise notes.txt", 8000, 0, 2)})
	if err != nil {
		t.Fatal(err)
	}
	id := got.GetRun().GetRunId()
	msg := "mention the legal hold in the summary"
	do(t, ana, "open the run", chromedp.Navigate(s.url()+"#/runs/"+id))
	until(t, ana, "the message box", fmt.Sprintf(`document.querySelector(".run-head code")?.textContent === %q && document.querySelector(".steer-box")?.hidden === false`, id))
	do(t, ana, "send a message", chromedp.SendKeys(chromedp.CSS("textarea.steer-text"), msg), chromedp.Click(chromedp.CSS("button.steer")))
	until(t, ana, "the server's answer, the box cleared",
		`document.querySelector(".steer-box .outcome.ok")?.textContent === "sent: the model reads it with its next call" && document.querySelector("textarea.steer-text").value === ""`)
	waitStatus(t, ctx, s, id, reinv1.RunStatus_RUN_STATUS_COMPLETED)
	var steers []string
	for _, ev := range events(t, ctx, s, id) {
		if p := ev.GetRunSteered(); p != nil {
			steers = append(steers, ev.GetActor()+": "+p.GetText())
		}
	}
	if want := "principal:ana: " + msg; len(steers) != 1 || steers[0] != want {
		t.Errorf("messages recorded %q, want [%q]", steers, want)
	}
	if !modelSaw(t, ctx, s, id, msg) {
		t.Errorf("no model call read the message %q", msg)
	}
	until(t, ana, "the run completed, its message box gone",
		`document.querySelector(".run-head [data-status]")?.dataset.status === "completed" && document.querySelector(".steer-box").hidden && document.querySelector("tr.event.run_steered") !== null`)
}

// steerPaused: a page that still shows a run running (its live updates
// cut) while the run has paused for approval sends the message; the
// server's refusal, naming the call that answers the run, is shown, and
// nothing is recorded.
func steerPaused(t *testing.T, ctx, b context.Context, s *server) {
	cut := tab(t, b)
	signIn(t, cut, s, "ana")
	if _, err := chromedp.Call(cut, network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(cut, network.SetBlockedURLs, network.SetBlockedURLsParams{URLPatterns: []*network.BlockPattern{
		{URLPattern: "http://" + s.httpAddr + "/rein.v1.RunService/WatchRun", Block: true},
	}}); err != nil {
		t.Fatal(err)
	}
	got, err := s.runs.StartRun(as(ctx, "ops"), &reinv1.StartRunRequest{RequestId: "steer-paused", Contract: slowContract("replace notes.txt", 8000, 1, 2)})
	if err != nil {
		t.Fatal(err)
	}
	id := got.GetRun().GetRunId()
	do(t, cut, "open the run", chromedp.Navigate(s.url()+"#/runs/"+id))
	until(t, cut, "the message box", `document.querySelector(".steer-box")?.hidden === false`)
	paused := waitStatus(t, ctx, s, id, reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL)
	do(t, cut, "send a message", chromedp.SendKeys(chromedp.CSS("textarea.steer-text"), "too late"), chromedp.Click(chromedp.CSS("button.steer")))
	until(t, cut, "the refusal, the message kept",
		`(() => { const o = document.querySelector(".steer-box .outcome.refused")?.textContent ?? "";
		  return o.startsWith("refused: failed_precondition: ") && o.includes("DecideApproval") && document.querySelector("textarea.steer-text").value === "too late" && !document.querySelector("button.steer").disabled; })()`)
	t.Logf("a message to a paused run: %s", eval[string](t, cut, `document.querySelector(".steer-box .outcome").textContent`))
	for _, ev := range events(t, ctx, s, id) {
		if ev.GetRunSteered() != nil {
			t.Errorf("a refused message was recorded: %v", ev)
		}
	}
	if now := waitStatus(t, ctx, s, id, reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL); now.GetVersion() != paused.GetVersion() {
		t.Errorf("a refused message changed the run: version %d → %d", paused.GetVersion(), now.GetVersion())
	}
	if _, err := s.runs.CancelRun(as(ctx, "ops"), &reinv1.CancelRunRequest{RunId: id, Reason: "done testing"}); err != nil {
		t.Fatal(err)
	}
}

// budgetContract reads, then answers: with one step allowed and a pause
// on its budget, it waits for a raise before its answer.
func budgetContract(goal string) *reinv1.TaskContract {
	c := slowContract(goal, 0, 0, 2)
	c.Budget = &reinv1.Budget{MaxSteps: 1, OnExhausted: reinv1.BudgetAction_BUDGET_ACTION_PAUSE}
	return c
}

// raiseBudget: a run paused on its steps shows on Pending with what it
// reached; text that is no duration is refused on the page; a raise of
// money alone is refused by the server, naming the steps, and records
// nothing; a raise of steps carries the run on to its end.
func raiseBudget(t *testing.T, ctx, ana context.Context, s *server) {
	got, err := s.runs.StartRun(as(ctx, "ops"), &reinv1.StartRunRequest{RequestId: "budget", Contract: budgetContract("count the notes")})
	if err != nil {
		t.Fatal(err)
	}
	id := got.GetRun().GetRunId()
	paused := waitStatus(t, ctx, s, id, reinv1.RunStatus_RUN_STATUS_NEEDS_BUDGET)
	c := card(id)
	do(t, ana, "open pending", chromedp.Navigate(s.url()+"#/pending"))
	until(t, ana, "the budget card", fmt.Sprintf(`document.querySelector('%s.budget-pause .limit')?.textContent === "max_steps" && document.querySelector('%s .expires').textContent !== ""`, c, c))
	if want, shown := paused.GetPending().GetBudget().GetDetail(), eval[string](t, ana, fmt.Sprintf(`document.querySelector('%s .detail').textContent`, c)); shown != want {
		t.Errorf("the card's detail %q, want the pause's %q", shown, want)
	}
	refused := func(what, prefix, part string) {
		t.Helper()
		until(t, ana, what, fmt.Sprintf(`(() => { const o = document.querySelector('%s .outcome.refused')?.textContent ?? "";
		  return o.startsWith(%q) && o.includes(%q) && !document.querySelector('%s button.raise-budget').disabled; })()`, c, prefix, part, c))
		t.Logf("%s: %s", what, eval[string](t, ana, fmt.Sprintf(`document.querySelector('%s .outcome').textContent`, c)))
	}

	do(t, ana, "extend by nonsense", chromedp.SendKeys(chromedp.CSS(c+" input.extend-deadline"), "soon"), chromedp.Click(chromedp.CSS(c+" button.raise-budget")))
	refused("the page's refusal", "not sent: extend deadline: ", `"soon" is not a duration`)
	fill(t, ana, c+" input.extend-deadline", "")
	do(t, ana, "raise the money only", chromedp.SendKeys(chromedp.CSS(c+" input.add-usd"), "1"),
		chromedp.SendKeys(chromedp.CSS(c+" input.reason"), "more room"), chromedp.Click(chromedp.CSS(c+" button.raise-budget")))
	refused("the server's refusal", "refused: failed_precondition: ", "add_steps")
	for _, ev := range events(t, ctx, s, id) {
		if ev.GetBudgetRaised() != nil {
			t.Errorf("a refused raise was recorded: %v", ev)
		}
	}
	if now := waitStatus(t, ctx, s, id, reinv1.RunStatus_RUN_STATUS_NEEDS_BUDGET); now.GetVersion() != paused.GetVersion() {
		t.Errorf("a refused raise changed the run: version %d → %d", paused.GetVersion(), now.GetVersion())
	}

	fill(t, ana, c+" input.add-usd", "")
	do(t, ana, "raise the steps instead", chromedp.SendKeys(chromedp.CSS(c+" input.add-steps"), "1"), chromedp.Click(chromedp.CSS(c+" button.raise-budget")))
	until(t, ana, "the server's answer", fmt.Sprintf(`document.querySelector('%s .outcome.ok')?.textContent.startsWith("raised: ")`, c))
	waitStatus(t, ctx, s, id, reinv1.RunStatus_RUN_STATUS_COMPLETED)
	var raised []string
	for _, ev := range events(t, ctx, s, id) {
		if p := ev.GetBudgetRaised(); p != nil {
			raised = append(raised, fmt.Sprintf("%s +%d steps +$%.2f (%s)", ev.GetActor(), p.GetAddSteps(), p.GetAddCostUsd(), p.GetReason()))
		}
	}
	if want := "principal:ana +1 steps +$0.00 (more room)"; len(raised) != 1 || raised[0] != want {
		t.Errorf("raises recorded %q, want [%q]", raised, want)
	}
	// Pending, read again, holds no card for the run.
	do(t, ana, "read pending again", chromedp.Reload())
	until(t, ana, "pending without the run", fmt.Sprintf(`document.querySelector(".pending")?.childElementCount > 0 && document.querySelector('%s') === null`, c))
}

// reviseProposal: a proposal's arguments edited on Pending into text that
// is not a JSON object are refused on the page and nothing is sent; a JSON
// object is sent as a revision, and the run waits on a new proposal,
// marked as revised by the person, which approved, completes the run.
func reviseProposal(t *testing.T, ctx, ana context.Context, s *server) {
	r := startRun(t, ctx, s, "revise notes.txt")
	old := r.GetPending().GetProposal()
	c := card(r.GetRunId())
	do(t, ana, "open pending", chromedp.Navigate(s.url()+"#/pending"))
	until(t, ana, "the proposal", fmt.Sprintf(`document.querySelector('%s button.edit') !== null`, c))
	// Count the page's DecideApproval calls (the console's client reads
	// window.fetch at each call).
	eval[bool](t, ana, `(() => { window.__decides = 0; const f = window.fetch;
	  window.fetch = (u, o) => { if (String(u).endsWith("/DecideApproval")) window.__decides++; return f(u, o); }; return true; })()`)
	do(t, ana, "edit the arguments", chromedp.Click(chromedp.CSS(c+" button.edit")))
	until(t, ana, "the arguments as JSON", fmt.Sprintf(`(() => { const b = document.querySelector('%s textarea.edit-arguments');
	  return b !== null && !b.closest("[hidden]") && b.value !== "" && JSON.parse(b.value).path === "notes.txt"; })()`, c))
	for _, tc := range []struct{ text, want string }{
		{`{"path": "notes.txt"`, "not sent: the arguments are not JSON: "},
		{`["notes.txt"]`, "not sent: the arguments must be a JSON object"},
	} {
		fill(t, ana, c+" textarea.edit-arguments", tc.text)
		do(t, ana, "send "+tc.text, chromedp.Click(chromedp.CSS(c+" button.revise")))
		until(t, ana, "the page's refusal", fmt.Sprintf(`document.querySelector('%s .outcome.refused')?.textContent.startsWith(%q)`, c, tc.want))
	}
	if n := eval[int](t, ana, `window.__decides`); n != 0 {
		t.Errorf("refused arguments sent %d DecideApproval calls, want none", n)
	}
	if now := waitStatus(t, ctx, s, r.GetRunId(), reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL); now.GetVersion() != r.GetVersion() {
		t.Errorf("refused arguments changed the run: version %d → %d", r.GetVersion(), now.GetVersion())
	}

	fill(t, ana, c+" textarea.edit-arguments", `{"path": "notes-revised.txt"}`)
	do(t, ana, "send a revision", chromedp.Click(chromedp.CSS(c+" button.revise")))
	revised := fmt.Sprintf(`%s:not([data-proposal=%q])`, c, old.GetProposalId())
	until(t, ana, "the revised proposal", fmt.Sprintf(`document.querySelector('%s .revised-by') !== null`, revised))
	if n := eval[int](t, ana, `window.__decides`); n != 1 {
		t.Errorf("one revision sent %d DecideApproval calls, want 1", n)
	}
	newID := eval[string](t, ana, fmt.Sprintf(`document.querySelector('%s').dataset.proposal`, revised))
	if by := eval[string](t, ana, fmt.Sprintf(`document.querySelector('%s .revised-by').textContent`, revised)); !strings.Contains(by, "ana") {
		t.Errorf("the card says revised by %q, want ana", by)
	}
	if shown := eval[string](t, ana, fmt.Sprintf(`document.querySelector('%s .arguments dd[data-key=path]')?.textContent ?? ""`, revised)); shown != "notes-revised.txt" {
		t.Errorf("the revised card's path argument is %q, want notes-revised.txt", shown)
	}
	// The revision reads as a diff against the original, field by field.
	until(t, ana, "the revision's changes", fmt.Sprintf(`document.querySelector('%s .changes li[data-path="/path"]') !== null`, revised))
	if got := eval[string](t, ana, fmt.Sprintf(`document.querySelector('%s .changes li[data-path="/path"]').textContent`, revised)); got != "/path: notes.txt → notes-revised.txt" {
		t.Errorf("the revision's change reads %q, want /path: notes.txt → notes-revised.txt", got)
	}
	if n := eval[int](t, ana, fmt.Sprintf(`document.querySelectorAll('%s').length`, c)); n != 1 {
		t.Errorf("%d cards for the run, want the revised one only", n)
	}
	now := waitStatus(t, ctx, s, r.GetRunId(), reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL)
	if p := now.GetPending().GetProposal(); p.GetProposalId() != newID || p.GetArguments().GetFields()["path"].GetStringValue() != "notes-revised.txt" {
		t.Errorf("the run waits on %s with %v, want %s with the revised arguments", p.GetProposalId(), p.GetArguments(), newID)
	}
	var revisions []string
	for _, ev := range events(t, ctx, s, r.GetRunId()) {
		if p := ev.GetProposalRevised(); p != nil {
			revisions = append(revisions, fmt.Sprintf("%s: %s → %s", ev.GetActor(), p.GetSupersededProposalId(), p.GetProposal().GetProposalId()))
		}
	}
	if want := fmt.Sprintf("principal:ana: %s → %s", old.GetProposalId(), newID); len(revisions) != 1 || revisions[0] != want {
		t.Errorf("revisions recorded %q, want [%q]", revisions, want)
	}

	approve := fmt.Sprintf(`%s[data-proposal=%q]`, c, newID)
	do(t, ana, "approve the revision", chromedp.Click(chromedp.CSS(approve+" button.approve")))
	until(t, ana, "the server's answer", fmt.Sprintf(`document.querySelector('%s .outcome.ok')?.textContent.startsWith("approved")`, approve))
	waitStatus(t, ctx, s, r.GetRunId(), reinv1.RunStatus_RUN_STATUS_COMPLETED)
	committed := 0
	for _, ev := range events(t, ctx, s, r.GetRunId()) {
		if p := ev.GetWriteCommitted(); p != nil {
			committed++
			if p.GetProposalId() != newID {
				t.Errorf("committed %s, want the revision %s", p.GetProposalId(), newID)
			}
		}
	}
	if committed != 1 {
		t.Errorf("%d writes committed, want 1", committed)
	}
}
