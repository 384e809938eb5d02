//go:build reinbench

package bench

import (
	"context"
	"math"
	"os"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/reinhq/rein/internal/runstate"
)

// TestScenariosSmall runs each scenario at a tiny scale and checks that the
// result is well formed. It never asserts a speed. Watch, recovery and
// mcp, which start servers, have their own tests; so has cache-cost, whose
// figure is a bill, computed once (lower is better), not a timed rate.
func TestScenariosSmall(t *testing.T) {
	for _, sc := range Scenarios() {
		if sc.Name == "watch" || sc.Name == "recovery" || sc.Name == "mcp" || sc.Name == "cache-cost" {
			continue
		}
		t.Run(sc.Name, func(t *testing.T) {
			dir := t.TempDir()
			r, err := sc.Run(context.Background(), Options{Scale: 0.002, Rounds: 2, Dir: dir, Backend: boltBackend()})
			if err != nil {
				t.Fatal(err)
			}
			if r.Scenario != sc.Name || r.Unit == "" {
				t.Errorf("scenario %q unit %q; want %q and a unit", r.Scenario, r.Unit, sc.Name)
			}
			if !(r.Figure > 0) || !(r.Baseline > 0) {
				t.Fatalf("figure %v, baseline %v; want both > 0", r.Figure, r.Baseline)
			}
			if want := r.Figure / r.Baseline; math.Abs(r.Ratio-want) > 1e-9*want {
				t.Errorf("ratio %v, want figure/baseline = %v", r.Ratio, want)
			}
			if r.Met != (r.Ratio >= r.Target) || r.Target <= 0 {
				t.Errorf("met %v with ratio %v and target %v", r.Met, r.Ratio, r.Target)
			}
			if r.Events <= 0 || r.Runs <= 0 || !(r.Seconds > 0) || !(r.BaselineSeconds > 0) {
				t.Errorf("events %d, runs %d, seconds %v, baseline seconds %v; want all > 0", r.Events, r.Runs, r.Seconds, r.BaselineSeconds)
			}
			if r.Rounds != 2 || len(r.Figures) != 2 || len(r.Baselines) != 2 || len(r.Ratios) != 2 {
				t.Errorf("rounds %d, figures %v, baselines %v, ratios %v; want 2 of each", r.Rounds, r.Figures, r.Baselines, r.Ratios)
			}
			for i := range r.Figures {
				if r.Figures[i] > r.Figure || r.Baselines[i] > r.Baseline {
					t.Errorf("round %d (%v, %v) beats the best (%v, %v)", i, r.Figures[i], r.Baselines[i], r.Figure, r.Baseline)
				}
			}
			// The scenario removes its files.
			if left, _ := os.ReadDir(dir); len(left) != 0 {
				t.Errorf("%d files left in the temporary directory", len(left))
			}
		})
	}
}

func TestScaleKeepsMinimum(t *testing.T) {
	o := Options{Scale: 1e-9}
	if got := o.scaled(5000, 1); got != 1 {
		t.Errorf("scaled = %d, want the minimum 1", got)
	}
	if got := (Options{}).scaled(5000, 1); got != 5000 {
		t.Errorf("default scale gives %d, want 5000", got)
	}
}

func TestStepEventsFoldAndArePadded(t *testing.T) {
	at := benchTime()
	for _, pairs := range []bool{false, true} {
		st, err := runstate.Apply(runstate.State{}, runStarted("run_x", at))
		if err != nil {
			t.Fatal(err)
		}
		for seq := uint64(2); seq < 40; seq++ {
			ev := stepEvent("run_x", seq, at, pairs)
			if n := proto.Size(ev); n < eventBytes-4 || n > eventBytes {
				t.Errorf("event %d is %d bytes, want about %d", seq, n, eventBytes)
			}
			if st, err = runstate.Apply(st, ev); err != nil {
				t.Fatalf("pairs=%v: event %d: %v", pairs, seq, err)
			}
		}
	}
}

func TestLookup(t *testing.T) {
	for _, n := range Names() {
		if scs, ok := Lookup(n); !ok || scs[0].Name != n {
			t.Errorf("Lookup(%q) = %v, %v", n, scs, ok)
		}
	}
	if scs, _ := Lookup("steps"); len(scs) != 3 || scs[0].Name != "steps" || scs[1].Name != "steps-runs" || scs[2].Name != "steps-stream" {
		t.Errorf("Lookup(steps) = %v, want steps, steps-runs and steps-stream", scs)
	}
	if scs, _ := Lookup("all"); len(scs) != len(Scenarios()) {
		t.Errorf("Lookup(all) has %d scenarios, want %d", len(scs), len(Scenarios()))
	}
	if _, ok := Lookup("nope"); ok {
		t.Error("Lookup found an unknown scenario")
	}
}

// TestServingAddr reads the address from a rein server's log line, and
// nothing from another line.
func TestServingAddr(t *testing.T) {
	for line, want := range map[string]string{
		`time=2026-01-02T03:04:05Z level=INFO msg="rein serving" addr=127.0.0.1:4567 db=/tmp/x.db`: "127.0.0.1:4567",
		`time=2026-01-02T03:04:05Z level=INFO msg="rein serving" db=/tmp/x.db addr=[::1]:80`:       "[::1]:80",
		`time=2026-01-02T03:04:05Z level=INFO msg="resumed runs" addr=127.0.0.1:1`:                 "",
		`msg="rein serving"`: "",
	} {
		if got := servingAddr(line); got != want {
			t.Errorf("servingAddr(%q) = %q, want %q", line, got, want)
		}
	}
}
