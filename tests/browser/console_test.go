package browser

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// xss is what the read tool returns: markup that would run if the console
// put it in the DOM as HTML.
const xss = `<img src=x onerror="window.__pwned='img'"><script>window.__pwned='script'</script>`

// fixtureTools: a read that returns xss, and a file write whose preview
// carries a unified diff; and examples/refund's invoice read and refund
// (refundRun).
var fixtureTools = fmt.Sprintf(`{
  "files.read": [{"output": %q}],
  "files.write": [{"preview": {"path": "notes.txt", "diff": "--- a/notes.txt\n+++ b/notes.txt\n@@ -1,2 +1,2 @@\n keep\n-old line\n+new line\n"}, "receipt": {"written": true}}],
  "invoices.get": [{"output": {"invoice_id": "INV-42", "amount": "1200.00", "currency": "EUR", "charges": [{"id": "ch_1", "amount": "1200.00"}, {"id": "ch_2", "amount": "1200.00"}]}}],
  "refunds.create": [{"preview": {"refund": {"invoice_id": "{{.invoice_id}}", "charge": "ch_2", "amount": "{{.amount}}", "currency": "{{.currency}}"}}, "receipt": {"refund_id": "re_9", "status": "succeeded", "amount": "{{.amount}}", "currency": "{{.currency}}"}}]
}`, xss)

// contract is a run that reads (getting xss), proposes a file write, then
// answers: it pauses for the write.
func contract(goal string) *reinv1.TaskContract {
	call := func(tool, id string) *reinv1.ScriptedReply {
		args, _ := structpb.NewStruct(map[string]any{"path": "notes.txt"})
		return &reinv1.ScriptedReply{Reply: &reinv1.ScriptedReply_Decision{Decision: &reinv1.Decision{
			Action: &reinv1.Decision_ToolCall{ToolCall: &reinv1.ToolCall{Tool: tool, Arguments: args, CallId: id}}}}}
	}
	final := &reinv1.ScriptedReply{Reply: &reinv1.ScriptedReply_Decision{Decision: &reinv1.Decision{
		Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: "notes.txt is up to date"}}}}}
	return &reinv1.TaskContract{
		Goal: goal,
		Tools: []*reinv1.ToolGrant{
			{Name: "files.read", Tier: reinv1.ToolTier_TOOL_TIER_READ},
			{Name: "files.write", Tier: reinv1.ToolTier_TOOL_TIER_WRITE},
		},
		Budget:   &reinv1.Budget{MaxSteps: 6, MaxTokens: 100000},
		Approval: &reinv1.ApprovalPolicy{ProposalTtl: durationpb.New(time.Hour)},
		Model:    &reinv1.ModelSpec{Provider: "script", Script: []*reinv1.ScriptedReply{call("files.read", "c1"), call("files.write", "c2"), final}},
		Labels:   map[string]string{"team": "docs"},
	}
}

// startRun starts a run as ops and waits for it to pause for its write.
func startRun(t *testing.T, ctx context.Context, s *server, goal string) *reinv1.Run {
	t.Helper()
	got, err := s.runs.StartRun(as(ctx, "ops"), &reinv1.StartRunRequest{RequestId: goal, Contract: contract(goal)})
	if err != nil {
		t.Fatalf("start %q: %v", goal, err)
	}
	return waitStatus(t, ctx, s, got.GetRun().GetRunId(), reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL)
}

func waitStatus(t *testing.T, ctx context.Context, s *server, runID string, want reinv1.RunStatus) *reinv1.Run {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, err := s.runs.GetRun(as(ctx, "ops"), &reinv1.GetRunRequest{RunId: runID})
		if err == nil && got.GetRun().GetStatus() == want {
			return got.GetRun()
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s: %v, %v; want %v within 20s", runID, got.GetRun().GetStatus(), err, want)
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// until waits, in the page, for a JavaScript expression to be true.
func until(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(20*time.Second), chromedp.WithPollingInterval(25*time.Millisecond))); err != nil {
		// What the page showed instead, for the failure's reader.
		page, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`location.hash + "\n" + document.body.innerText.slice(0, 3000)`))
		t.Fatalf("waiting for %s (%s): %v\nthe page showed:\n%s", what, expr, err, page)
	}
}

func eval[T any](t *testing.T, ctx context.Context, expr string, opts ...chromedp.EvaluateOption) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, opts...))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

func do(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// signIn opens the console in ctx and signs in as id.
func signIn(t *testing.T, ctx context.Context, s *server, id string) {
	t.Helper()
	do(t, ctx, "open the console", chromedp.Navigate(s.url()), chromedp.WaitVisible(chromedp.CSS("#token")))
	do(t, ctx, "sign in as "+id, chromedp.SendKeys(chromedp.CSS("#token"), tokenOf(id)), chromedp.Click(chromedp.CSS("#sign-in")))
	until(t, ctx, id+" signed in", fmt.Sprintf(`document.querySelector("#principal")?.textContent === %q`, id))
}

func card(runID string) string { return fmt.Sprintf(`section.card[data-run=%q]`, runID) }

// TestConsole walks the console as a reviewer does, in one Chromium.
func TestConsole(t *testing.T) {
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b := browser(t, ctx)
	s := startServer(t)
	shot := newShots(t)
	ana := tab(t, b)
	// Each step builds on the one before: after a failure, the rest skip.
	broken := false
	step := func(name string, f func(t *testing.T)) {
		if broken {
			return
		}
		broken = !t.Run(name, f)
	}

	step("sign in", func(t *testing.T) {
		do(t, ana, "open the console", chromedp.Navigate(s.url()), chromedp.WaitVisible(chromedp.CSS("#token")))
		shot.take(ana, "sign-in")
		// A token the server does not know: refused, with the server's reason.
		do(t, ana, "sign in with a wrong token", chromedp.SendKeys(chromedp.CSS("#token"), "nope"), chromedp.Click(chromedp.CSS("#sign-in")))
		until(t, ana, "the refusal", `document.querySelector("form .outcome.refused")?.textContent.includes("unauthenticated: the bearer token is not known")`)
		if got := eval[bool](t, ana, `document.querySelector("#principal") === null && sessionStorage.getItem("rein.token") === null`); !got {
			t.Fatal("a refused sign-in left the tab signed in, or kept the token")
		}
		eval[bool](t, ana, `(document.querySelector("#token").value = "") === ""`)
		signIn(t, ana, s, "ana")
		roles := eval[string](t, ana, `document.querySelector("#roles").textContent`)
		if roles != "approver, operator" {
			t.Errorf("roles shown = %q, want approver, operator", roles)
		}
		// The token is for this tab only: not in the URL, not in a cookie.
		if got := eval[string](t, ana, `location.href + "|" + document.cookie`); strings.Contains(got, tokenOf("ana")) {
			t.Errorf("the token shows in the URL or a cookie: %s", got)
		}
	})

	var first *reinv1.Run
	step("runs list is live", func(t *testing.T) {
		until(t, ana, "the runs page", `document.querySelector("h2 .live")?.textContent === "live"`)
		first = startRun(t, ctx, s, "update notes.txt")
		until(t, ana, "the new run in the list, without a reload",
			fmt.Sprintf(`document.querySelector('tr.run[data-run=%q]')?.dataset.status === "needs_approval"`, first.GetRunId()))
		// The filter by status: a completed-only list does not hold it.
		do(t, ana, "filter completed", chromedp.SetValue(chromedp.CSS("select.status-filter"), fmt.Sprint(int(reinv1.RunStatus_RUN_STATUS_COMPLETED))))
		eval[bool](t, ana, `document.querySelector("select.status-filter").dispatchEvent(new Event("change"))`)
		until(t, ana, "the filtered list", fmt.Sprintf(`document.querySelector('tr.run[data-run=%q]') === null`, first.GetRunId()))
		do(t, ana, "filter any", chromedp.SetValue(chromedp.CSS("select.status-filter"), ""))
		eval[bool](t, ana, `document.querySelector("select.status-filter").dispatchEvent(new Event("change"))`)
		until(t, ana, "the whole list", fmt.Sprintf(`document.querySelector('tr.run[data-run=%q]') !== null`, first.GetRunId()))
		// The filter by labels: the run's own matches, another does not,
		// and one that is not KEY=VALUE is refused on the page.
		for _, tc := range []struct{ filter, want string }{
			{"team=other", "null"}, {"team=docs", "row"}, {"nonsense", "refused"},
		} {
			eval[bool](t, ana, fmt.Sprintf(`(() => { const l = document.querySelector("input.label-filter"); l.value = %q; return l.dispatchEvent(new Event("change")); })()`, tc.filter))
			switch tc.want {
			case "null":
				until(t, ana, "no run for "+tc.filter, fmt.Sprintf(`document.querySelector('tr.run[data-run=%q]') === null`, first.GetRunId()))
			case "row":
				until(t, ana, "the run for "+tc.filter, fmt.Sprintf(`document.querySelector('tr.run[data-run=%q]') !== null`, first.GetRunId()))
			case "refused":
				until(t, ana, "the refused filter", `document.querySelector("main .outcome.refused")?.textContent.includes("is not KEY=VALUE")`)
			}
		}
		eval[bool](t, ana, `(() => { const l = document.querySelector("input.label-filter"); l.value = ""; return l.dispatchEvent(new Event("change")); })()`)
		until(t, ana, "the whole list", `document.querySelector("main .outcome.refused") === null`)
		shot.take(ana, "runs")
	})

	step("timeline renders tool output as text", func(t *testing.T) {
		do(t, ana, "open the run", chromedp.Navigate(s.url()+"#/runs/"+first.GetRunId()))
		until(t, ana, "its events", `document.querySelector("tr.event.approval_requested") !== null`)
		out := eval[string](t, ana, `document.querySelector("tr.event.tool_returned .summary").textContent`)
		if !strings.Contains(out, `<img src=x onerror=`) || !strings.Contains(out, `<script>`) {
			t.Errorf("the tool's output is not shown as text: %q", out)
		}
		if got := eval[string](t, ana, `String(window.__pwned) + "|" + document.querySelectorAll("main img, main script").length`); got != "undefined|0" {
			t.Errorf("markup from a tool's output ran or reached the DOM: %s", got)
		}
		shot.take(ana, "run")
	})

	step("approve with the diff and hash", func(t *testing.T) {
		// A second tab whose live updates are cut (WatchRuns blocked), so
		// it still shows the proposal once the first tab has decided it.
		other := tab(t, b)
		signIn(t, other, s, "ana")
		if _, err := chromedp.Call(other, network.Enable, network.EnableParams{}); err != nil {
			t.Fatal(err)
		}
		if _, err := chromedp.Call(other, network.SetBlockedURLs, network.SetBlockedURLsParams{URLPatterns: []*network.BlockPattern{
			{URLPattern: "http://" + s.httpAddr + "/rein.v1.RunService/WatchRuns", Block: true},
		}}); err != nil {
			t.Fatal(err)
		}
		for _, tb := range []context.Context{ana, other} {
			do(t, tb, "open pending", chromedp.Navigate(s.url()+"#/pending"))
			until(t, tb, "the proposal", fmt.Sprintf(`document.querySelector('%s .hash') !== null`, card(first.GetRunId())))
		}
		hash := eval[string](t, ana, fmt.Sprintf(`document.querySelector('%s .hash').textContent`, card(first.GetRunId())))
		if want := first.GetPending().GetProposal().GetHash(); hash != want {
			t.Fatalf("hash shown %q, want the proposal's %q", hash, want)
		}
		diff := eval[string](t, ana, fmt.Sprintf(`[...document.querySelectorAll('%s .diff span')].map(s => s.className + ":" + s.textContent).join("\n")`, card(first.GetRunId())))
		if !strings.Contains(diff, "del:-old line") || !strings.Contains(diff, "add:+new line") || !strings.Contains(diff, "hunk:@@ -1,2 +1,2 @@") {
			t.Errorf("the preview's diff is not drawn as a diff:\n%s", diff)
		}
		shot.take(ana, "pending")
		if *update {
			copyFile(t, filepath.Join(shot.dir, "pending.png"), filepath.Join("..", "..", "docs", "console.png"))
		}
		do(t, ana, "approve", chromedp.Click(chromedp.CSS(card(first.GetRunId())+" button.approve")))
		until(t, ana, "the server's answer", fmt.Sprintf(`document.querySelector('%s .outcome.ok')?.textContent.startsWith("approved")`, card(first.GetRunId())))
		waitStatus(t, ctx, s, first.GetRunId(), reinv1.RunStatus_RUN_STATUS_COMPLETED)
		// The second tab still shows the proposal: its approve is refused
		// as already decided, and changes nothing.
		do(t, other, "approve again", chromedp.Click(chromedp.CSS(card(first.GetRunId())+" button.approve")))
		until(t, other, "the refusal", fmt.Sprintf(`document.querySelector('%s .outcome.refused')?.textContent.startsWith("refused: ")`, card(first.GetRunId())))
		t.Logf("a second approve: %s", eval[string](t, other, fmt.Sprintf(`document.querySelector('%s .outcome').textContent`, card(first.GetRunId()))))
		evs, err := s.runs.ListEvents(as(ctx, "ops"), &reinv1.ListEventsRequest{RunId: first.GetRunId()})
		if err != nil {
			t.Fatal(err)
		}
		decided := 0
		for _, ev := range evs.GetEvents() {
			if ev.GetApprovalDecided() != nil {
				decided++
			}
		}
		if decided != 1 {
			t.Errorf("%d approval decisions recorded, want 1", decided)
		}
		do(t, ana, "open the run", chromedp.Navigate(s.url()+"#/runs/"+first.GetRunId()))
		until(t, ana, "the run completed", `document.querySelector(".run-head [data-status]")?.dataset.status === "completed" && document.querySelector("tr.event.write_committed") !== null`)
	})

	step("deny with a reason, answered after the live update", func(t *testing.T) {
		r := startRun(t, ctx, s, "rewrite notes.txt")
		reason := "keep the old line: legal needs it"
		// The server's answer to the deny is held back until the page's
		// live update has listed the pending runs without this one, as on a
		// slow network: the card stays, says its answer is on the way, then
		// shows the answer.
		slow := tab(t, b)
		signIn(t, slow, s, "ana")
		net := watchCalls(t, slow, "/rein.v1.RunService/DecideApproval", "/rein.v1.RunService/ListRuns")
		do(t, slow, "open pending", chromedp.Navigate(s.url()+"#/pending"))
		until(t, slow, "the proposal", fmt.Sprintf(`document.querySelector('%s input.deny-reason') !== null`, card(r.GetRunId())))
		do(t, slow, "deny", chromedp.SendKeys(chromedp.CSS(card(r.GetRunId())+" input.deny-reason"), reason),
			chromedp.Click(chromedp.CSS(card(r.GetRunId())+" button.deny")))
		held := net.nextHeld()
		net.arrivedWith("listing the pending runs without "+r.GetRunId(), func(body string) bool { return !strings.Contains(body, r.GetRunId()) })
		until(t, slow, "the card, its answer on the way", fmt.Sprintf(`(() => { const c = document.querySelector('%s');
		  return c !== null && c.querySelector(".outcome.sending") !== null && c.querySelector("button.deny").disabled; })()`, card(r.GetRunId())))
		net.release(held)
		until(t, slow, "the server's answer", fmt.Sprintf(`document.querySelector('%s .outcome.ok')?.textContent.startsWith("denied")`, card(r.GetRunId())))
		// The model's next step is asked with the reason in its context.
		done := waitStatus(t, ctx, s, r.GetRunId(), reinv1.RunStatus_RUN_STATUS_COMPLETED)
		if !modelSaw(t, ctx, s, done.GetRunId(), reason) {
			t.Errorf("no model call after the denial had %q in its input", reason)
		}
		do(t, ana, "open the run", chromedp.Navigate(s.url()+"#/runs/"+r.GetRunId()))
		until(t, ana, "the denial and the model's next step",
			fmt.Sprintf(`(() => { const rows = [...document.querySelectorAll("tr.event")];
			  const i = rows.findIndex(r => r.classList.contains("approval_decided") && r.textContent.includes(%q));
			  return i >= 0 && rows.slice(i).some(r => r.classList.contains("model_returned")); })()`, reason))
	})

	step("answer a question", func(t *testing.T) { answerQuestion(t, ctx, ana, s) })
	step("message a running run", func(t *testing.T) { steerRun(t, ctx, ana, s) })
	step("a message to a paused run is refused", func(t *testing.T) { steerPaused(t, ctx, b, s) })
	step("raise a budget", func(t *testing.T) { raiseBudget(t, ctx, ana, s) })
	step("export, fork and cancel", func(t *testing.T) { exportForkCancel(t, ctx, ana, s, first) })

	var paused *reinv1.Run
	step("viewer cannot approve", func(t *testing.T) {
		paused = startRun(t, ctx, s, "tidy notes.txt")
		vic := tab(t, b)
		signIn(t, vic, s, "vic")
		do(t, vic, "open pending", chromedp.Navigate(s.url()+"#/pending"))
		until(t, vic, "the proposal, without buttons", fmt.Sprintf(`document.querySelector('%s .note')?.textContent.includes("approver role")`, card(paused.GetRunId())))
		if n := eval[int](t, vic, `document.querySelectorAll("button.approve, button.deny").length`); n != 0 {
			t.Errorf("a viewer sees %d approve/deny buttons", n)
		}
		// A forged approve, through the same API the console uses.
		got := eval[string](t, vic, fmt.Sprintf(`fetch("/rein.v1.RunService/DecideApproval", {method: "POST",
			headers: {"content-type": "application/json", "connect-protocol-version": "1", "authorization": "Bearer " + sessionStorage.getItem("rein.token")},
			body: JSON.stringify({runId: %q, proposalId: %q, proposalHash: %q, verdict: "APPROVAL_VERDICT_APPROVE"})})
			.then(r => r.text().then(t => r.status + " " + t))`,
			paused.GetRunId(), paused.GetPending().GetProposal().GetProposalId(), paused.GetPending().GetProposal().GetHash()), chromedp.EvalAwaitPromise)
		if !strings.HasPrefix(got, "403 ") || !strings.Contains(got, "permission_denied") || !strings.Contains(got, "approver") {
			t.Errorf("a viewer's forged approve: %s; want 403 permission_denied naming the approver role", got)
		}
		waitStatus(t, ctx, s, paused.GetRunId(), reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL)
	})

	step("timeline resumes after a dropped connection", func(t *testing.T) {
		do(t, ana, "open the run", chromedp.Navigate(s.url()+"#/runs/"+paused.GetRunId()))
		until(t, ana, "its events", `document.querySelector("tr.event.approval_requested") !== null && document.querySelector("h2 .live")?.textContent === "live"`)
		before := eval[string](t, ana, `document.querySelector("table.timeline").dataset.last`)
		s.stop() // every connection drops
		until(t, ana, "the drop noticed", `document.querySelector("h2 .live")?.textContent === "reconnecting"`)
		s.start()
		until(t, ana, "reconnected", `Number(document.querySelector("table.timeline").dataset.reconnects) >= 1 && document.querySelector("h2 .live")?.textContent === "live"`)
		if _, err := s.runs.DecideApproval(as(ctx, "ana"), &reinv1.DecideApprovalRequest{
			RunId: paused.GetRunId(), ProposalId: paused.GetPending().GetProposal().GetProposalId(),
			ProposalHash: paused.GetPending().GetProposal().GetHash(), Verdict: reinv1.ApprovalVerdict_APPROVAL_VERDICT_APPROVE,
		}); err != nil {
			t.Fatalf("approve after the restart: %v", err)
		}
		done := waitStatus(t, ctx, s, paused.GetRunId(), reinv1.RunStatus_RUN_STATUS_COMPLETED)
		evs, err := s.runs.ListEvents(as(ctx, "ops"), &reinv1.ListEventsRequest{RunId: done.GetRunId()})
		if err != nil {
			t.Fatal(err)
		}
		n := len(evs.GetEvents())
		until(t, ana, "every event", fmt.Sprintf(`document.querySelector("table.timeline").dataset.last === "%d"`, n))
		seqs := eval[string](t, ana, `[...document.querySelectorAll("tr.event")].map(r => r.dataset.seq).join(",")`)
		var want []string
		for i := 1; i <= n; i++ {
			want = append(want, fmt.Sprint(i))
		}
		if seqs != strings.Join(want, ",") {
			t.Errorf("timeline after the drop (at %s) = %s, want each of 1..%d once", before, seqs, n)
		}
		if g := eval[string](t, ana, `document.querySelector("table.timeline").dataset.gaps`); g != "0" {
			t.Errorf("%s gaps seen", g)
		}
	})

	// Last: a failed step skips the steps after it, and this one needs the
	// server's newest call (DecideApproval's REVISE).
	step("revise a proposal's arguments", func(t *testing.T) { reviseProposal(t, ctx, ana, s) })

	t.Logf("the browser suite took %v", time.Since(began).Round(time.Millisecond))
}

// modelSaw reports whether a model call of the run had text in its input.
func modelSaw(t *testing.T, ctx context.Context, s *server, runID, text string) bool {
	t.Helper()
	evs, err := s.runs.ListEvents(as(ctx, "ops"), &reinv1.ListEventsRequest{RunId: runID})
	if err != nil {
		t.Fatal(err)
	}
	var hashes []string
	for _, ev := range evs.GetEvents() {
		hashes = append(hashes, ev.GetModelRequested().GetInputBlobs()...)
	}
	if len(hashes) == 0 {
		t.Fatal("no model input blobs recorded")
	}
	blobs, err := s.runs.GetBlobs(as(ctx, "ops"), &reinv1.GetBlobsRequest{RunId: runID, Hashes: hashes})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range blobs.GetBlobs() {
		if strings.Contains(string(b), text) {
			return true
		}
	}
	for _, ev := range evs.GetEvents() {
		t.Logf("event %d: %v", ev.GetSequence(), ev.GetPayload())
	}
	return false
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
