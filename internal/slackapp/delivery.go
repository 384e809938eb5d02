package slackapp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/webhook"
)

// Delivery is a webhook delivery as a Slack message, the body a
// subscription of format slack sends (webhook.Config.Slack): for a run
// paused for approval (its pause, or an event while it waits, such as a
// revision of the proposal), Render's message, its buttons carrying the
// proposal's hash from the delivery's body; for any other delivery (a
// status change, an event, rein webhook test), a notice with no buttons,
// since there is nothing to decide from chat. A body that is not a
// delivery's, or an approval without what binds a click to it (its
// proposal's ID and hash, its tool), is refused: no message is better than
// buttons that decide nothing.
func Delivery(d *reinv1.WebhookDelivery) (body []byte, contentType string, err error) {
	var p webhook.Payload
	if err := json.Unmarshal(d.GetBody(), &p); err != nil {
		return nil, "", fmt.Errorf("slackapp: delivery %s: its body is not a webhook payload: %w", d.GetId(), err)
	}
	if p.Type == "" {
		return nil, "", fmt.Errorf("slackapp: delivery %s: its body has no type", d.GetId())
	}
	if a := p.Data.Approval; a != nil && p.Data.Status == webhook.StatusName(reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL) {
		body, err = Render(pauseOfPayload(p.Data))
		if err != nil {
			return nil, "", fmt.Errorf("delivery %s: %w", d.GetId(), err)
		}
		return body, "application/json", nil
	}
	body, err = marshal(message{Text: noticeText(p)}, noticeBlocks(p))
	if err != nil {
		return nil, "", fmt.Errorf("delivery %s: %w", d.GetId(), err)
	}
	return body, "application/json", nil
}

// pauseOfPayload is the Pause a delivery's data shows: the approval as
// the body holds it, already bounded and redacted.
func pauseOfPayload(d webhook.Data) Pause {
	a := d.Approval
	p := Pause{
		RunID: d.RunID, Tenant: d.Tenant, ProposalID: a.ProposalID, ProposalHash: a.Hash, Tool: a.Tool,
		Question: a.Message, AskedBy: d.StartedBy, Approvals: int(a.Approvals), ApprovedBy: a.ApprovedBy,
		ConsoleURL: d.ConsoleURL, Preview: jsonText(a.Preview),
	}
	if a.ExpiresAt != nil {
		p.ExpiresAt = *a.ExpiresAt
	}
	for name, raw := range a.Arguments {
		p.Arguments = append(p.Arguments, Argument{Name: name, Value: jsonText(raw)})
	}
	sort.Slice(p.Arguments, func(i, j int) bool { return p.Arguments[i].Name < p.Arguments[j].Name })
	return p
}

// jsonText is raw as a person reads it: a string as it is (a value the
// body cut is one), anything else as indented JSON.
func jsonText(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
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

// noticeText is a notice's text, which notifications show.
func noticeText(p webhook.Payload) string {
	d := p.Data
	switch {
	case p.Type == "webhook.test":
		return cut("rein: a test of this webhook", maxFallbackChars)
	case strings.HasPrefix(p.Type, "event."):
		return cut(fmt.Sprintf("Run %s (tenant %s): %s", d.RunID, d.Tenant, d.EventKind), maxFallbackChars)
	default:
		return cut(fmt.Sprintf("Run %s (tenant %s) is %s", d.RunID, d.Tenant, d.Status), maxFallbackChars)
	}
}

// noticeBlocks is a delivery that asks no decision: what became of the
// run, why, what a pause for input or budget waits on, and a link to the
// run in the console, where a person acts on it.
func noticeBlocks(p webhook.Payload) []block {
	d := p.Data
	if p.Type == "webhook.test" {
		return []block{{"type": "section", "text": mrkdwn("A test delivery from rein: this webhook reaches the channel.")}}
	}
	var intro string
	if strings.HasPrefix(p.Type, "event.") {
		intro = fmt.Sprintf("Run `%s` (tenant %s): *%s*, event %d. It is %s.", escape(d.RunID), escape(d.Tenant), escape(d.EventKind), d.Sequence, escape(d.Status))
	} else {
		intro = fmt.Sprintf("Run `%s` (tenant %s) is now *%s*", escape(d.RunID), escape(d.Tenant), escape(d.Status))
		if d.PreviousStatus != "" {
			intro += fmt.Sprintf(", was %s", escape(d.PreviousStatus))
		}
		intro += "."
	}
	if d.StartedBy != "" {
		intro += fmt.Sprintf(" Started by *%s*.", escape(d.StartedBy))
	}
	blocks := []block{{"type": "section", "text": mrkdwn(cut(intro, maxSectionChars))}}
	for _, part := range []struct{ label, text string }{
		{"Reason", d.Reason}, {"Question", d.Question}, {"Budget reached", d.Budget},
	} {
		if t := strings.TrimSpace(part.text); t != "" {
			blocks = append(blocks, block{"type": "section", "text": mrkdwn(cut("*"+part.label+"*\n"+escape(t), maxSectionChars))})
		}
	}
	var ctx []string
	if d.EndsAt != nil {
		ctx = append(ctx, "Ends "+slackDate(*d.EndsAt))
	}
	if u := d.ConsoleURL; u != "" && !strings.ContainsAny(u, "<>| \n") {
		ctx = append(ctx, "<"+u+"|open in the console>")
	}
	if len(ctx) > 0 {
		blocks = append(blocks, block{"type": "context", "elements": []block{mrkdwn(cut(strings.Join(ctx, " · "), maxFieldChars))}})
	}
	return blocks
}
