package slackapp_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/reinhq/rein/internal/slackapp"
)

// renderedBlock is what the tests read of a Block Kit block.
type renderedBlock struct {
	Type    string `json:"type"`
	BlockID string `json:"block_id"`
	Text    *struct {
		Type, Text string
	} `json:"text"`
	Fields []struct {
		Type, Text string
	} `json:"fields"`
	Elements []struct {
		Type     string `json:"type"`
		Text     any    `json:"text"`
		ActionID string `json:"action_id"`
		Value    string `json:"value"`
	} `json:"elements"`
}

// texts is every text of b, as Slack reads it.
func (b renderedBlock) texts() string {
	var out []string
	if b.Text != nil {
		out = append(out, b.Text.Text)
	}
	for _, f := range b.Fields {
		out = append(out, f.Text)
	}
	for _, e := range b.Elements {
		switch x := e.Text.(type) {
		case string:
			out = append(out, x)
		case map[string]any:
			out = append(out, fmt.Sprint(x["text"]))
		}
	}
	return strings.Join(out, "\n")
}

func render(t *testing.T, p slackapp.Pause) (slackMessage, []renderedBlock) {
	t.Helper()
	body, err := slackapp.Render(p)
	if err != nil {
		t.Fatal(err)
	}
	var m slackMessage
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	var blocks []renderedBlock
	for _, raw := range m.Blocks {
		var b renderedBlock
		if err := json.Unmarshal(raw, &b); err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, b)
	}
	return m, blocks
}

func pause() slackapp.Pause {
	return slackapp.Pause{
		RunID: "run_01", Tenant: "acme", ProposalID: "prop_01", ProposalHash: strings.Repeat("ab", 32),
		Tool: "refunds.create", Arguments: slackapp.ArgumentsOf(map[string]any{"invoice_id": "INV-42", "amount": "1200.00", "lines": []any{1, 2}}),
		Preview: `{"refund": {"amount": "1200.00"}}`, ExpiresAt: time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC),
		Question: "A refund above 1,000 EUR needs a person.", AskedBy: "bob", ConsoleURL: "https://rein.example/console/runs/run_01",
	}
}

// TestRender: the message shows the tool, who asked, the question, each
// argument as a field, the preview, the expiry in Slack's date format and
// the console link, and its buttons carry the proposal as shown.
func TestRender(t *testing.T) {
	m, blocks := render(t, pause())
	var all strings.Builder
	for _, b := range blocks {
		all.WriteString(b.texts())
	}
	for _, want := range []string{
		"Approval needed: refunds.create", "*bob*", "A refund above 1,000 EUR needs a person.",
		"*amount*\n1200.00", "*invoice_id*\nINV-42", "*lines*\n[1,2]", "1200.00", "<!date^1796644800^{date_short_pretty} at {time}|2026-12-07T12:00:00Z>",
		"<https://rein.example/console/runs/run_01|open in the console>",
	} {
		if !strings.Contains(all.String(), want) {
			t.Errorf("the message does not show %q:\n%s", want, all.String())
		}
	}
	if !strings.Contains(m.Text, "refunds.create") {
		t.Errorf("the fallback text %q does not name the tool", m.Text)
	}
	last := blocks[len(blocks)-1]
	if last.Type != "actions" || len(last.Elements) != 2 || last.Elements[0].ActionID != slackapp.ActionApprove || last.Elements[1].ActionID != slackapp.ActionDeny {
		t.Fatalf("the last block is %+v, want the Approve and Deny buttons", last)
	}
	var v map[string]string
	if err := json.Unmarshal([]byte(last.Elements[0].Value), &v); err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"run": "run_01", "tenant": "acme", "proposal": "prop_01", "hash": strings.Repeat("ab", 32)}; fmt.Sprint(v) != fmt.Sprint(want) {
		t.Errorf("the button carries %v, want %v", v, want)
	}
	// The failure twin: a pause without its hash cannot be rendered, as
	// its buttons could not bind a decision to it.
	p := pause()
	p.ProposalHash = ""
	if _, err := slackapp.Render(p); err == nil {
		t.Error("a pause without its proposal hash rendered")
	}
}

// TestRenderBoundsAndEscapes: whatever the sizes, the message keeps to
// Slack's limits (50 blocks, 10 fields a section, 2000 characters a field,
// 3000 a section, 150 a header), says what it left out, and no value can
// mention anyone or link anywhere.
func TestRenderBoundsAndEscapes(t *testing.T) {
	p := pause()
	args := map[string]any{}
	for i := range 45 {
		args[fmt.Sprintf("arg%02d", i)] = strings.Repeat("é<!channel>&", 400)
	}
	p.Arguments = slackapp.ArgumentsOf(args)
	p.Tool = strings.Repeat("t", 300)
	p.Preview = strings.Repeat("<@U123> ", 2000)
	p.Question = strings.Repeat("<!here> ", 1000)
	_, blocks := render(t, p)
	if len(blocks) > 50 {
		t.Errorf("%d blocks, over 50", len(blocks))
	}
	var all strings.Builder
	for _, b := range blocks {
		if b.Type == "header" && utf8.RuneCountInString(b.Text.Text) > 150 {
			t.Errorf("a header of %d characters", utf8.RuneCountInString(b.Text.Text))
		}
		if b.Type == "section" && b.Text != nil && len(b.Text.Text) > 3000 {
			t.Errorf("a section of %d bytes", len(b.Text.Text))
		}
		if len(b.Fields) > 10 {
			t.Errorf("a section of %d fields", len(b.Fields))
		}
		for _, f := range b.Fields {
			if len(f.Text) > 2000 || !utf8.ValidString(f.Text) {
				t.Errorf("a field of %d bytes (valid UTF-8: %v)", len(f.Text), utf8.ValidString(f.Text))
			}
		}
		all.WriteString(b.texts())
	}
	text := all.String()
	for _, bad := range []string{"<!channel>", "<!here>", "<@U123>"} {
		if strings.Contains(text, bad) {
			t.Errorf("the message holds %q unescaped", bad)
		}
	}
	for _, want := range []string{"and 25 more arguments", "preview truncated", "&lt;!channel&gt;"} {
		if !strings.Contains(text, want) {
			t.Errorf("the message does not say %q", want)
		}
	}
}

// TestRenderOutcome: an outcome takes the buttons' place, except while
// the proposal waits for another approver.
func TestRenderOutcome(t *testing.T) {
	for _, tc := range []struct {
		o       slackapp.Outcome
		want    string
		buttons bool
	}{
		{slackapp.Outcome{Kind: slackapp.Approved, By: "alice"}, "Approved by alice", false},
		{slackapp.Outcome{Kind: slackapp.Denied, By: "alice"}, "Denied by alice", false},
		{slackapp.Outcome{Kind: slackapp.Waiting, By: "alice", Note: "1 of 2 approvals given"}, "Approved by alice. 1 of 2 approvals given", true},
	} {
		body, err := slackapp.RenderOutcome(pause(), tc.o)
		if err != nil {
			t.Fatal(err)
		}
		var m slackMessage
		if err := json.Unmarshal(body, &m); err != nil {
			t.Fatal(err)
		}
		if !replaces(m) || !strings.Contains(outcome(t, m), tc.want) || (buttonValue(t, m.Blocks) != "") != tc.buttons {
			t.Errorf("outcome %+v: replace %v, outcome %q, buttons %v; want %q, buttons %v", tc.o, replaces(m), outcome(t, m), buttonValue(t, m.Blocks) != "", tc.want, tc.buttons)
		}
	}
}
