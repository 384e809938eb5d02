//go:build reinbench

package bench

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/reinhq/rein/internal/store/bolt"
)

// recoveryPrereqs skips a test that cannot start a rein server here: the
// scenario reads /proc and builds the rein binary with the go tool.
func recoveryPrereqs(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("no /proc: the recovery scenario reads the server's memory there")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go tool to build the rein binary")
	}
}

// TestRecoverySmall runs the recovery scenario at a tiny scale (200 runs, 20
// running) and checks that the result is well formed and every running run
// was resumed. It never asserts a speed.
func TestRecoverySmall(t *testing.T) {
	recoveryPrereqs(t)
	dir := t.TempDir()
	r, err := Recovery(context.Background(), Options{Scale: 0.02, Rounds: 2, Dir: dir, Backend: boltBackend()})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(r)
	t.Logf("%s", out)
	x := r.Extra
	if r.Scenario != "recovery" || r.Unit != "starts/s" {
		t.Errorf("scenario %q unit %q", r.Scenario, r.Unit)
	}
	if r.Runs != 200 || x["runs"] != 200 || x["running_runs"] != 20 {
		t.Errorf("runs %d (extra %v), running %v; want 200 and 20", r.Runs, x["runs"], x["running_runs"])
	}
	// 200 runs of run_started and 49 pairs, 180 of them completed.
	if want := 200*99 + 180; r.Events != want || x["events"] != float64(want) {
		t.Errorf("events %d (extra %v), want %d", r.Events, x["events"], want)
	}
	if r.Rounds != 2 || len(r.Figures) != 2 || len(r.Baselines) != 2 || len(r.Ratios) != 2 {
		t.Errorf("rounds %d, figures %v, baselines %v, ratios %v; want 2 of each", r.Rounds, r.Figures, r.Baselines, r.Ratios)
	}
	if !(r.Figure > 0) || !(r.Baseline > 0) || !(r.Ratio > 0) {
		t.Errorf("figure %v, baseline %v, ratio %v; want all > 0", r.Figure, r.Baseline, r.Ratio)
	}
	if !(r.Seconds > 0) || x["serving_seconds"] != r.Seconds || x["baseline_serving_seconds"] != r.BaselineSeconds ||
		!(r.BaselineSeconds > 0) {
		t.Errorf("seconds %v (extra %v), baseline %v (extra %v)", r.Seconds, x["serving_seconds"], r.BaselineSeconds, x["baseline_serving_seconds"])
	}
	if f := 1 / r.Seconds; f != r.Figure {
		t.Errorf("figure %v, want 1/seconds = %v", r.Figure, f)
	}
	// Every running run was resumed and completed (the scenario checks
	// each one's status), after serving.
	if !(x["all_resumed_seconds"] >= x["serving_seconds"]) || !(x["all_resumed_seconds_worst"] >= x["all_resumed_seconds"]) {
		t.Errorf("all resumed in %v (worst %v), serving in %v", x["all_resumed_seconds"], x["all_resumed_seconds_worst"], x["serving_seconds"])
	}
	if !(x["serving_log_seconds"] > 0) || x["serving_log_seconds"] > x["serving_seconds_worst"] {
		t.Errorf("logged serving in %v, serving worst %v", x["serving_log_seconds"], x["serving_seconds_worst"])
	}
	for _, k := range []string{"rss_mib", "rss_peak_mib", "rss_serving_mib", "rss_anon_mib", "rss_anon_peak_mib", "rss_file_mib", "baseline_rss_mib", "store_mib"} {
		if !(x[k] > 0) {
			t.Errorf("%s = %v, want > 0", k, x[k])
		}
	}
	if x["rss_peak_mib"] < x["rss_mib"] {
		t.Errorf("peak RSS %v below RSS %v", x["rss_peak_mib"], x["rss_mib"])
	}
	if x["rss_anon_peak_mib"] < x["rss_anon_mib"] || x["rss_anon_mib"]+x["rss_file_mib"] > x["rss_mib"]+1 {
		t.Errorf("anonymous RSS %v (peak %v) and file RSS %v do not fit in RSS %v", x["rss_anon_mib"], x["rss_anon_peak_mib"], x["rss_file_mib"], x["rss_mib"])
	}
	if x["rss_anon_target_mib"] != recoveryAnonTargetMiB {
		t.Errorf("anonymous RSS target %v, want %v", x["rss_anon_target_mib"], recoveryAnonTargetMiB)
	}
	wantMet := r.Seconds <= recoveryServingTarget.Seconds() && x["rss_peak_mib"] <= recoveryRSSTargetMiB &&
		x["rss_anon_peak_mib"] <= recoveryAnonTargetMiB
	if r.Met != wantMet {
		t.Errorf("met %v, want %v (serving %vs, peak %v MiB, anonymous peak %v MiB)", r.Met, wantMet, r.Seconds, x["rss_peak_mib"], x["rss_anon_peak_mib"])
	}
	// The scenario removes its files, the built binary too.
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("%d files left in the temporary directory", len(left))
	}
}

// TestRecoveryBuild checks the built store's shape straight from the store:
// the running runs are the ones the plan says, each with a script one reply
// longer than its steps, and the others completed.
func TestRecoveryBuild(t *testing.T) {
	p := recoveryPlan{runs: 30, steps: 3, every: 10}
	path := filepath.Join(t.TempDir(), "store.db")
	if err := buildRecoveryStore(context.Background(), boltBackend(), path, p); err != nil {
		t.Fatal(err)
	}
	s, err := bolt.Open(path, bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	events := 0
	for i := range p.runs {
		st, err := s.Load(context.Background(), recoveryRunID(i))
		if err != nil {
			t.Fatal(err)
		}
		events += int(st.Version)
		if got, want := st.Status.String(), "RUN_STATUS_COMPLETED"; p.isRunning(i) {
			if got != "RUN_STATUS_RUNNING" || st.Steps != uint32(p.steps) || st.ModelInFlight {
				t.Errorf("run %d: %s, %d steps, model in flight %v; want running after %d steps", i, got, st.Steps, st.ModelInFlight, p.steps)
			}
			if n := len(st.Contract.GetModel().GetScript()); n != p.steps+1 {
				t.Errorf("run %d: a script of %d replies, want %d", i, n, p.steps+1)
			}
		} else if got != want {
			t.Errorf("run %d: %s, want %s", i, got, want)
		}
	}
	if events != p.events() {
		t.Errorf("%d events, want %d", events, p.events())
	}
}

// TestRecoveryFull runs the scenario at full size, only with
// REIN_BENCH_FULL=1 (it builds a store of 10,000 runs, ~400 MB), and logs
// the result as JSON.
func TestRecoveryFull(t *testing.T) {
	if os.Getenv("REIN_BENCH_FULL") != "1" {
		t.Skip("set REIN_BENCH_FULL=1 to run the recovery scenario at full size")
	}
	recoveryPrereqs(t)
	r, err := Recovery(context.Background(), Options{Dir: os.Getenv("REIN_BENCH_DIR"), Backend: boltBackend()})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := json.MarshalIndent(r, "", "  ")
	t.Logf("%s", out)
}
