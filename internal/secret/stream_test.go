package secret

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestStreamRedactsAcrossPieces: a value cut anywhere across the pieces
// is redacted, and the pieces passed on join to Redact of the whole.
func TestStreamRedactsAcrossPieces(t *testing.T) {
	r := New(map[string]string{"KEY": "sk-0123456789", "TOKEN": "tok-abcdefgh"})
	text := "call with sk-0123456789 then tok-abcdefgh and sk-0123 (cut) end"
	for size := 1; size <= len(text); size++ {
		var got []string
		s := r.Stream(func(p string) { got = append(got, p) })
		for i := 0; i < len(text); i += size {
			s.Write(text[i:min(i+size, len(text))])
		}
		s.Flush()
		joined := strings.Join(got, "")
		if want := r.Redact(text); joined != want {
			t.Fatalf("pieces of %d bytes: joined %q, want %q", size, joined, want)
		}
		for _, p := range got {
			if strings.Contains(p, "sk-0123456789") || strings.Contains(p, "tok-abcdefgh") {
				t.Fatalf("pieces of %d bytes: a piece passed on holds a secret: %q", size, p)
			}
		}
	}
}

// TestStreamHoldsOnlyWhatMayBeASecret: text far from any value's length
// is passed on before the text ends, not held until Flush.
func TestStreamHoldsOnlyWhatMayBeASecret(t *testing.T) {
	r := New(map[string]string{"KEY": "sk-0123456789"})
	var got []string
	s := r.Stream(func(p string) { got = append(got, p) })
	s.Write(strings.Repeat("a", 100))
	if len(got) != 1 || len(got[0]) != 100-(len("sk-0123456789")-1) {
		t.Fatalf("passed on %q before the end; want all but the last %d bytes", got, len("sk-0123456789")-1)
	}
	s.Write("sk-0123")
	s.Write("45") // a value's start is held while it may complete
	if strings.Contains(strings.Join(got, ""), "s") {
		t.Fatalf("passed on %q; want the value's start held", got)
	}
	s.Flush()
	if joined := strings.Join(got, ""); joined != strings.Repeat("a", 100)+"sk-012345" {
		t.Fatalf("after Flush: %q", joined)
	}
}

// TestStreamWithoutSecrets passes each piece on as it came.
func TestStreamWithoutSecrets(t *testing.T) {
	var got []string
	s := (*Redactor)(nil).Stream(func(p string) { got = append(got, p) })
	s.Write("a")
	s.Write("sk-0123456789")
	s.Flush()
	if len(got) != 2 || got[1] != "sk-0123456789" {
		t.Fatalf("got %q, want the pieces unchanged", got)
	}
}

// TestStreamPassesCharactersWhole: a piece passed on never ends inside a
// multi-byte character, so the text stays valid UTF-8 piece by piece.
func TestStreamPassesCharactersWhole(t *testing.T) {
	r := New(map[string]string{"KEY": "sk-0123456789"})
	text := strings.Repeat("こんにちは、世界 ", 20)
	for size := 1; size <= 7; size++ {
		var got []string
		s := r.Stream(func(p string) { got = append(got, p) })
		for i := 0; i < len(text); i += size {
			s.Write(text[i:min(i+size, len(text))])
		}
		s.Flush()
		for _, p := range got {
			if !utf8.ValidString(p) {
				t.Fatalf("pieces of %d bytes: %q passed on, not whole characters", size, p)
			}
		}
		if strings.Join(got, "") != text {
			t.Fatalf("pieces of %d bytes: joined text differs", size)
		}
	}
}
