//go:build reinbench

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// reinBin is the rein binary the tests build once (TestMain), for the
// scenarios that start rein serve.
var reinBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "rein-bench-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	reinBin = filepath.Join(dir, "rein")
	build := exec.Command("go", "build", "-o", reinBin, "github.com/reinhq/rein/cmd/rein")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build rein for the bench's tests:", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// runBench runs rein-bench with args (and --rein, the binary TestMain built,
// unless args give one).
func runBench(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	if !slices.Contains(args, "--rein") {
		args = append(args, "--rein", reinBin)
	}
	code = run(context.Background(), &env{stdout: &out, stderr: &errb}, args)
	return code, out.String(), errb.String()
}

func TestBenchUnknownScenario(t *testing.T) {
	code, out, errs := runBench(t, "nope")
	if code != exitUsage {
		t.Errorf("exit %d, want %d", code, exitUsage)
	}
	if out != "" {
		t.Errorf("stdout %q, want nothing", out)
	}
	for _, name := range []string{`"nope"`, "append", "steps", "steps-runs", "steps-stream", "fold", "replay", "watch", "delegate", "admission", "recovery", "all", "failover", "lifecycle", "scale"} {
		if !strings.Contains(errs, name) {
			t.Errorf("stderr %q does not name %s", errs, name)
		}
	}
}

func TestBenchBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{}, {"append", "--scale", "0"}, {"append", "--rounds", "-1"}, {"append", "steps"},
		{"steps", "--runs", "0"}, {"steps", "--runs", "-3"}, {"fold", "--store", "nope"},
		{"steps-stream", "--scale", "-1"}, {"steps-stream", "--rounds", "0"}, {"steps-stream", "--store", "nope"},
		{"scale", "--replicas", "0"}, {"scale", "--replicas", "1,-2"}, {"scale", "--replicas", "x"}, {"scale", "--scale", "0"},
		{"append", "--replicas", "2"},
	} {
		if code, out, _ := runBench(t, args...); code != exitUsage || out != "" {
			t.Errorf("bench %v: exit %d, stdout %q; want %d and nothing", args, code, out, exitUsage)
		}
	}
}

// TestBenchUnknownStore: a --store that does not exist is refused before
// anything runs, with the backends there are.
func TestBenchUnknownStore(t *testing.T) {
	code, out, errs := runBench(t, "append", "--store", "sqlite", "--dir", t.TempDir())
	if code != exitUsage || out != "" {
		t.Errorf("exit %d, stdout %q; want %d and nothing", code, out, exitUsage)
	}
	if !strings.Contains(errs, `unknown --store "sqlite"`) || !strings.Contains(errs, "bolt") || !strings.Contains(errs, "etcd") {
		t.Errorf("stderr %q, want the unknown store named and bolt and etcd offered", errs)
	}
}

// TestBenchStepsRuns runs steps (which is steps, steps-runs and
// steps-stream) small with --store bolt --runs 3: three lines, the second
// of 3 runs, each with its CPU and bytes per step.
func TestBenchStepsRuns(t *testing.T) {
	code, out, errs := runBench(t, "steps", "--store", "bolt", "--runs", "3", "--scale", "0.002", "--rounds", "1", "--dir", t.TempDir())
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "steps ") || !strings.HasPrefix(lines[1], "steps-runs ") ||
		!strings.HasPrefix(lines[2], "steps-stream ") {
		t.Fatalf("output %q, want a line for steps, one for steps-runs, then one for steps-stream", out)
	}
	if !strings.Contains(lines[1], " 3 runs") || !strings.Contains(lines[2], " 1 runs") {
		t.Errorf("steps-runs line %q, want 3 runs; steps-stream line %q, want 1", lines[1], lines[2])
	}
	for i, line := range lines {
		want := []string{"CPU per step", "written per step", "per commit"}
		if i == 2 {
			want = []string{"CPU per step", "written per step", "commits a step", "streaming 8 chunks of 36 bytes a step", "target ≥ 0.90"}
		}
		for _, want := range want {
			if !strings.Contains(line, want) {
				t.Errorf("line %q has no %q", line, want)
			}
		}
	}
}

func TestBenchAllJSON(t *testing.T) {
	code, out, errs := runBench(t, "all", "--json", "--scale", "0.002", "--rounds", "1", "--dir", t.TempDir())
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := []string{"append", "steps", "steps-runs", "steps-stream", "webhooks", "fold", "replay", "reads", "watch", "delegate", "admission", "mcp", "cache-cost", "recovery"}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), out)
	}
	for i, line := range lines {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("line %d is not JSON: %v\n%s", i, err, line)
		}
		if r["scenario"] != want[i] {
			t.Errorf("line %d: scenario %v, want %s", i, r["scenario"], want[i])
		}
		for _, k := range []string{"figure", "unit", "baseline", "ratio", "target", "events", "runs", "seconds"} {
			if _, ok := r[k]; !ok {
				t.Errorf("line %d has no %q: %s", i, k, line)
			}
		}
		fig, _ := r["figure"].(float64)
		base, _ := r["baseline"].(float64)
		ratio, _ := r["ratio"].(float64)
		if fig <= 0 || base <= 0 || ratio != fig/base {
			t.Errorf("line %d: figure %v, baseline %v, ratio %v", i, fig, base, ratio)
		}
		if r["scenario"] == "watch" {
			checkWatchExtra(t, r)
		}
	}
}

// checkWatchExtra checks the watch scenario's own figures: every stream got
// every event once, and the idle server (`rein serve`, started by the
// scenario) was measured. It asserts no speed or size.
func checkWatchExtra(t *testing.T, r map[string]any) {
	t.Helper()
	x, _ := r["extra"].(map[string]any)
	for _, k := range []string{"gaps", "duplicates", "baseline_gaps", "baseline_duplicates"} {
		if v, ok := x[k]; !ok || v != 0.0 {
			t.Errorf("watch: %s = %v, want 0", k, v)
		}
	}
	for _, k := range []string{"p50_ms", "p99_ms", "baseline_p50_ms", "baseline_p99_ms", "p99_ratio", "streams", "paced_deliveries_per_s"} {
		if v, _ := x[k].(float64); !(v > 0) {
			t.Errorf("watch: %s = %v, want > 0", k, x[k])
		}
	}
	if rss, _ := x["rss_idle_mib"].(float64); runtime.GOOS == "linux" && !(rss > 0) {
		t.Errorf("watch: rss_idle_mib = %v, want the memory of the rein serve it started", x["rss_idle_mib"])
	}
}

func TestBenchWatchReadableLine(t *testing.T) {
	code, out, errs := runBench(t, "watch", "--scale", "0.002", "--rounds", "1", "--dir", t.TempDir())
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if n := strings.Count(out, "\n"); n != 1 || !strings.HasPrefix(out, "watch ") {
		t.Fatalf("output %q, want one line about watch", out)
	}
	for _, want := range []string{"deliveries/s", "ratio", "p99", "gaps", "idle server", "MiB"} {
		if !strings.Contains(out, want) {
			t.Errorf("output %q has no %q", out, want)
		}
	}
}

func TestBenchReadableLine(t *testing.T) {
	code, out, errs := runBench(t, "fold", "--scale", "0.001", "--rounds", "1", "--dir", t.TempDir())
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if n := strings.Count(out, "\n"); n != 1 || !strings.HasPrefix(out, "fold ") || !strings.Contains(out, "ratio") {
		t.Errorf("output %q, want one line about fold with its ratio", out)
	}
}

// TestBenchReinBinary: the watch scenario starts rein serve from --rein. The
// twin: a --rein that is not an executable file is a usage error naming it,
// before anything is measured.
func TestBenchReinBinary(t *testing.T) {
	dir := t.TempDir()
	code, out, errs := runBench(t, "watch", "--scale", "0.001", "--rounds", "1", "--dir", dir, "--json")
	if code != exitOK || !strings.Contains(out, `"rss_idle_mib"`) {
		t.Fatalf("watch with --rein %s: exit %d, %s %s", reinBin, code, out, errs)
	}
	for _, bad := range []string{filepath.Join(dir, "missing"), dir} {
		code, out, errs = runBench(t, "watch", "--scale", "0.001", "--rounds", "1", "--dir", dir, "--rein", bad)
		if code != exitUsage || out != "" || !strings.Contains(errs, "--rein "+bad) {
			t.Errorf("watch with --rein %s: exit %d, stdout %q, stderr %q; want a usage error naming it", bad, code, out, errs)
		}
	}
}

// TestBenchStepsStreamJSON runs steps-stream small with --json: one line,
// the ratio of streaming to not against 0.9, and each side's CPU, commits
// and bytes per step, the chunks given the hub and the output watched.
func TestBenchStepsStreamJSON(t *testing.T) {
	code, out, errs := runBench(t, "steps-stream", "--json", "--scale", "0.002", "--rounds", "2", "--dir", t.TempDir())
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 1 {
		t.Fatalf("%d lines, want 1:\n%s", len(lines), out)
	}
	var r struct {
		Scenario                string
		Figure, Baseline, Ratio float64
		Target                  float64
		Met                     bool
		Runs, Rounds            int
		Ratios                  []float64
		Extra                   map[string]float64
	}
	if err := json.Unmarshal([]byte(lines[0]), &r); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, lines[0])
	}
	if r.Scenario != "steps-stream" || r.Target != 0.9 || r.Runs != 1 || r.Rounds != 2 || len(r.Ratios) != 2 {
		t.Errorf("scenario %q, target %v, runs %d, rounds %d, ratios %v; want steps-stream, 0.9, 1, 2, two", r.Scenario, r.Target, r.Runs, r.Rounds, r.Ratios)
	}
	if r.Figure <= 0 || r.Baseline <= 0 || r.Ratio != r.Figure/r.Baseline || r.Met != (r.Ratio >= r.Target) {
		t.Errorf("figure %v, baseline %v, ratio %v, met %v", r.Figure, r.Baseline, r.Ratio, r.Met)
	}
	for _, k := range []string{"cpu_us_per_step", "baseline_cpu_us_per_step", "cpu_ratio", "commits_per_step", "baseline_commits_per_step",
		"bytes_written_per_step", "baseline_bytes_written_per_step", "chunks_per_step", "outputs", "ratio_median"} {
		if !(r.Extra[k] > 0) {
			t.Errorf("extra %s = %v, want > 0", k, r.Extra[k])
		}
	}
	if r.Extra["chunks_per_step"] != 8 || r.Extra["baseline_chunks_per_step"] != 0 {
		t.Errorf("chunks per step %v, baseline %v; want 8 and 0", r.Extra["chunks_per_step"], r.Extra["baseline_chunks_per_step"])
	}
}
