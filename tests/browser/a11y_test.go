package browser

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// axeScript is axe-core, from web/'s devDependencies (npm ci in web/).
func axeScript(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "web", "node_modules", "axe-core", "axe.min.js"))
	if err != nil {
		t.Fatalf("read axe-core: %v (run npm ci in web/)", err)
	}
	return string(b)
}

// axeClean runs axe-core on the tab's page and fails on any serious or
// critical violation, naming the rule and the elements.
func axeClean(t *testing.T, ctx context.Context, axe, page string) {
	t.Helper()
	if !eval[bool](t, ctx, axe+";\ntrue") {
		t.Fatal("axe-core did not load")
	}
	got := eval[[]string](t, ctx, `axe.run(document, {resultTypes: ["violations"]}).then(r => r.violations
	  .filter(v => v.impact === "serious" || v.impact === "critical")
	  .map(v => v.impact + " " + v.id + ": " + v.help + " [" + v.nodes.map(n => n.target.join(" ")).join(", ") + "]"))`, chromedp.EvalAwaitPromise)
	for _, v := range got {
		t.Errorf("%s: axe: %s", page, v)
	}
}

// fits shoots the tab's page at each viewport size into dir as
// PAGE-WxH.png and fails when the page is wider than the viewport.
func fits(t *testing.T, ctx context.Context, shot *shots, page string) {
	t.Helper()
	for _, size := range [][2]int64{{1400, 1000}, {390, 844}} {
		if _, err := chromedp.Call(ctx, emulation.SetDeviceMetricsOverride, emulation.SetDeviceMetricsOverrideParams{
			Width: size[0], Height: size[1], DeviceScaleFactor: 1, Mobile: size[0] < 600}); err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("%s-%dx%d", page, size[0], size[1])
		if over := eval[string](t, ctx, `(() => { const w = document.documentElement.scrollWidth;
		  return w <= innerWidth ? "" : w + " > " + innerWidth + ": " + [...document.querySelectorAll("body *")]
		    .filter(e => e.getBoundingClientRect().right > innerWidth + 1).slice(-3).map(e => e.tagName + "." + e.className).join(", "); })()`); over != "" {
			t.Errorf("%s overflows horizontally: %s", name, over)
		}
		shot.take(ctx, name)
	}
	if _, err := chromedp.Call(ctx, emulation.ClearDeviceMetricsOverride, cdp.Empty{}); err != nil {
		t.Fatal(err)
	}
}

// TestAccessibleCard: the runs list, a run page and the pending card have
// no serious or critical axe-core violation and fit 1400×1000 and 390×844;
// the card shows what a person needs to decide; a person approves with
// the keyboard alone (Tab to Approve, Enter) and the run goes on.
func TestAccessibleCard(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b := browser(t, ctx)
	s := startServer(t)
	shot := newShots(t)
	axe := axeScript(t)
	ana := tab(t, b)
	do(t, ana, "open the console", chromedp.Navigate(s.url()), chromedp.WaitVisible(chromedp.CSS("#token")))
	signIn(t, ana, s, "ana")
	r := startRun(t, ctx, s, "rewrite notes.txt")
	p := r.GetPending().GetProposal()
	c := card(r.GetRunId())

	until(t, ana, "the runs list", fmt.Sprintf(`document.querySelector("h2 .live")?.textContent === "live" && document.body.textContent.includes(%q)`, r.GetRunId()))
	axeClean(t, ana, axe, "runs list")
	fits(t, ana, shot, "runs")

	do(t, ana, "open the run", chromedp.Navigate(s.url()+"#/runs/"+r.GetRunId()))
	until(t, ana, "the run and its card", fmt.Sprintf(`document.querySelector("tr.event.approval_requested") !== null && document.querySelector('%s .evidence-list') !== null`, c))
	axeClean(t, ana, axe, "run page")
	fits(t, ana, shot, "run")

	do(t, ana, "open pending", chromedp.Navigate(s.url()+"#/pending"))
	until(t, ana, "the card with its evidence", fmt.Sprintf(`document.querySelector('%s .evidence-list li a') !== null`, c))
	// What the card shows to decide on.
	for what, expr := range map[string]string{
		"the proposal's id":     fmt.Sprintf(`document.querySelector('%s .proposal-id').textContent === %q`, c, p.GetProposalId()),
		"what Approve does":     fmt.Sprintf(`document.querySelector('%s .approve-does').textContent.includes("with idempotency key op_%s") && document.querySelector('%s .approve-does').textContent.includes("then goes on")`, c, p.GetProposalId(), c),
		"the spend":             fmt.Sprintf(`/tokens .*cost \$.*tool calls \d+/.test(document.querySelector('%s .spent').textContent)`, c),
		"the arguments":         fmt.Sprintf(`document.querySelector('%s .arguments dd[data-key=path]')?.textContent === "notes.txt"`, c),
		"a zoned time":          fmt.Sprintf(`/\(UTC[+-]\d\d:\d\d\)/.test(document.querySelector('%s .expires').textContent)`, c),
		"evidence linked":       fmt.Sprintf(`/^#\/runs\/[^/]+\/events\/\d+$/.test(document.querySelector('%s .evidence-list li a').getAttribute("href"))`, c),
		"end the run is Deny's": fmt.Sprintf(`document.querySelector('%s .end-run').closest("form").classList.contains("deny-form") && document.querySelector('%s .approve-form .end-run') === null`, c, c),
	} {
		if !eval[bool](t, ana, expr) {
			t.Errorf("the card does not show %s", what)
		}
	}
	axeClean(t, ana, axe, "pending card")
	fits(t, ana, shot, "pending")

	// Keyboard only: Tab from the top of the page until Approve has the
	// focus, then Enter.
	eval[bool](t, ana, `(document.activeElement?.blur(), window.scrollTo(0, 0), true)`)
	reached := false
	for i := 0; i < 80 && !reached; i++ {
		do(t, ana, "tab", chromedp.KeyEvent(kb.Tab))
		reached = eval[bool](t, ana, fmt.Sprintf(`document.activeElement === document.querySelector('%s button.approve')`, c))
	}
	if !reached {
		t.Fatal("Tab never reached the Approve button")
	}
	do(t, ana, "press Enter", chromedp.KeyEvent(kb.Enter))
	until(t, ana, "the server's answer", fmt.Sprintf(`document.querySelector('%s .outcome.ok')?.textContent.startsWith("approved")`, c))
	// The decided card's buttons are off and say so.
	if !eval[bool](t, ana, fmt.Sprintf(`[...document.querySelectorAll('%s button.approve, %s button.deny')].every(b => b.disabled && b.getAttribute("aria-disabled") === "true" && getComputedStyle(b).cursor === "not-allowed")`, c, c)) {
		t.Error("the decided card's buttons are not disabled, or do not look it")
	}
	waitStatus(t, ctx, s, r.GetRunId(), reinv1.RunStatus_RUN_STATUS_COMPLETED)
}
