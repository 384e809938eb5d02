package tail

import (
	"strings"
	"testing"
)

func TestBufferKeepsTheEnd(t *testing.T) {
	b := &Buffer{Max: 4}
	for _, s := range []string{"ab", "cdef", "gh"} {
		if n, err := b.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if got := b.String(); got != "efgh" {
		t.Fatalf("String() = %q, want the last 4 bytes efgh", got)
	}
	if short := (&Buffer{Max: 10}); short.String() != "" {
		t.Fatal("an empty buffer is not empty")
	}
}

// TestWholeLines: a tail that starts inside a line, the bytes before it
// dropped, starts at the next line instead, and is empty when it is all
// one line; a tail that starts a line is kept whole, as is all of a text
// that was not cut.
func TestWholeLines(t *testing.T) {
	const key = "sk-live-7Qx9ZpL2mN4vR8tY1wK6"
	for _, tc := range []struct {
		writes []string
		max    int
		want   string
	}{
		{[]string{"a\ntoken=" + key + "\nb\n"}, 10, "b\n"},
		{[]string{"token=", key, "\nerror: bad\n"}, 20, "error: bad\n"},
		// Written in pieces, so that the buffer drops bytes as it goes.
		{strings.SplitAfter(strings.Repeat("token="+key+"\n", 50), "\n"), 40, "token=" + key + "\n"},
		{[]string{"one long line without an end"}, 8, ""},
		// The twins: the tail starts a line, or nothing was cut.
		{[]string{"first\n", "second\n"}, 7, "second\n"},
		{[]string{"short\nlines\n"}, 100, "short\nlines\n"},
		{[]string{"partial"}, 7, "partial"},
	} {
		b := &Buffer{Max: tc.max}
		for _, w := range tc.writes {
			b.Write([]byte(w))
		}
		if got := b.WholeLines(); got != tc.want {
			t.Errorf("%q, Max %d: WholeLines = %q, want %q", tc.writes, tc.max, got, tc.want)
		}
	}
	var none *Buffer
	if none.WholeLines() != "" {
		t.Error("a nil Buffer's WholeLines is not empty")
	}
}

func TestLines(t *testing.T) {
	for _, tc := range []struct {
		s        string
		n, max   int
		want     string
		describe string
	}{
		{"a\nb\nc\n", 2, 100, "b\nc", "the last two lines, trailing newline dropped"},
		{"a\nb", 5, 100, "a\nb", "fewer lines than asked"},
		{"", 3, 100, "", "nothing"},
		{"abcdef", 1, 3, "def", "cut to max bytes"},
		{"x\xff\xfe", 1, 100, "x\uFFFD", "invalid UTF-8 replaced"},
	} {
		if got := Lines(tc.s, tc.n, tc.max); got != tc.want {
			t.Errorf("%s: Lines(%q, %d, %d) = %q, want %q", tc.describe, tc.s, tc.n, tc.max, got, tc.want)
		}
	}
	if got := Lines(strings.Repeat("line\n", 100), 40, 1<<20); strings.Count(got, "\n") != 39 {
		t.Fatalf("40 lines joined by %d newlines, want 39", strings.Count(got, "\n"))
	}
}

// TestBufferWhileWritten: a reader may read while a writer writes (run
// under -race).
func TestBufferWhileWritten(t *testing.T) {
	b := &Buffer{Max: 8}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 1000 {
			b.Write([]byte("line\n")) //nolint:errcheck // never fails
		}
	}()
	for range 100 {
		if s := b.String(); len(s) > 8 {
			t.Fatalf("String() = %q, longer than Max", s)
		}
	}
	<-done
	if (*Buffer)(nil).String() != "" {
		t.Fatal("a nil Buffer is not empty")
	}
}
