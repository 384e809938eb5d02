package etcd

import (
	"fmt"
	"math"
	"slices"
	"testing"
)

// TestKeysSortBySequence: event keys are the layout's 16 hex digits (as
// fmt's %016x writes them), so they sort in sequence order, across a change
// in the number of significant digits too.
func TestKeysSortBySequence(t *testing.T) {
	k := keys{"/p/"}
	seqs := []uint64{0, 1, 9, 10, 15, 16, 255, 256, 0xabcdef, 1 << 32, math.MaxUint64 - 1, math.MaxUint64}
	var got []string
	for _, seq := range seqs {
		key := k.event("run-1", seq)
		if want := fmt.Sprintf("/p/event/run-1/%016x", seq); key != want {
			t.Errorf("event key of %d = %q, want %q", seq, key, want)
		}
		if want := fmt.Sprintf("/p/change/%016x", seq); k.change(seq) != want {
			t.Errorf("change key of %d = %q, want %q", seq, k.change(seq), want)
		}
		got = append(got, key)
	}
	if !slices.IsSorted(got) {
		t.Errorf("event keys do not sort in sequence order: %q", got)
	}
}
