//go:build reinbench

package bench

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/reinhq/rein/internal/taskcontract"
)

// TestStepsStreamSmall runs steps-stream at a tiny scale (10 tool calls and
// the answer) and checks its report: the streaming side gave the hub every
// chunk and its watcher took model output, the other side streamed nothing;
// both watchers saw every event, and both sides committed the same. It
// never asserts a speed.
func TestStepsStreamSmall(t *testing.T) {
	o := small(t, 0.002)
	r, err := StepsStream(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	x := r.Extra
	if r.Scenario != "steps-stream" || r.Unit != "steps/s" || r.Runs != 1 || r.Target != 0.9 || x["steps"] != 11 {
		t.Errorf("scenario %q, unit %q, runs %d, target %v, steps %v; want steps-stream, steps/s, 1, 0.9, 11",
			r.Scenario, r.Unit, r.Runs, r.Target, x["steps"])
	}
	if !(r.Figure > 0) || !(r.Baseline > 0) || r.Ratio != r.Figure/r.Baseline || r.Met != (r.Ratio >= r.Target) {
		t.Errorf("figure %v, baseline %v, ratio %v, met %v", r.Figure, r.Baseline, r.Ratio, r.Met)
	}
	if r.Rounds != 2 || len(r.Figures) != 2 || len(r.Baselines) != 2 || len(r.Ratios) != 2 {
		t.Errorf("rounds %d, figures %v, baselines %v, ratios %v; want 2 of each", r.Rounds, r.Figures, r.Baselines, r.Ratios)
	}
	if x["chunks_per_step"] != stepsStreamChunks || x["baseline_chunks_per_step"] != 0 {
		t.Errorf("chunks per step %v streaming, %v not; want %d and 0", x["chunks_per_step"], x["baseline_chunks_per_step"], stepsStreamChunks)
	}
	if !(x["outputs"] > 0) || !(x["output_bytes"] > 0) || x["baseline_outputs"] != 0 || x["baseline_output_bytes"] != 0 {
		t.Errorf("the watchers took %v pieces of output (%v bytes) streaming, %v (%v) not; want some, and none",
			x["outputs"], x["output_bytes"], x["baseline_outputs"], x["baseline_output_bytes"])
	}
	// A piece of output is never more than the calls wrote.
	if max := x["steps"] * stepsStreamChunks * stepsStreamChunkBytes; x["output_bytes"] > max {
		t.Errorf("the watcher took %v bytes of output; the calls wrote %v", x["output_bytes"], max)
	}
	if x["watched_events"] != float64(r.Events) || x["baseline_watched_events"] != float64(r.Events) {
		t.Errorf("the watchers saw %v and %v events, want all %d", x["watched_events"], x["baseline_watched_events"], r.Events)
	}
	for _, k := range []string{"cpu_us_per_step", "baseline_cpu_us_per_step", "cpu_ratio", "commits_per_step", "ratio_median", "contract_bytes"} {
		if !(x[k] > 0) {
			t.Errorf("extra %s = %v, want > 0", k, x[k])
		}
	}
	// Streaming commits nothing more: the same commits, and (both runs
	// storing the same contract) about the same bytes.
	if x["commits_per_step"] != x["baseline_commits_per_step"] {
		t.Errorf("commits per step %v streaming, %v not; want the same", x["commits_per_step"], x["baseline_commits_per_step"])
	}
	if b, f := x["baseline_bytes_written_per_step"], x["bytes_written_per_step"]; b > 0 && (f > 1.1*b || f < 0.9*b) {
		t.Errorf("written per step %v streaming, %v not; want about the same", f, b)
	}
	if left, _ := os.ReadDir(o.Dir); len(left) != 0 {
		t.Errorf("files left in the temporary directory: %v", left)
	}
}

// TestStepsStreamRefuses: a steps-stream whose store cannot be opened
// fails, naming the scenario and the side, and leaves no files.
func TestStepsStreamRefuses(t *testing.T) {
	o := small(t, 0.002)
	boom := errors.New("no disk here")
	o.Backend.Open = func(string, bool) (Store, error) { return nil, boom }
	_, err := StepsStream(context.Background(), o)
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "steps-stream: figure, round 1") {
		t.Errorf("StepsStream = %v, want the store's error in the figure's first round", err)
	}
	if left, _ := os.ReadDir(o.Dir); len(left) != 0 {
		t.Errorf("files left in the temporary directory: %v", left)
	}
	// A cancelled context stops it before anything runs.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := StepsStream(ctx, small(t, 0.002)); !errors.Is(err, context.Canceled) {
		t.Errorf("StepsStream with a cancelled context = %v, want context.Canceled", err)
	}
}

// TestAlternateOrderSwaps: with swap, every other round runs the baseline
// first; without, the figure always goes first.
func TestAlternateOrderSwaps(t *testing.T) {
	for _, swap := range []bool{false, true} {
		var order []string
		side := func(name string) func(int) (measure, error) {
			return func(round int) (measure, error) {
				order = append(order, name)
				return measure{units: 1, elapsed: time.Millisecond}, nil
			}
		}
		r := Result{Scenario: "x"}
		if err := alternateOrder(context.Background(), &r, 4, swap, side("f"), side("b")); err != nil {
			t.Fatal(err)
		}
		want := []string{"f", "b", "f", "b", "f", "b", "f", "b"}
		if swap {
			want = []string{"f", "b", "b", "f", "f", "b", "b", "f"}
		}
		if !slices.Equal(order, want) || r.Rounds != 4 || len(r.Ratios) != 4 {
			t.Errorf("swap %v: order %v, rounds %d, ratios %v; want %v, 4 and 4", swap, order, r.Rounds, r.Ratios, want)
		}
	}
}

// TestStepsStreamContractFits: at full scale the streaming script's
// contract is within what rein accepts; at a scale too large for it, the
// scenario says so before it runs anything.
func TestStepsStreamContractFits(t *testing.T) {
	c := streamingContract(stepsContract(stepsToolCalls, 0))
	if n := proto.Size(c); n > taskcontract.MaxBytes {
		t.Errorf("the full-size contract is %d bytes, over %d", n, taskcontract.MaxBytes)
	}
	for i, ch := range streamChunks(stepsToolCalls) {
		if len(ch.GetText()) != stepsStreamChunkBytes {
			t.Errorf("chunk %d is %q, %d bytes; want %d", i, ch.GetText(), len(ch.GetText()), stepsStreamChunkBytes)
		}
	}
	o := small(t, 2)
	if _, err := StepsStream(context.Background(), o); err == nil || !strings.Contains(err.Error(), "use a smaller --scale") {
		t.Errorf("StepsStream at scale 2 = %v, want the contract's size refused", err)
	}
}
