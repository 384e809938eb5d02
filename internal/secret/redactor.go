// Package secret redacts the server's secrets: the values it was given to
// send elsewhere (the --secrets file, the model providers' keys in its
// environment), which no event, log line, export, span or printed line may
// hold. A provider that refuses a key may echo it in its error ("Incorrect
// API key provided: Bearer sk-…"), a tool may read a file that holds one:
// every such text is passed through one Redactor before rein records it, and
// each occurrence of a value becomes a marker that names the secret,
// "[secret NAME]", so that the reader still learns which key was refused.
//
// A Redactor matches values byte for byte: a value the outside text has cut,
// masked ("sk-…wxyz") or encoded (JSON-escaped, URL-encoded) is not found.
// Values shorter than MinLen are not redacted at all, so that a short or
// empty value cannot turn ordinary words into markers.
//
// So a text is redacted whole, before anything cuts it: a cut through a
// value leaves a piece that no Redactor finds. What rein cuts itself out of
// a larger text (a slice of a file, a line of it) is cut with Find and
// Spans.Slice, which replace every piece of a value the cut leaves, and
// find values whatever the case of their ASCII letters.
package secret

import (
	"cmp"
	"slices"
	"strings"
)

// MinLen is the shortest value a Redactor redacts, in bytes. A shorter
// value (an empty one, "true", a port number) would match ordinary text
// everywhere; no API key or token is that short.
const MinLen = 8

// Redactor replaces the values of a server's secrets in text. It is built
// once and safe for concurrent use; a nil *Redactor redacts nothing.
type Redactor struct {
	// values are the redacted values, longest first; folded holds them
	// with ASCII letters in lower case, and labels the names of each, as
	// the Marker writes them.
	values, folded, labels []string
	replacer               *strings.Replacer
}

// New is the Redactor of the secrets in sets, each a map from a secret's
// name to its value. A name may be in several sets with different values
// (a --secrets file's key, and the environment's under the same name):
// each value is redacted. Values shorter than MinLen are skipped. New
// returns nil, which redacts nothing, when no value is left.
func New(sets ...map[string]string) *Redactor {
	names := map[string][]string{}
	for _, set := range sets {
		for name, v := range set {
			if len(v) >= MinLen && !slices.Contains(names[v], name) {
				names[v] = append(names[v], name)
			}
		}
	}
	if len(names) == 0 {
		return nil
	}
	r := &Redactor{}
	for v := range names {
		r.values = append(r.values, v)
	}
	// Longest first: strings.Replacer takes, at each position, the first
	// of its pairs that matches, and a value that holds another must win
	// over it, or the rest of the longer value would be written.
	slices.SortFunc(r.values, func(a, b string) int {
		return cmp.Or(cmp.Compare(len(b), len(a)), strings.Compare(a, b))
	})
	pairs := make([]string, 0, 2*len(r.values))
	for _, v := range r.values {
		slices.Sort(names[v])
		label := strings.Join(names[v], ", ")
		r.folded, r.labels = append(r.folded, foldASCII(v)), append(r.labels, label)
		pairs = append(pairs, v, Marker(label))
	}
	r.replacer = strings.NewReplacer(pairs...)
	return r
}

// Marker is what a secret's value is replaced with: "[secret NAME]".
func Marker(name string) string { return "[secret " + name + "]" }

// Holds reports whether s holds the value of a secret.
func (r *Redactor) Holds(s string) bool {
	if r == nil {
		return false
	}
	for _, v := range r.values {
		if strings.Contains(s, v) {
			return true
		}
	}
	return false
}

// Redact is s with every occurrence of a secret's value replaced by its
// Marker; s itself, with no copy, when it holds none.
func (r *Redactor) Redact(s string) string {
	if !r.Holds(s) {
		return s
	}
	return r.replacer.Replace(s)
}

// Error is err with its message redacted: err itself when the message
// holds no secret, else an error whose Error is the redacted message and
// that wraps err, so errors.Is and errors.As still classify it (a refused
// key, a retryable status). Whoever takes the cause out with errors.As
// must not record its own message.
func (r *Redactor) Error(err error) error {
	if err == nil || r == nil {
		return err
	}
	msg := err.Error()
	if !r.Holds(msg) {
		return err
	}
	return &redactedError{msg: r.replacer.Replace(msg), err: err}
}

// redactedError is an error whose message had a secret in it.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }
