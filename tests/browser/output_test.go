package browser

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// streamContract asks a person first, so the run's page is open and
// watching before the call that streams is sent; that call, step 2, writes
// chunks, gapMs apart, then pauses 1.5s with its whole text written before
// it returns, answering with the text. With retry, its first attempt fails
// as a rate limit and the second writes the text.
func streamContract(goal string, chunks []string, gapMs uint32, retry bool) *reinv1.TaskContract {
	c := questionContract(goal, "Go ahead?")
	var cs []*reinv1.ScriptedChunk
	for i, text := range chunks {
		c := &reinv1.ScriptedChunk{Text: text, DelayMs: gapMs}
		if i == 0 {
			c.DelayMs = 0
		}
		cs = append(cs, c)
	}
	cs = append(cs, &reinv1.ScriptedChunk{DelayMs: 1500})
	r := c.Model.Script[1]
	r.Chunks = cs
	r.Reply = &reinv1.ScriptedReply_Decision{Decision: &reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: strings.Join(chunks, "")}}}}
	if retry {
		r.FailAttempts, r.RetryAfterMs = 1, 100
	}
	return c
}

// The page's panel of the model call in flight, and its text.
const (
	panel      = `document.querySelector("section.writing")`
	panelText  = `(document.querySelector("section.writing .writing-text")?.textContent ?? "")`
	panelTitle = `(document.querySelector("section.writing h3")?.textContent ?? "")`
	// returned counts the model_returned rows: step 1's (the question), then step 2's.
	returned = `document.querySelectorAll("tr.event.model_returned").length`
)

// watchWriting starts a streamContract run, opens its page while it waits
// for its answer, answers it over gRPC, and follows the panel: it shows
// the first chunk before the call has returned, then the whole text, then
// goes once the call returned, and the run completes. It returns the run's
// ID and every text the panel showed, in order.
func watchWriting(t *testing.T, ctx, ana context.Context, s *server, shot *shots, id string, chunks []string, retry bool) (string, []string) {
	t.Helper()
	got, err := s.runs.StartRun(as(ctx, "ops"), &reinv1.StartRunRequest{RequestId: id, Contract: streamContract(id, chunks, 400, retry)})
	if err != nil {
		t.Fatal(err)
	}
	runID := got.GetRun().GetRunId()
	waitStatus(t, ctx, s, runID, reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT)
	do(t, ana, "open the run", chromedp.Navigate(s.url()+"#/runs/"+runID))
	until(t, ana, "the run's question, live", fmt.Sprintf(`document.querySelector(".run-head code")?.textContent === %q && document.querySelector("tr.event.input_requested") !== null && document.querySelector("h2 .live")?.textContent === "live" && %s.hidden`, runID, panel))
	// Every text the panel shows, as it changes, and every element that
	// reaches its text (none may: the text is the model's, shown as text).
	eval[bool](t, ana, `(() => { const p = document.querySelector("section.writing"), pre = p.querySelector(".writing-text");
	  window.__shown = []; window.__elements = [];
	  new MutationObserver((ms) => {
	    for (const m of ms) for (const n of m.addedNodes) if (n.nodeType !== Node.TEXT_NODE && pre.contains(n)) window.__elements.push(n.nodeName);
	    if (!p.hidden) window.__shown.push(pre.textContent);
	  }).observe(p, {subtree: true, childList: true, characterData: true, attributes: true}); return true; })()`)
	if _, err := s.runs.ProvideInput(as(ctx, "ana"), &reinv1.ProvideInputRequest{RunId: runID, Text: "yes"}); err != nil {
		t.Fatal(err)
	}
	full := strings.Join(chunks, "")
	title := "The model is writing… step 2"
	if retry {
		title += " (retry)"
	}
	until(t, ana, "the first chunk, before the call returned", fmt.Sprintf(`!%s.hidden && %s.startsWith(%q) && %s !== %q && %s === %q && %s === 1`,
		panel, panelText, chunks[0], panelText, full, panelTitle, title, returned))
	until(t, ana, "the whole text, before the call returned", fmt.Sprintf(`!%s.hidden && %s === %q && %s === 1`, panel, panelText, full, returned))
	shot.take(ana, id)
	if got := eval[string](t, ana, `[...document.querySelectorAll("section.writing .writing-text *, section.writing b, section.writing img, section.writing script")].map(e => e.nodeName).join(",") + "|" + window.__elements.join(",")`); got != "|" {
		t.Errorf("the model's text put elements in the panel (now|ever): %s", got)
	}
	until(t, ana, "the panel gone, the reply shown, the run completed", fmt.Sprintf(`%s.hidden && %s === 2 && document.querySelector(".run-head [data-status]")?.dataset.status === "completed" && document.querySelector("h2 .live")?.textContent === "ended"`, panel, returned))
	waitStatus(t, ctx, s, runID, reinv1.RunStatus_RUN_STATUS_COMPLETED)
	if reply := eval[string](t, ana, `[...document.querySelectorAll("tr.event.model_returned .summary")].pop().textContent`); !strings.Contains(reply, "answers: "+full) {
		t.Errorf("the model_returned row reads %q, want the reply %q", reply, full)
	}
	// The model's text is no event: the timeline's cursor is the last event's.
	n := len(events(t, ctx, s, runID))
	if last := eval[string](t, ana, `document.querySelector("table.timeline").dataset.last + "/" + document.querySelector("table.timeline").dataset.gaps`); last != fmt.Sprintf("%d/0", n) {
		t.Errorf("the timeline's last event/gaps = %s, want %d/0", last, n)
	}
	if seqs, want := eval[string](t, ana, `[...document.querySelectorAll("tr.event")].map(r => r.dataset.seq).join(",")`), seqList(n); seqs != want {
		t.Errorf("the timeline's events %s, want %s", seqs, want)
	}
	return runID, eval[[]string](t, ana, `window.__shown`)
}

func seqList(n int) string {
	var s []string
	for i := 1; i <= n; i++ {
		s = append(s, fmt.Sprint(i))
	}
	return strings.Join(s, ",")
}

// TestModelOutput: the run page shows the text of the model call in flight
// as the model writes it, as text, and drops it once the call returned.
func TestModelOutput(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b := browser(t, ctx)
	s := startServer(t)
	shot := newShots(t)
	ana := tab(t, b)
	signIn(t, ana, s, "ana")

	t.Run("the text appears as the model writes it", func(t *testing.T) {
		chunks := []string{"Reading the notes… ", "they are up to date, ", "nothing to change."}
		_, shown := watchWriting(t, ctx, ana, s, shot, "stream", chunks, false)
		// The panel grew, piece by piece, only ever showing the start of
		// the text.
		full := strings.Join(chunks, "")
		partial := 0
		for i, text := range shown {
			if !strings.HasPrefix(full, text) || (i > 0 && len(text) < len(shown[i-1])) {
				t.Errorf("the panel showed %q after %q: not the text growing", text, shown[max(i-1, 0)])
			}
			if text != "" && text != full {
				partial++
			}
		}
		if partial == 0 {
			t.Errorf("the panel showed %q: never part of the text", shown)
		}
	})

	t.Run("markup in the model's text is shown as text", func(t *testing.T) {
		chunks := []string{"Here is <b>bold</b> ", `and <img src=x onerror="window.__pwned='stream'"> `, "<script>window.__pwned='script'</script>done."}
		// Its first attempt fails: the text comes from the retry.
		runID, shown := watchWriting(t, ctx, ana, s, shot, "stream-markup", chunks, true)
		full := strings.Join(chunks, "")
		if !slices.Contains(shown, full) {
			t.Errorf("the panel showed %q, never the text %q as written", shown, full)
		}
		if got := eval[string](t, ana, `String(window.__pwned) + "|" + document.querySelectorAll("main b, main img, main script").length`); got != "undefined|0" {
			t.Errorf("markup in the model's text ran or reached the DOM: %s", got)
		}
		retried := 0
		for _, ev := range events(t, ctx, s, runID) {
			if ev.GetModelRetried() != nil {
				retried++
			}
		}
		if retried != 1 {
			t.Errorf("%d retries recorded, want 1", retried)
		}
	})
}
