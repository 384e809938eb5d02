package secret

import (
	"strings"
	"testing"
)

// pieceOf reports a piece of a value of r, of at least n bytes, that s
// holds; "" when it holds none.
func pieceOf(r *Redactor, s string, n int) string {
	for _, v := range r.values {
		for i := 0; i+n <= len(v); i++ {
			if strings.Contains(foldASCII(s), foldASCII(v[i:i+n])) {
				return v[i : i+n]
			}
		}
	}
	return ""
}

// TestSliceCutsNoValue: every slice of a text that holds a value, whichever
// bytes it starts and ends at, holds no piece of it (of 4 bytes or more:
// shorter ones are ordinary text), and shows the marker where it was.
func TestSliceCutsNoValue(t *testing.T) {
	r := keys()
	text := "key=" + openaiKey + "\nother=" + strings.ToUpper(anthropicKey) + "\nend\n"
	spans := r.Find(text)
	if len(spans) != 2 {
		t.Fatalf("Find = %v, want the two values (one upper-cased)", spans)
	}
	for from := 0; from <= len(text); from++ {
		for to := from; to <= len(text); to++ {
			got := spans.Slice(text, from, to)
			if p := pieceOf(r, got, 4); p != "" {
				t.Fatalf("Slice(%d, %d) = %q holds %q of a value", from, to, got, p)
			}
			if in := spans.Within(from, to); len(in) > 0 && !strings.Contains(got, Marker(in[0].Names)) {
				t.Fatalf("Slice(%d, %d) = %q, want the marker of %s", from, to, got, in[0].Names)
			}
		}
	}
	// The twin: a slice with no value in it is the text's own bytes.
	if got := spans.Slice(text, 0, 4); got != "key=" {
		t.Errorf("Slice(0, 4) = %q, want %q", got, "key=")
	}
	if got := spans.Slice(text, len(text)-4, len(text)); got != "end\n" {
		t.Errorf("Slice of the end = %q, want %q", got, "end\n")
	}
}

// TestFindMerges: values that overlap or touch are one span, named after
// all of theirs; a value found twice overlapping is covered whole; a nil
// Redactor finds nothing.
func TestFindMerges(t *testing.T) {
	r := New(map[string]string{"A": "abcdefgh", "B": "efghijkl", "C": "abababab"})
	for _, tc := range []struct {
		in   string
		want Spans
	}{
		{"..abcdefghijkl..", Spans{{2, 14, "A, B"}}},
		{"abcdefghabcdefgh", Spans{{0, 16, "A"}}},
		{"xababababab", Spans{{1, 11, "C"}}},
		{"ABCDEFGH", Spans{{0, 8, "A"}}},
		// The twins: no value, or a value cut.
		{"abcdefg hijkl", nil},
		{"", nil},
	} {
		got := r.Find(tc.in)
		if len(got) != len(tc.want) {
			t.Errorf("Find(%q) = %v, want %v", tc.in, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("Find(%q) = %v, want %v", tc.in, got, tc.want)
			}
		}
	}
	var none *Redactor
	if got := none.Find("abcdefgh"); got != nil || none.MaxLen() != 0 {
		t.Errorf("nil Redactor: Find = %v, MaxLen = %d", got, none.MaxLen())
	}
	if got := r.MaxLen(); got != 8 {
		t.Errorf("MaxLen = %d, want 8", got)
	}
}
