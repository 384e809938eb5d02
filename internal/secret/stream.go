package secret

import (
	"strings"
	"unicode/utf8"
)

// Stream redacts text that arrives in pieces (a model's output as it is
// written) before passing it on: a secret's value cut across two pieces is
// still found, because the Stream holds back the end of what it was given,
// as long as the longest value less one byte, until more arrives or it is
// flushed. What it passes on, joined, is Redact of what it was given,
// joined.
type Stream struct {
	r    *Redactor
	out  func(string)
	held string
}

// Stream returns a Stream that passes redacted text to out. With a nil
// Redactor it passes each piece on as it is.
func (r *Redactor) Stream(out func(string)) *Stream {
	return &Stream{r: r, out: out}
}

// Write takes the next piece.
func (s *Stream) Write(text string) {
	if s.r == nil {
		s.out(text)
		return
	}
	s.held += text
	cut := len(s.held) - (len(s.r.values[0]) - 1) // values are longest first
	if cut <= 0 {
		return
	}
	cut = s.r.before(s.held, cut)
	for cut > 0 && !utf8.RuneStart(s.held[cut]) {
		cut-- // a character is passed on whole
	}
	if cut == 0 {
		return
	}
	s.out(s.r.Redact(s.held[:cut]))
	s.held = s.held[cut:]
}

// Flush passes on what is held: the text has ended whole. A text cut
// short (the call failed) is not flushed: what is held may be the start
// of a secret's value.
func (s *Stream) Flush() {
	if s.held != "" {
		s.out(s.r.Redact(s.held))
		s.held = ""
	}
}

// before is the greatest cut, at most cut, that no value found in s
// straddles: the text before it can be redacted on its own.
func (r *Redactor) before(s string, cut int) int {
	for moved := true; moved; {
		moved = false
		for _, v := range r.values {
			from := max(0, cut-len(v)+1)
			if i := strings.Index(s[from:], v); i >= 0 && from+i < cut {
				cut, moved = from+i, true
			}
		}
	}
	return cut
}
