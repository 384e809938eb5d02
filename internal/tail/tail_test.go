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
