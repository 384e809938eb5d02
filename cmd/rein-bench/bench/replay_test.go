//go:build reinbench

package bench

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// TestReplayBreakdown runs the replay scenario small and checks that its
// breakdown adds up: each side's best round is its reading plus its own
// work, per event.
func TestReplayBreakdown(t *testing.T) {
	r, err := Replay(context.Background(), small(t, 0.01))
	if err != nil {
		t.Fatal(err)
	}
	x := r.Extra
	for _, k := range []string{"load_ns_per_event", "replay_ns_per_event", "baseline_load_ns_per_event", "fold_ns_per_event", "in_memory_ratio"} {
		if !(x[k] > 0) {
			t.Errorf("extra %s = %v, want > 0", k, x[k])
		}
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-6*b }
	if want := float64(r.Events) * (x["load_ns_per_event"] + x["replay_ns_per_event"]) / 1e9; !near(r.Seconds, want) {
		t.Errorf("figure round %vs, but its reading and replay add up to %vs", r.Seconds, want)
	}
	if want := float64(r.Events) * (x["baseline_load_ns_per_event"] + x["fold_ns_per_event"]) / 1e9; !near(r.BaselineSeconds, want) {
		t.Errorf("baseline round %vs, but its reading and fold add up to %vs", r.BaselineSeconds, want)
	}
}

// TestReplayFilesNamesTheFile is the twin: work that fails on a run stops
// the round with an error that names the file.
func TestReplayFilesNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	if _, err := recordReplayRuns(context.Background(), boltBackend(), dir, 2, 2); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	calls := 0
	_, err := replayFiles(dir, func([]*reinv1.Event) error {
		if calls++; calls == 2 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "run-00001.rein") {
		t.Fatalf("error %v, want boom naming run-00001.rein", err)
	}
}
