package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
)

// card is what a person deciding on a paused run needs beside its pending
// action, as the console's card shows it (docs/cli.md, rein pending):
// the spend against the budget for every pause, and for a proposal its id,
// the evidence the model acted on and what Approve does. rein pending and
// rein inspect add its fields to the run's summary.
type card struct {
	ProposalID  string     `json:"proposal_id,omitempty"`
	Spend       *cardSpend `json:"spend,omitempty"`
	Evidence    []evidence `json:"evidence,omitempty"`
	ApproveDoes string     `json:"approve_does,omitempty"`
}

// cardSpend is the run's spend, each count beside its limit: the
// contract's budget plus the raises people gave. A limit left out is none.
type cardSpend struct {
	Tokens    spent[uint64]  `json:"tokens"`
	CostUSD   spent[float64] `json:"cost_usd"`
	ToolCalls spent[uint32]  `json:"tool_calls"`
}

// spent is one count of a budget: how much the budget counts as spent
// (the run's own spend, its returned children's and what it lent to those
// still running) and its limit, 0 (left out) when there is none.
type spent[T uint32 | uint64 | float64] struct {
	Used  T `json:"used"`
	Limit T `json:"limit,omitempty"`
}

// evidence is one tool result the run had in its context before the
// proposal: the result as text, cut to evidenceBytes.
type evidence struct {
	Sequence uint64 `json:"sequence"`
	Tool     string `json:"tool"`
	CallID   string `json:"call_id"`
	Result   string `json:"result"`
	Error    string `json:"error,omitempty"`
	// Truncated: the tool's output was cut before the model saw it
	// (max_output_bytes).
	Truncated bool `json:"truncated,omitempty"`
	// Clipped: result holds only the first evidenceBytes of the output;
	// rein events gives it whole.
	Clipped bool `json:"clipped,omitempty"`
}

const (
	// evidenceItems is how many of the latest tool results a card holds.
	evidenceItems = 10
	// evidenceBytes bounds each result's text.
	evidenceBytes = 2000
)

// cardFor is run's card, read with its events evs; nil for a run that
// waits for no one.
func cardFor(run *reinv1.Run, evs []*reinv1.Event) *card {
	p := run.GetPending()
	if p == nil {
		return nil
	}
	st := runstate.FromProto(run, nil)
	lim, used := st.Limits(), st.Committed()
	c := &card{Spend: &cardSpend{
		Tokens:    spent[uint64]{used.Tokens, lim.Tokens},
		CostUSD:   spent[float64]{used.CostUSD, lim.CostUSD},
		ToolCalls: spent[uint32]{used.ToolCalls, lim.ToolCalls},
	}}
	if pr := p.GetProposal(); pr != nil {
		c.ProposalID = pr.GetProposalId()
		c.Evidence = proposalEvidence(evs, pr.GetProposalId())
		c.ApproveDoes = approveDoes(run, pr)
	}
	return c
}

// proposalEvidence is the last evidenceItems tool results recorded before
// the proposal proposalID was asked (or, revised, proposed in its place),
// oldest first.
func proposalEvidence(evs []*reinv1.Event, proposalID string) []evidence {
	at := uint64(0)
	for _, ev := range evs {
		if ev.GetApprovalRequested().GetProposal().GetProposalId() == proposalID ||
			ev.GetProposalRevised().GetProposal().GetProposalId() == proposalID {
			at = ev.GetSequence()
		}
	}
	out := []evidence{}
	for _, ev := range evs {
		if at > 0 && ev.GetSequence() >= at {
			break
		}
		tr := ev.GetToolReturned()
		if tr == nil {
			continue
		}
		text, clipped := resultText(tr)
		out = append(out, evidence{Sequence: ev.GetSequence(), Tool: tr.GetTool(), CallID: tr.GetCallId(),
			Result: text, Error: tr.GetError(), Truncated: tr.GetTruncated(), Clipped: clipped})
	}
	return out[max(len(out)-evidenceItems, 0):]
}

// resultText is a tool's output as compact JSON (a string as itself), cut
// to evidenceBytes on a rune's edge, and whether it was cut.
func resultText(tr *reinv1.ToolReturned) (string, bool) {
	var text string
	if v := tr.GetOutput(); v != nil {
		if s, ok := v.GetKind().(*structpb.Value_StringValue); ok {
			text = s.StringValue
		} else if b, err := protojson.Marshal(v); err == nil {
			// protojson's spacing varies from build to build.
			var compact bytes.Buffer
			if json.Compact(&compact, b) == nil {
				b = compact.Bytes()
			}
			text = string(b)
		}
	}
	if len(text) <= evidenceBytes {
		return text, false
	}
	cut := evidenceBytes
	for cut > 0 && !runeStart(text[cut]) {
		cut--
	}
	return text[:cut], true
}

// runeStart reports whether b begins a UTF-8 sequence.
func runeStart(b byte) bool { return b&0xC0 != 0x80 }

// approveDoes is one sentence of what Approve does to proposal p of run,
// the console's (web/src/format.ts approveDoes) word for word.
func approveDoes(run *reinv1.Run, p *reinv1.Proposal) string {
	needed := runstate.Needed(p)
	given := len(p.GetApprovedBy())
	if needed-given > 1 {
		return fmt.Sprintf("Approve adds your approval (%d of %d); %s runs only once all %d have approved.", given+1, needed, p.GetTool(), needed)
	}
	once := fmt.Sprintf("Approve runs %s with these arguments once, with idempotency key op_%s", p.GetTool(), p.GetProposalId())
	if p.GetTier() == reinv1.ToolTier_TOOL_TIER_READ {
		once = fmt.Sprintf("Approve runs %s as a read with these arguments once; its output goes to the model", p.GetTool())
	}
	return fmt.Sprintf("%s; the run %s then goes on.", once, run.GetRunId())
}

// text is the card's spend on one line: "tokens 320 of 20000, cost
// $0.0000, tool calls 1".
func (s *cardSpend) text() string {
	tokens := fmt.Sprint(s.Tokens.Used)
	if s.Tokens.Limit > 0 {
		tokens += fmt.Sprintf(" of %d", s.Tokens.Limit)
	}
	cost := fmt.Sprintf("$%.4f", s.CostUSD.Used)
	if s.CostUSD.Limit > 0 {
		cost += fmt.Sprintf(" of $%.2f", s.CostUSD.Limit)
	}
	calls := fmt.Sprint(s.ToolCalls.Used)
	if s.ToolCalls.Limit > 0 {
		calls += fmt.Sprintf(" of %d", s.ToolCalls.Limit)
	}
	return fmt.Sprintf("tokens %s, cost %s, tool calls %s", tokens, cost, calls)
}

// writeRows writes the card as rows of a tabwriter, each "prefix" then a
// label and its text: the spend, each piece of evidence (its result cut to
// a line) and what Approve does.
func (c *card) writeRows(w io.Writer, prefix string) {
	if c == nil {
		return
	}
	fmt.Fprintf(w, "%sspend\t%s\n", prefix, c.Spend.text())
	if c.ProposalID == "" {
		return
	}
	if len(c.Evidence) == 0 {
		fmt.Fprintf(w, "%sevidence\tnone: no tool result came before the proposal\n", prefix)
	}
	for _, ev := range c.Evidence {
		what := clip(firstLine(ev.Result), 100)
		if ev.Error != "" {
			what = "error: " + clip(firstLine(ev.Error), 100)
		}
		fmt.Fprintf(w, "%sevidence\t#%d %s (%s): %s\n", prefix, ev.Sequence, ev.Tool, ev.CallID, what)
	}
	fmt.Fprintf(w, "%sapprove\t%s\n", prefix, c.ApproveDoes)
}
