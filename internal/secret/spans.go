package secret

import (
	"cmp"
	"slices"
	"strings"
)

// Span is where a secret's value lies in a text: its bytes Start to End,
// and Names, the names of the secrets whose values lie there, as a Marker
// writes them.
type Span struct {
	Start, End int
	Names      string
}

// Spans are where the secrets' values lie in one text, in order, apart:
// what Find returns.
type Spans []Span

// Find is where the values of the secrets lie in s, found without regard to
// the case of ASCII letters (a file may hold a key upper-cased), overlapping
// and touching ones merged. Whoever shows part of s cuts it with Slice, so
// that the part holds no piece of a value, whichever bytes the cut goes
// through: Redact of a part cut before would miss the piece a cut leaves.
func (r *Redactor) Find(s string) Spans {
	if r == nil {
		return nil
	}
	folded := foldASCII(s)
	var found Spans
	for i, v := range r.folded {
		// Each start, overlapping ones too: "abab…" holds a value "abab"
		// at every other byte, and each byte of every occurrence is part
		// of a value.
		for at := 0; ; at++ {
			k := strings.Index(folded[at:], v)
			if k < 0 {
				break
			}
			at += k
			found = append(found, Span{Start: at, End: at + len(v), Names: r.labels[i]})
		}
	}
	if len(found) == 0 {
		return nil
	}
	slices.SortFunc(found, func(a, b Span) int { return cmp.Compare(a.Start, b.Start) })
	merged := found[:1]
	for _, sp := range found[1:] {
		last := &merged[len(merged)-1]
		if sp.Start > last.End {
			merged = append(merged, sp)
			continue
		}
		last.End = max(last.End, sp.End)
		last.Names = joinNames(last.Names, sp.Names)
	}
	return merged
}

// Within is the spans that share a byte with s[from:to].
func (sp Spans) Within(from, to int) Spans {
	i, _ := slices.BinarySearchFunc(sp, from, func(s Span, from int) int {
		if s.End <= from {
			return -1
		}
		return 1
	})
	j := i
	for j < len(sp) && sp[j].Start < to {
		j++
	}
	return sp[i:j]
}

// Names is the names of the secrets of sp, each once, sorted, joined as a
// Marker writes them.
func (sp Spans) Names() string {
	names := ""
	for _, s := range sp {
		names = joinNames(names, s.Names)
	}
	return names
}

// Slice is s[from:to] with the bytes of each value that lies in it, whole
// or in part, replaced by the value's Marker; sp is Find of s. A value
// that the cut goes through is replaced as one that lies whole in it is,
// so the slice holds no piece of a value. It is s[from:to] itself when no
// value lies in it.
func (sp Spans) Slice(s string, from, to int) string {
	in := sp.Within(from, to)
	if len(in) == 0 {
		return s[from:to]
	}
	var b strings.Builder
	at := from
	for _, v := range in {
		b.WriteString(s[at:max(at, v.Start)])
		b.WriteString(Marker(v.Names))
		at = min(v.End, to)
	}
	b.WriteString(s[at:to])
	return b.String()
}

// MaxLen is the length of the longest value r redacts, in bytes; 0 for a
// nil Redactor. A value that shares a byte with s[from:to] lies within
// MaxLen-1 bytes of it on either side: reading that much around a part of
// a larger text (a file) is enough to Find every value in the part.
func (r *Redactor) MaxLen() int {
	if r == nil {
		return 0
	}
	return len(r.values[0])
}

// joinNames is the names of a and b, each a Marker's list, each name once
// and sorted.
func joinNames(a, b string) string {
	if a == "" || a == b {
		return cmp.Or(b, a)
	}
	names := append(strings.Split(a, ", "), strings.Split(b, ", ")...)
	slices.Sort(names)
	return strings.Join(slices.Compact(names), ", ")
}

// foldASCII is s with its ASCII letters in lower case, byte for byte the
// same length (strings.ToLower is not: some letters change length), so
// that an index into it is one into s.
func foldASCII(s string) string {
	upper := strings.IndexFunc(s, func(c rune) bool { return 'A' <= c && c <= 'Z' })
	if upper < 0 {
		return s
	}
	b := []byte(s)
	for i := upper; i < len(b); i++ {
		if 'A' <= b[i] && b[i] <= 'Z' {
			b[i] += 'a' - 'A'
		}
	}
	return string(b)
}
