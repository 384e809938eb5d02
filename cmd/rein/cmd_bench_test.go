package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

func runBench(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Run(context.Background(), append([]string{"bench"}, args...), strings.NewReader(""), &out, &errb)
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
	for _, name := range []string{`"nope"`, "append", "steps", "fold", "all"} {
		if !strings.Contains(errs, name) {
			t.Errorf("stderr %q does not name %s", errs, name)
		}
	}
}

func TestBenchBadFlags(t *testing.T) {
	for _, args := range [][]string{{}, {"append", "--scale", "0"}, {"append", "--rounds", "-1"}, {"append", "steps"}} {
		if code, _, _ := runBench(t, args...); code != exitUsage {
			t.Errorf("bench %v: exit %d, want %d", args, code, exitUsage)
		}
	}
}

func TestBenchAllJSON(t *testing.T) {
	code, out, errs := runBench(t, "all", "--json", "--scale", "0.002", "--rounds", "1", "--dir", t.TempDir())
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := []string{"append", "steps", "fold"}
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
