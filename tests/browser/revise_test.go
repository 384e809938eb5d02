package browser

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// refundRun is examples/refund's run: it reads invoice INV-42, proposes
// to refund 1200.00 EUR of it, then answers. Its proposal expires (30
// minutes) before its deadline (an hour), so the pause ends by the
// proposal's TTL.
func refundRun(t *testing.T, ctx context.Context, s *server) *reinv1.Run {
	t.Helper()
	call := func(tool, id string, args map[string]any, in, out uint64) *reinv1.ScriptedReply {
		a, err := structpb.NewStruct(args)
		if err != nil {
			t.Fatal(err)
		}
		return &reinv1.ScriptedReply{Usage: &reinv1.Usage{InputTokens: in, OutputTokens: out},
			Reply: &reinv1.ScriptedReply_Decision{Decision: &reinv1.Decision{
				Action: &reinv1.Decision_ToolCall{ToolCall: &reinv1.ToolCall{Tool: tool, Arguments: a, CallId: id}}}}}
	}
	final := &reinv1.ScriptedReply{Usage: &reinv1.Usage{InputTokens: 520, OutputTokens: 18},
		Reply: &reinv1.ScriptedReply_Decision{Decision: &reinv1.Decision{
			Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: "Refunded the duplicate charge on INV-42."}}}}}
	goal := "Customer Acme Ltd was charged twice for invoice INV-42. Refund the duplicate charge."
	got, err := s.runs.StartRun(as(ctx, "ops"), &reinv1.StartRunRequest{RequestId: "refund INV-42", Contract: &reinv1.TaskContract{
		Goal: goal,
		Tools: []*reinv1.ToolGrant{
			{Name: "invoices.get", Tier: reinv1.ToolTier_TOOL_TIER_READ},
			{Name: "refunds.create", Tier: reinv1.ToolTier_TOOL_TIER_WRITE},
		},
		Budget:   &reinv1.Budget{MaxSteps: 6, MaxTokens: 20000, Timeout: durationpb.New(time.Hour)},
		Approval: &reinv1.ApprovalPolicy{ProposalTtl: durationpb.New(30 * time.Minute)},
		Model: &reinv1.ModelSpec{Provider: "script", Script: []*reinv1.ScriptedReply{
			call("invoices.get", "c1", map[string]any{"invoice_id": "INV-42"}, 300, 20),
			call("refunds.create", "c2", map[string]any{"invoice_id": "INV-42", "amount": "1200.00", "currency": "EUR", "reason": "duplicate charge"}, 450, 35),
			final,
		}},
		Labels: map[string]string{"team": "billing"},
	}})
	if err != nil {
		t.Fatalf("start the refund: %v", err)
	}
	return waitStatus(t, ctx, s, got.GetRun().GetRunId(), reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL)
}

// TestReviseRefund: a person revises a refund on Pending as
// docs/operating.md's console section tells it. The pending card shows
// the arguments and the preview as fields, the proposal's id, the spend
// against the budget, the evidence, what Approve does and that the pause
// ends by the proposal's TTL; the edit box sends the revision with its
// reason; the revised card shows who revised it, why, and the change; the
// revision approved with a reason is the refund made. With
// REIN_DOC_SCREENSHOTS=DIR it writes the two cards as
// DIR/console-pending.png and DIR/console-revised.png (the docs' pictures:
// compress them with pngquant before committing); without, it takes none.
func TestReviseRefund(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b := browser(t, ctx)
	s := startServer(t)
	ana := tab(t, b)
	signIn(t, ana, s, "ana")
	r := refundRun(t, ctx, s)
	old := r.GetPending().GetProposal()
	c := card(r.GetRunId())
	if _, err := chromedp.Call(ana, emulation.SetDeviceMetricsOverride, emulation.SetDeviceMetricsOverrideParams{
		Width: 1400, Height: 1000, DeviceScaleFactor: 1}); err != nil {
		t.Fatal(err)
	}

	do(t, ana, "open pending", chromedp.Navigate(s.url()+"#/pending"))
	until(t, ana, "the card with its evidence", fmt.Sprintf(`document.querySelector('%s .evidence-list li a') !== null`, c))
	for what, expr := range map[string]string{
		"the proposal's id":            fmt.Sprintf(`document.querySelector('%s .proposal-id').textContent === %q`, c, old.GetProposalId()),
		"the amount as a field":        fmt.Sprintf(`document.querySelector('%s .arguments dd[data-key=amount]')?.textContent === "1200.00"`, c),
		"the preview's fields":         fmt.Sprintf(`document.querySelector('%s .preview-box').open && document.querySelector('%s .preview-box').textContent.includes("ch_2")`, c, c),
		"the spend against the budget": fmt.Sprintf(`document.querySelector('%s .spent').textContent.includes("/ 20000")`, c),
		"the invoice as evidence":      fmt.Sprintf(`document.querySelector('%s .evidence-list li a').textContent.endsWith("invoices.get")`, c),
		"what Approve does":            fmt.Sprintf(`document.querySelector('%s .approve-does').textContent.includes("refunds.create with these arguments once, with idempotency key op_%s")`, c, old.GetProposalId()),
		"the pause ends by its TTL":    fmt.Sprintf(`document.querySelector('%s .expires').dataset.endsBy === "proposal_ttl" && document.querySelector('%s .expires').textContent.includes("the proposal expires: the run then ends expired")`, c, c),
	} {
		if !eval[bool](t, ana, expr) {
			t.Errorf("the pending card does not show %s", what)
		}
	}

	do(t, ana, "edit the arguments", chromedp.Click(chromedp.CSS(c+" button.edit")))
	until(t, ana, "the arguments as JSON", fmt.Sprintf(`(() => { const b = document.querySelector('%s textarea.edit-arguments');
	  return b !== null && !b.closest("[hidden]") && b.value !== "" && JSON.parse(b.value).amount === "1200.00"; })()`, c))
	const why = "support credited 200.00 EUR on ticket 8812; refund the rest"
	fill(t, ana, c+" textarea.edit-arguments", "{\n  \"amount\": \"1000.00\",\n  \"currency\": \"EUR\",\n  \"invoice_id\": \"INV-42\",\n  \"reason\": \"duplicate charge\"\n}")
	fill(t, ana, c+" input.revise-reason", why)
	docShot(t, ana, c, "console-pending")

	do(t, ana, "send the revision", chromedp.Click(chromedp.CSS(c+" button.revise")))
	revised := fmt.Sprintf(`%s:not([data-proposal=%q])`, c, old.GetProposalId())
	until(t, ana, "the revision's change", fmt.Sprintf(`document.querySelector('%s .changes li[data-path="/amount"]') !== null`, revised))
	newID := eval[string](t, ana, fmt.Sprintf(`document.querySelector('%s').dataset.proposal`, revised))
	for what, expr := range map[string]string{
		"who revised it":  fmt.Sprintf(`document.querySelector('%s .revised-by').textContent.includes("ana")`, revised),
		"why":             fmt.Sprintf(`document.querySelector('%s .revision-reason').textContent === %q`, revised, why),
		"the change":      fmt.Sprintf(`document.querySelector('%s .changes li[data-path="/amount"]').textContent === "/amount: 1200.00 → 1000.00"`, revised),
		"one change only": fmt.Sprintf(`document.querySelectorAll('%s .changes li').length === 1`, revised),
		"the new preview": fmt.Sprintf(`document.querySelector('%s .preview-box').textContent.includes("1000.00")`, revised),
	} {
		if !eval[bool](t, ana, expr) {
			t.Errorf("the revised card does not show %s", what)
		}
	}
	// The preview the tool gave again, opened for the picture.
	eval[bool](t, ana, fmt.Sprintf(`(document.querySelectorAll('%s .preview-box details').forEach(d => d.open = true), true)`, revised))
	docShot(t, ana, revised, "console-revised")

	const ok = "ticket 8812 checked"
	approve := fmt.Sprintf(`%s[data-proposal=%q]`, c, newID)
	fill(t, ana, approve+" input.approve-reason", ok)
	do(t, ana, "approve the revision", chromedp.Click(chromedp.CSS(approve+" button.approve")))
	until(t, ana, "the server's answer", fmt.Sprintf(`document.querySelector('%s .outcome.ok')?.textContent.startsWith("approved")`, approve))
	waitStatus(t, ctx, s, r.GetRunId(), reinv1.RunStatus_RUN_STATUS_COMPLETED)
	var got []string
	for _, ev := range events(t, ctx, s, r.GetRunId()) {
		switch {
		case ev.GetProposalRevised() != nil:
			got = append(got, fmt.Sprintf("revised by %s: %s", ev.GetActor(), ev.GetProposalRevised().GetReason()))
		case ev.GetApprovalDecided() != nil:
			got = append(got, fmt.Sprintf("approved %v %v: %s", ev.GetApprovalDecided().GetApproved(), ev.GetApprovalDecided().GetProposalId() == newID, ev.GetApprovalDecided().GetReason()))
		case ev.GetWriteCommitted() != nil:
			got = append(got, fmt.Sprintf("committed %v", ev.GetWriteCommitted().GetProposalId() == newID))
		}
	}
	want := []string{"revised by principal:ana: " + why, "approved true true: " + ok, "committed true"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("the run recorded\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// docShot writes the card sel, scrolled into view, as DIR/NAME.png when
// REIN_DOC_SCREENSHOTS=DIR, cut to 1000 pixels high; without it, nothing.
func docShot(t *testing.T, ctx context.Context, sel, name string) {
	t.Helper()
	dir := os.Getenv("REIN_DOC_SCREENSHOTS")
	if dir == "" {
		return
	}
	do(t, ctx, "scroll to "+name, chromedp.ScrollIntoView(chromedp.CSS(sel)))
	shot, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("shoot %s: %v", name, err)
	}
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if r := img.Bounds(); r.Dy() > 1000 {
		img = img.(interface {
			SubImage(image.Rectangle) image.Image
		}).SubImage(image.Rect(r.Min.X, r.Min.Y, r.Max.X, r.Min.Y+1000))
	}
	var out bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: png.BestCompression}).Encode(&out, img); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%v)", path, img.Bounds().Size())
}
