package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// Teams renders a delivery of a subscription of format teams: a Microsoft
// Teams message (what a Teams workflow's "when a webhook request is
// received" trigger, or an incoming webhook, posts to a channel) holding
// one Adaptive Card. For a run paused for approval the card shows what a
// person must decide (the tool, its arguments, the preview, the policy's
// message, the expiry and the proposal's hash) and, when the server has a
// --public-url, a button that opens the run in the console, where the
// decision is made and bound to that hash; for any other delivery, a
// notice of what became of the run. Teams cannot post a click back to rein
// without a bot of its own, so the card decides nothing itself (a chat
// tool that can, as Slack does, calls DecideApproval with the hash; see
// docs/webhooks.md). A body that is not a delivery's is refused.
func Teams(d *reinv1.WebhookDelivery) (body []byte, contentType string, err error) {
	var p Payload
	if err := json.Unmarshal(d.GetBody(), &p); err != nil {
		return nil, "", fmt.Errorf("teams: delivery %s: its body is not a webhook payload: %w", d.GetId(), err)
	}
	if p.Type == "" {
		return nil, "", fmt.Errorf("teams: delivery %s: its body has no type", d.GetId())
	}
	card := map[string]any{
		"$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
		"type":    "AdaptiveCard",
		"version": "1.4",
		"body":    teamsBody(p),
	}
	if url := p.Data.ConsoleURL; url != "" {
		title := "Open the run in rein"
		if teamsAsks(p) {
			title = "Review and decide in rein"
		}
		card["actions"] = []any{map[string]any{"type": "Action.OpenUrl", "title": title, "url": url}}
	}
	msg := map[string]any{
		"type": "message",
		"attachments": []any{map[string]any{
			"contentType": "application/vnd.microsoft.card.adaptive",
			"content":     card,
		}},
	}
	body, err = json.Marshal(msg)
	if err != nil {
		return nil, "", fmt.Errorf("teams: delivery %s: %w", d.GetId(), err)
	}
	return body, "application/json", nil
}

// teamsAsks says whether p is a run waiting on an approval.
func teamsAsks(p Payload) bool {
	return p.Data.Approval != nil && p.Data.Status == StatusName(reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL)
}

// teamsBody is the card's body: a heading, then the facts of the run and,
// for an approval, of what it waits on.
func teamsBody(p Payload) []any {
	d := p.Data
	heading := func(s string) map[string]any {
		return map[string]any{"type": "TextBlock", "text": s, "weight": "Bolder", "size": "Medium", "wrap": true}
	}
	text := func(s string) map[string]any {
		return map[string]any{"type": "TextBlock", "text": s, "wrap": true}
	}
	if p.Type == "webhook.test" {
		return []any{heading("A test delivery from rein"), text("This webhook reaches the channel.")}
	}
	var out []any
	facts := [][2]string{{"Run", d.RunID}, {"Tenant", d.Tenant}}
	switch {
	case teamsAsks(p):
		a := d.Approval
		out = append(out, heading(fmt.Sprintf("Run %s asks to run %s", d.RunID, a.Tool)))
		if a.Message != "" {
			out = append(out, text(a.Message))
		}
		if d.StartedBy != "" {
			facts = append(facts, [2]string{"Started by", d.StartedBy})
		}
		for _, name := range slices.Sorted(maps.Keys(a.Arguments)) {
			facts = append(facts, [2]string{name, teamsJSON(a.Arguments[name])})
		}
		if a.Approvals > 1 {
			facts = append(facts, [2]string{"Approvals", fmt.Sprintf("%d of %d (%s)", len(a.ApprovedBy), a.Approvals, strings.Join(a.ApprovedBy, ", "))})
		}
		if a.ExpiresAt != nil {
			facts = append(facts, [2]string{"Expires", a.ExpiresAt.UTC().Format(time.RFC3339)})
		}
		facts = append(facts, [2]string{"Proposal", a.ProposalID}, [2]string{"Hash", a.Hash})
	case strings.HasPrefix(p.Type, "event."):
		out = append(out, heading(fmt.Sprintf("Run %s: %s", d.RunID, d.EventKind)))
		facts = append(facts, [2]string{"Status", d.Status}, [2]string{"Event", fmt.Sprint(d.Sequence)})
	default:
		out = append(out, heading(fmt.Sprintf("Run %s is %s", d.RunID, d.Status)))
		if d.PreviousStatus != "" {
			facts = append(facts, [2]string{"Was", d.PreviousStatus})
		}
		if d.Reason != "" {
			facts = append(facts, [2]string{"Why", d.Reason})
		}
		if d.Question != "" {
			facts = append(facts, [2]string{"Asks", d.Question})
		}
		if d.Budget != "" {
			facts = append(facts, [2]string{"Budget reached", d.Budget})
		}
	}
	if d.EndsAt != nil {
		facts = append(facts, [2]string{"Pause ends", d.EndsAt.UTC().Format(time.RFC3339)})
	}
	set := make([]any, len(facts))
	for i, f := range facts {
		set[i] = map[string]any{"title": f[0], "value": f[1]}
	}
	out = append(out, map[string]any{"type": "FactSet", "facts": set})
	if a := d.Approval; a != nil && teamsAsks(p) && len(a.Preview) > 0 {
		out = append(out, text("Preview"), map[string]any{"type": "TextBlock", "text": teamsJSON(a.Preview), "wrap": true, "fontType": "Monospace"})
	}
	if d.ConsoleURL == "" && teamsAsks(p) {
		out = append(out, text(fmt.Sprintf("Decide with: rein approve %s --hash %s (or rein deny); the server has no --public-url for a link.", d.RunID, d.Approval.Hash)))
	}
	return out
}

// teamsJSON is raw as a person reads it: a string as it is, anything else
// as indented JSON.
func teamsJSON(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var out bytes.Buffer
	if json.Indent(&out, raw, "", "  ") != nil {
		return string(raw)
	}
	return out.String()
}
