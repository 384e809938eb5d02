package slackapp

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"
)

// Pause is what a Slack message shows of a run paused for approval. The
// caller fills it (from a webhook's payload, or a run: PauseOf) with secrets
// already redacted; Render bounds every part to Slack's limits.
type Pause struct {
	RunID  string
	Tenant string
	// ProposalID and ProposalHash name the proposal as shown: a click
	// decides that proposal, and is refused when it changed since.
	ProposalID   string
	ProposalHash string
	// Tool is the write the run asks to make.
	Tool string
	// Arguments are the tool's arguments, in the order shown.
	Arguments []Argument
	// Preview is the tool's preview of the write, as text.
	Preview string
	// ExpiresAt is when the proposal expires; zero when it does not.
	ExpiresAt time.Time
	// Question is what the person is asked (a policy's message, say);
	// empty shows none.
	Question string
	// AskedBy is the principal that started the run.
	AskedBy string
	// Approvals is how many distinct people must approve (0 or 1: one);
	// ApprovedBy those who did so far.
	Approvals  int
	ApprovedBy []string
	// ConsoleURL links to the run in rein's console; empty shows no link.
	ConsoleURL string
}

// Argument is one argument of the proposed call, its value as text.
type Argument struct {
	Name, Value string
}

// ArgumentsOf is args in the order of their names, each value as text: a
// string as it is, anything else as JSON.
func ArgumentsOf(args map[string]any) []Argument {
	out := make([]Argument, 0, len(args))
	for name, v := range args {
		text, ok := v.(string)
		if !ok {
			data, err := json.Marshal(v)
			if err != nil {
				text = fmt.Sprint(v)
			} else {
				text = string(data)
			}
		}
		out = append(out, Argument{Name: name, Value: text})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Slack's limits on a message (api.slack.com/reference/block-kit), and
// rein's own bounds within them.
const (
	maxBlocks        = 50
	maxHeaderChars   = 150
	maxSectionChars  = 3000
	maxFieldChars    = 2000
	maxFieldsSection = 10
	// maxArguments is how many arguments a message shows as fields; the
	// rest are counted, and the console shows them.
	maxArguments = 20
	// maxPreviewChars bounds the preview's text, which the console shows
	// whole.
	maxPreviewChars = 2500
	// maxFallbackChars bounds the message's text, shown in notifications.
	maxFallbackChars = 300
	maxButtonValue   = 2000
)

// The action IDs of the buttons, and the block that holds them.
const (
	ActionApprove = "rein_approve"
	ActionDeny    = "rein_deny"
	actionsBlock  = "rein_decision"
	outcomeBlock  = "rein_outcome"
)

// buttonValue is what a button carries back to the handler: the proposal
// as the message showed it.
type buttonValue struct {
	RunID      string `json:"run"`
	Tenant     string `json:"tenant"`
	ProposalID string `json:"proposal"`
	Hash       string `json:"hash"`
}

// message is a Slack message: the body of an incoming webhook, of
// chat.postMessage (with a channel added), or of a post to a response_url.
type message struct {
	ResponseType    string            `json:"response_type,omitempty"`
	ReplaceOriginal *bool             `json:"replace_original,omitempty"`
	Text            string            `json:"text"`
	Blocks          []json.RawMessage `json:"blocks,omitempty"`
}

// block is one Block Kit block, as JSON.
type block = map[string]any

func mrkdwn(text string) block    { return block{"type": "mrkdwn", "text": text} }
func plainText(text string) block { return block{"type": "plain_text", "text": text, "emoji": false} }

// Render is the Slack message of p: a header, who asked, the question, the
// tool and its arguments as fields, the preview, the expiry, a link to the
// console, and Approve and Deny buttons that carry the proposal's run,
// tenant, ID and hash.
func Render(p Pause) ([]byte, error) {
	blocks, err := pauseBlocks(p)
	if err != nil {
		return nil, err
	}
	actions, err := actionBlock(p)
	if err != nil {
		return nil, err
	}
	return marshal(message{Text: fallback(p)}, append(blocks, actions))
}

// RenderOutcome is p's message updated with o, to replace the message
// Render made (replace_original) where p is at hand: o in place of the
// buttons, or above them while the proposal waits for another approver.
// (The action handler updates the message Slack sends back with the
// click, keeping what it showed.)
func RenderOutcome(p Pause, o Outcome) ([]byte, error) {
	blocks, err := pauseBlocks(p)
	if err != nil {
		return nil, err
	}
	blocks = append(blocks, o.block())
	if o.Kind == Waiting {
		actions, err := actionBlock(p)
		if err != nil {
			return nil, err
		}
		blocks = append(blocks, actions)
	}
	replace := true
	return marshal(message{ReplaceOriginal: &replace, Text: fallback(p) + ": " + o.text()}, blocks)
}

// actionBlock is the Approve and Deny buttons of p.
func actionBlock(p Pause) (block, error) {
	value, err := json.Marshal(buttonValue{RunID: p.RunID, Tenant: p.Tenant, ProposalID: p.ProposalID, Hash: p.ProposalHash})
	if err != nil {
		return nil, err
	}
	if len(value) > maxButtonValue {
		return nil, fmt.Errorf("slackapp: the button's value is %d bytes, over Slack's %d: the run or proposal ID is too long", len(value), maxButtonValue)
	}
	return block{"type": "actions", "block_id": actionsBlock, "elements": []block{
		{"type": "button", "action_id": ActionApprove, "style": "primary", "text": plainText("Approve"), "value": string(value)},
		{"type": "button", "action_id": ActionDeny, "style": "danger", "text": plainText("Deny"), "value": string(value)},
	}}, nil
}

// OutcomeKind is what became of a proposal a message showed.
type OutcomeKind int

// The outcomes.
const (
	// Approved: the last approval it needed was given.
	Approved OutcomeKind = iota + 1
	// Denied: it was rejected.
	Denied
	// Waiting: approved by some, it waits for another approver.
	Waiting
	// Gone: the message no longer shows the pending proposal (it was
	// revised, decided elsewhere, or expired).
	Gone
)

// Outcome is what became of a proposal, shown on its message.
type Outcome struct {
	Kind OutcomeKind
	// By is the principal who decided (Approved, Denied, Waiting).
	By string
	// At is when; zero shows none.
	At time.Time
	// Note says more: who else must approve, or why the message is gone.
	Note string
}

func (o Outcome) text() string {
	var s string
	switch o.Kind {
	case Approved:
		s = "Approved by " + o.By
	case Denied:
		s = "Denied by " + o.By
	case Waiting:
		s = "Approved by " + o.By
	case Gone:
		s = "No longer pending"
	}
	if o.Note != "" {
		s += ". " + o.Note
	}
	return s
}

// block is o as the context block that takes the buttons' place.
func (o Outcome) block() block {
	icon := map[OutcomeKind]string{Approved: ":white_check_mark:", Denied: ":no_entry:", Waiting: ":hourglass_flowing_sand:", Gone: ":warning:"}[o.Kind]
	text := icon + " " + escape(o.text())
	if !o.At.IsZero() {
		text += " (" + slackDate(o.At) + ")"
	}
	return block{"type": "context", "block_id": outcomeBlock, "elements": []block{mrkdwn(cut(text, maxFieldChars))}}
}

func pauseBlocks(p Pause) ([]block, error) {
	if p.RunID == "" || p.ProposalID == "" || p.ProposalHash == "" || p.Tool == "" {
		return nil, fmt.Errorf("slackapp: a pause needs its run ID, proposal ID, proposal hash and tool (have %q, %q, %q, %q)", p.RunID, p.ProposalID, p.ProposalHash, p.Tool)
	}
	blocks := []block{
		{"type": "header", "text": plainText(cut("Approval needed: "+p.Tool, maxHeaderChars))},
	}
	who := "A run"
	if p.AskedBy != "" {
		who = "*" + escape(p.AskedBy) + "*'s run"
	}
	intro := fmt.Sprintf("%s `%s` (tenant %s) asks to call *%s*.", who, escape(p.RunID), escape(p.Tenant), escape(p.Tool))
	if p.Approvals > 1 {
		intro += fmt.Sprintf(" It needs %d approvers, not counting the run's starter.", p.Approvals)
	}
	blocks = append(blocks, block{"type": "section", "text": mrkdwn(cut(intro, maxSectionChars))})
	if q := strings.TrimSpace(p.Question); q != "" {
		blocks = append(blocks, block{"type": "section", "text": mrkdwn(cut(escape(q), maxSectionChars))})
	}
	args := p.Arguments
	if len(args) > maxArguments {
		args = args[:maxArguments]
	}
	for len(args) > 0 {
		n := min(len(args), maxFieldsSection)
		fields := make([]block, 0, n)
		for _, a := range args[:n] {
			name := "*" + escape(cut(a.Name, 100)) + "*\n"
			fields = append(fields, mrkdwn(name+cut(escape(a.Value), maxFieldChars-len(name))))
		}
		blocks = append(blocks, block{"type": "section", "fields": fields})
		args = args[n:]
	}
	if more := len(p.Arguments) - maxArguments; more > 0 {
		blocks = append(blocks, block{"type": "context", "elements": []block{mrkdwn(fmt.Sprintf("and %d more arguments, shown in the console", more))}})
	}
	if pv := strings.TrimSpace(p.Preview); pv != "" {
		text := escape(pv)
		if len(text) > maxPreviewChars {
			text = cut(text, maxPreviewChars) + "\n(preview truncated: the console shows it whole)"
		}
		blocks = append(blocks, block{"type": "section", "text": mrkdwn("*Preview*\n```" + text + "```")})
	}
	var ctx []string
	if !p.ExpiresAt.IsZero() {
		ctx = append(ctx, "Expires "+slackDate(p.ExpiresAt))
	}
	if len(p.ApprovedBy) > 0 {
		ctx = append(ctx, "approved so far by "+escape(strings.Join(p.ApprovedBy, ", ")))
	}
	ctx = append(ctx, fmt.Sprintf("proposal `%s`, hash `%s`", escape(p.ProposalID), escape(short(p.ProposalHash))))
	if u := p.ConsoleURL; u != "" && !strings.ContainsAny(u, "<>| \n") {
		ctx = append(ctx, "<"+u+"|open in the console>")
	}
	blocks = append(blocks, block{"type": "context", "elements": []block{mrkdwn(cut(strings.Join(ctx, " · "), maxFieldChars))}})
	return blocks, nil
}

// marshal is m with blocks, as JSON.
func marshal(m message, blocks []block) ([]byte, error) {
	if len(blocks) > maxBlocks {
		return nil, fmt.Errorf("slackapp: %d blocks, over Slack's %d", len(blocks), maxBlocks)
	}
	for _, b := range blocks {
		data, err := json.Marshal(b)
		if err != nil {
			return nil, err
		}
		m.Blocks = append(m.Blocks, data)
	}
	return json.Marshal(m)
}

// fallback is a message's text: what a notification shows.
func fallback(p Pause) string {
	return cut(fmt.Sprintf("Approval needed: %s on run %s (tenant %s)", p.Tool, p.RunID, p.Tenant), maxFallbackChars)
}

// slackDate is t in Slack's date formatting, which each reader sees in
// their own time zone, with UTC as the fallback.
func slackDate(t time.Time) string {
	return fmt.Sprintf("<!date^%d^{date_short_pretty} at {time}|%s>", t.Unix(), t.UTC().Format(time.RFC3339))
}

// short is a hash's first 12 characters, which the message shows.
func short(hash string) string {
	if len(hash) > 12 {
		return hash[:12]
	}
	return hash
}

// escape makes s text in Slack's mrkdwn: &, < and > are escaped, so that no
// value (a model's argument, say) can mention @channel, a user or link
// anywhere.
func escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// cut is s in at most max bytes (Slack counts characters; a byte is never
// fewer), ending with "…" when it was cut. It never splits a character or
// an escape that escape made.
func cut(s string, max int) string {
	if len(s) <= max {
		return s
	}
	const ellipsis = "…"
	end := max - len(ellipsis)
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	if amp := strings.LastIndexByte(s[:end], '&'); amp >= 0 && !strings.Contains(s[amp:end], ";") {
		end = amp
	}
	return s[:end] + ellipsis
}
