package main

import (
	"io"
	"strings"
	"unicode"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// outputPrefix starts each line of a model call's text under the events.
const outputPrefix = "  ┊ "

// outputPrinter prints the text of a run's model calls in flight as the
// server sends it, between the call's model_requested and model_returned
// lines: each line of it after outputPrefix, with a note when the text
// starts over (a retry, a call sent again after a crash or the deadline
// cut it, or a reconnection that sends the call from its start).
type outputPrinter struct {
	w io.Writer
	// open says a line of text is being written; shown says some text of
	// the call was printed, which one (requested, attempt), and told that
	// its truncation was.
	open      bool
	shown     bool
	requested uint64
	attempt   uint32
	told      bool
}

func (p *outputPrinter) print(o *reinv1.ModelOutput) error {
	var b strings.Builder
	same := p.shown && o.GetRequested() == p.requested && o.GetAttempt() == p.attempt
	if o.GetOffset() == 0 {
		if p.open {
			b.WriteString("\n")
			p.open = false
		}
		p.told = false
		if !same {
			p.shown = false
		}
		p.requested, p.attempt = o.GetRequested(), o.GetAttempt()
	}
	if text := printable(o.GetText()); text != "" {
		if !p.open {
			b.WriteString(outputPrefix)
			switch {
			case o.GetOffset() == 0 && same:
				b.WriteString("(again from the start) ")
			case o.GetOffset() == 0 && o.GetResumed():
				b.WriteString("(sent again: the call before it was cut) ")
			case o.GetOffset() == 0 && o.GetAttempt() > 1:
				b.WriteString("(retry) ")
			}
			p.open, p.shown = true, true
		}
		b.WriteString(strings.ReplaceAll(text, "\n", "\n"+outputPrefix))
	}
	if o.GetTruncated() && !p.told && p.open {
		b.WriteString(" … (the rest is not shown)")
		p.told = true
	}
	if o.GetDone() && p.open {
		b.WriteString("\n")
		p.open = false
	}
	_, err := io.WriteString(p.w, b.String())
	return err
}

// end ends a line of text left open before an event line is printed.
func (p *outputPrinter) end() error {
	if !p.open {
		return nil
	}
	p.open = false
	_, err := io.WriteString(p.w, "\n")
	return err
}

// printable is a model's text made safe for a terminal: control
// characters other than newline and tab (escape sequences that would move
// the cursor or recolour the screen, carriage returns that would overwrite
// a line) become U+FFFD.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r != '\n' && r != '\t' && unicode.IsControl(r) {
			return unicode.ReplacementChar
		}
		return r
	}, s)
}

// outputJSON is a ModelOutput as an NDJSON line of rein watch --json: the
// message's fields, with "type": "model_output" (no sequence: it is not an
// event).
func outputJSON(o *reinv1.ModelOutput) map[string]any {
	m, _ := protoJSON(o).(map[string]any)
	if m == nil {
		m = map[string]any{}
	}
	m["type"] = "model_output"
	return m
}
