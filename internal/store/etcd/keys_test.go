package etcd

import (
	"fmt"
	"math"
	"slices"
	"strings"
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

// TestRunBlobKeysKeepRunsApart: run-1's blob keys are not under run-10's
// prefix nor the reverse, so one's range delete leaves the other's, nor
// under the legacy shared blobs' prefix; the twin: a chunk of run-1's blob
// is under run-1's prefix.
func TestRunBlobKeysKeepRunsApart(t *testing.T) {
	k := keys{"P/"}
	for _, pair := range [][2]string{{"run-1", "run-10"}, {"run-10", "run-1"}} {
		if strings.HasPrefix(k.blob(pair[1], strings.Repeat("a", 64)), k.runBlobs(pair[0])) {
			t.Errorf("%s's blob is under %s's prefix %s", pair[1], pair[0], k.runBlobs(pair[0]))
		}
	}
	if !strings.HasPrefix(k.chunk("run-1", strings.Repeat("a", 64), 3), k.runBlobs("run-1")) {
		t.Error("a chunk of run-1's blob is not under its prefix")
	}
	if strings.HasPrefix(k.runBlobs("run-1"), k.legacyBlob("")) || strings.HasPrefix(k.legacyBlob(strings.Repeat("a", 64)), k.p+"rblob/") {
		t.Error("the run's blobs and the legacy shared ones share a prefix")
	}
}
