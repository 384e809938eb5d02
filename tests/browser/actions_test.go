package browser

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// questionContract asks a person, then answers.
func questionContract(goal, question string) *reinv1.TaskContract {
	c := contract(goal)
	c.Model.Script = []*reinv1.ScriptedReply{
		{Reply: &reinv1.ScriptedReply_Decision{Decision: &reinv1.Decision{Action: &reinv1.Decision_AskHuman{AskHuman: &reinv1.AskHuman{Question: question}}}}},
		{Reply: &reinv1.ScriptedReply_Decision{Decision: &reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: "done"}}}}},
	}
	return c
}

// answerQuestion: a question waits on Pending with an answer box; the
// answer reaches the run, which goes on to its end.
func answerQuestion(t *testing.T, ctx, ana context.Context, s *server) {
	got, err := s.runs.StartRun(as(ctx, "ops"), &reinv1.StartRunRequest{RequestId: "question", Contract: questionContract("pick a branch", "Which branch: main or release?")})
	if err != nil {
		t.Fatal(err)
	}
	id := got.GetRun().GetRunId()
	waitStatus(t, ctx, s, id, reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT)
	do(t, ana, "open pending", chromedp.Navigate(s.url()+"#/pending"))
	until(t, ana, "the question", fmt.Sprintf(`document.querySelector('%s .text')?.textContent === "Which branch: main or release?"`, card(id)))
	do(t, ana, "answer", chromedp.SendKeys(chromedp.CSS(card(id)+" textarea.answer"), "release"),
		chromedp.Click(chromedp.CSS(card(id)+" button.send")))
	until(t, ana, "the server's answer", fmt.Sprintf(`document.querySelector('%s .outcome.ok')?.textContent.startsWith("answered")`, card(id)))
	waitStatus(t, ctx, s, id, reinv1.RunStatus_RUN_STATUS_COMPLETED)
	evs, err := s.runs.ListEvents(as(ctx, "ops"), &reinv1.ListEventsRequest{RunId: id})
	if err != nil {
		t.Fatal(err)
	}
	var answers []string
	for _, ev := range evs.GetEvents() {
		if p := ev.GetInputProvided(); p != nil {
			answers = append(answers, ev.GetActor()+": "+p.GetText())
		}
	}
	if len(answers) != 1 || answers[0] != "principal:ana: release" {
		t.Errorf("answers recorded %q, want ana's one", answers)
	}
}

// exportForkCancel: the export file downloaded from a run's page reads
// back with rein inspect; a fork at an event starts a new run from it;
// cancelling that run from its page ends it with the reason given.
func exportForkCancel(t *testing.T, ctx, ana context.Context, s *server, done *reinv1.Run) {
	dir := t.TempDir()
	if _, err := chromedp.CallBrowser(ana, cdpbrowser.SetDownloadBehavior, cdpbrowser.SetDownloadBehaviorParams{
		Behavior: cdpbrowser.SetDownloadBehaviorBehaviorAllow, DownloadPath: dir,
	}); err != nil {
		t.Fatal(err)
	}
	do(t, ana, "open the run", chromedp.Navigate(s.url()+"#/runs/"+done.GetRunId()))
	until(t, ana, "the run ended", `document.querySelector("h2 .live")?.textContent === "ended"`)
	do(t, ana, "download the export", chromedp.Click(chromedp.CSS("button.export")))
	until(t, ana, "the export made", `document.querySelector(".outcome.ok")?.textContent.startsWith("exported")`)
	file := filepath.Join(dir, done.GetRunId()+".json")
	deadline := time.Now().Add(20 * time.Second)
	for {
		if b, err := os.ReadFile(file); err == nil && strings.HasSuffix(string(b), "}\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no export file %s within 20s", file)
		}
		select { // the browser writes the download on its own time: poll it
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	out, err := exec.CommandContext(ctx, reinBin, "inspect", file).CombinedOutput()
	if err != nil || !strings.Contains(string(out), done.GetRunId()) || !strings.Contains(string(out), "completed") {
		t.Fatalf("rein inspect %s: %v\n%s", file, err, out)
	}

	// Fork at the tool's result: the new run carries events 1..5 and goes
	// on to propose the write again.
	do(t, ana, "fork", chromedp.Click(chromedp.CSS(`tr.event[data-seq="5"] button.fork`)))
	until(t, ana, "the fork made", `document.querySelector(".outcome.ok a") !== null`)
	forkID := eval[string](t, ana, `document.querySelector(".outcome.ok a").textContent`)
	fork := waitStatus(t, ctx, s, forkID, reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL)
	evs, err := s.runs.ListEvents(as(ctx, "ops"), &reinv1.ListEventsRequest{RunId: fork.GetRunId()})
	if err != nil {
		t.Fatal(err)
	}
	if st := evs.GetEvents()[0].GetRunStarted(); st.GetParentRunId() != done.GetRunId() || st.GetParentSequence() != 5 {
		t.Errorf("the fork started from %s at %d, want %s at 5", st.GetParentRunId(), st.GetParentSequence(), done.GetRunId())
	}

	reason := "superseded by the original"
	do(t, ana, "open the fork", chromedp.Click(chromedp.CSS(".outcome.ok a")))
	until(t, ana, "the fork's page", fmt.Sprintf(`document.querySelector(".run-head code")?.textContent === %q && document.querySelector("button.cancel")?.closest("[hidden]") === null`, forkID))
	do(t, ana, "cancel", chromedp.SendKeys(chromedp.CSS("input.cancel-reason"), reason), chromedp.Click(chromedp.CSS("button.cancel")))
	until(t, ana, "the server's answer", `document.querySelector(".outcome.ok")?.textContent.startsWith("cancelled")`)
	until(t, ana, "the run cancelled, its cancel button gone",
		`document.querySelector(".run-head [data-status]")?.dataset.status === "cancelled" && document.querySelector("button.cancel").closest("[hidden]") !== null`)
	got := waitStatus(t, ctx, s, forkID, reinv1.RunStatus_RUN_STATUS_CANCELLED)
	if !strings.Contains(got.GetStatusReason(), reason) {
		t.Errorf("cancelled with reason %q, want %q in it", got.GetStatusReason(), reason)
	}
	// Cancelling again, as a forged call: refused, and the run unchanged.
	code := eval[string](t, ana, fmt.Sprintf(`fetch("/rein.v1.RunService/CancelRun", {method: "POST",
		headers: {"content-type": "application/json", "connect-protocol-version": "1", "authorization": "Bearer " + sessionStorage.getItem("rein.token")},
		body: JSON.stringify({runId: %q, reason: "again"})}).then(r => r.json()).then(j => j.code)`, forkID), chromedp.EvalAwaitPromise)
	if code != "failed_precondition" {
		t.Errorf("a second cancel: %q, want failed_precondition", code)
	}
	if again := waitStatus(t, ctx, s, forkID, reinv1.RunStatus_RUN_STATUS_CANCELLED); again.GetVersion() != got.GetVersion() {
		t.Errorf("a refused cancel changed the run: version %d → %d", got.GetVersion(), again.GetVersion())
	}
}
