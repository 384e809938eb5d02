//go:build reinbench

package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reinhq/rein/cmd/rein-bench/bench"
	"github.com/reinhq/rein/internal/etcdtest"
)

// benchLines decodes the bench's --json lines and checks each names the
// scenario it should, with a positive figure and baseline.
func benchLines(t *testing.T, out string, want ...string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d (%v):\n%s", len(lines), len(want), want, out)
	}
	for i, line := range lines {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("line %d is not JSON: %v\n%s", i, err, line)
		}
		fig, _ := r["figure"].(float64)
		base, _ := r["baseline"].(float64)
		if r["scenario"] != want[i] || fig <= 0 || base <= 0 {
			t.Errorf("line %d: scenario %v, figure %v, baseline %v; want %s with both positive", i, r["scenario"], fig, base, want[i])
		}
	}
}

// TestBenchEtcdOwn: --store etcd without --etcd starts an etcd of its own
// from the pinned binary, runs every scenario etcd has (all means those) at
// a tiny scale, and stops it. The steps scenarios' baseline puts the same
// bytes as the store, and they report the ratio to the events alone too.
func TestBenchEtcdOwn(t *testing.T) {
	bin := etcdtest.Binary(t)
	code, out, errs := runBench(t, "all", "--store", "etcd", "--etcd-bin", bin, "--json", "--scale", "0.002", "--rounds", "1", "--dir", t.TempDir())
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	benchLines(t, out, "append", "steps", "steps-runs", "fold")
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r struct {
			Scenario string
			Figure   float64
			Extra    map[string]float64
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		_, ok := r.Extra["events_baseline"]
		if steps := strings.HasPrefix(r.Scenario, "steps"); ok != steps ||
			steps && (r.Extra["events_baseline"] <= 0 || r.Extra["events_ratio"] != r.Figure/r.Extra["events_baseline"]) {
			t.Errorf("%s: the events alone %v (ratio %v); want them on the steps scenarios only", r.Scenario, r.Extra["events_baseline"], r.Extra["events_ratio"])
		}
	}
}

// TestBenchEtcdCluster: with --etcd the bench runs on that cluster, under a
// prefix of its own below --etcd-prefix, which it deletes at the end.
func TestBenchEtcdCluster(t *testing.T) {
	c := etcdtest.Start(t, 1)
	code, out, errs := runBench(t, "fold", "--store", "etcd", "--etcd", c.Endpoint(0), "--etcd-prefix", "/mine/",
		"--json", "--scale", "0.001", "--rounds", "1", "--dir", t.TempDir())
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	benchLines(t, out, "fold")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.Client().Get(ctx, "/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 0 {
		t.Errorf("the bench left %d keys on the cluster; want its prefix deleted", resp.Count)
	}
}

// TestBenchEtcdRefused: the etcd flags that do not fit are refused before
// anything runs, and an etcd that cannot be had fails as unavailable,
// saying what to do.
func TestBenchEtcdRefused(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"append", "--etcd", "127.0.0.1:1"}, exitUsage, "--etcd needs --store etcd"},
		{[]string{"append", "--etcd-bin", "/bin/true"}, exitUsage, "--etcd-bin needs --store etcd"},
		{[]string{"append", "--store", "etcd", "--etcd", "127.0.0.1:1", "--etcd-bin", "/bin/true"}, exitUsage, "one or the other"},
		{[]string{"watch", "--store", "etcd", "--etcd", "127.0.0.1:1"}, exitUsage, "bolt only"},
		{[]string{"steps-stream", "--store", "etcd", "--etcd", "127.0.0.1:1"}, exitUsage, "bench steps-stream runs on --store bolt only"},
		{[]string{"append", "--store", "etcd", "--etcd-prefix", "/x"}, exitUsage, "--etcd-prefix needs --etcd"},
		{[]string{"append", "--store", "etcd", "--etcd-bin", filepath.Join(dir, "no-etcd")}, exitUnavailable, "no-etcd"},
		{[]string{"append", "--store", "etcd", "--etcd", "127.0.0.1:1", "--etcd-timeout", "500ms"}, exitUnavailable, "did not answer"},
	} {
		code, out, errs := runBench(t, append(tc.args, "--scale", "0.001", "--rounds", "1", "--dir", dir)...)
		if code != tc.code || out != "" || !strings.Contains(errs, tc.says) {
			t.Errorf("bench %v: exit %d, stdout %q, stderr %q; want %d, nothing, and %q", tc.args, code, out, errs, tc.code, tc.says)
		}
	}
}

// TestBenchFailover: rein-bench failover starts three replicas of this
// binary on an etcd of its own, kills each in turn and reports the time to
// their runs carried on and the runs a second at 1, 2 and 3 replicas. The
// twin: with --etcd naming no cluster it fails, saying etcd is unavailable.
func TestBenchFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an etcd and three replicas")
	}
	bin := etcdtest.Binary(t)
	code, out, errs := runBench(t, "failover", "--etcd-bin", bin, "--json", "--scale", "0.05", "--dir", t.TempDir())
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var r struct {
		Scenario string             `json:"scenario"`
		Figure   float64            `json:"figure"`
		Figures  []float64          `json:"figures"`
		Extra    map[string]float64 `json:"extra"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if r.Scenario != "failover" || r.Figure <= 0 || len(r.Figures) != 2 || r.Extra["runs_per_s_1"] <= 0 || r.Extra["runs_per_s_3"] <= 0 {
		t.Fatalf("bench failover = %s", out)
	}
	code, _, errs = runBench(t, "failover", "--etcd", "127.0.0.1:1", "--etcd-timeout", "1s", "--dir", t.TempDir())
	if code == exitOK || !strings.Contains(errs, "etcd") {
		t.Fatalf("bench failover on no cluster: exit %d, %s", code, errs)
	}
}

// TestEtcdScenariosOfAGroup: on etcd, steps (a group) runs the members etcd
// has and leaves steps-stream out; steps-stream by its name is refused.
func TestEtcdScenariosOfAGroup(t *testing.T) {
	todo, _ := bench.Lookup("steps")
	got, err := etcdScenarios("steps", todo)
	if err != nil || len(got) != 2 || got[0].Name != "steps" || got[1].Name != "steps-runs" {
		t.Errorf("etcdScenarios(steps) = %v, %v; want steps and steps-runs", got, err)
	}
	todo, _ = bench.Lookup("steps-stream")
	if got, err := etcdScenarios("steps-stream", todo); err == nil || !strings.Contains(err.Error(), "bolt only") {
		t.Errorf("etcdScenarios(steps-stream) = %v, %v; want it refused", got, err)
	}
}

// TestBenchScale: rein-bench scale starts one, then two replicas of this
// binary on an etcd of its own, seeds runs paused for approval, measures
// each replica idle and under a workload sent to all but the observer, and
// the observer before and after finished runs fill the prefix. It asserts
// what was measured, not how fast: every workload step is counted on the
// replicas that drove it, none on the observer, which received bytes from
// etcd idle (rein_etcd_received_bytes_total). The twin: with --etcd naming no
// cluster it fails, saying etcd is unavailable.
func TestBenchScale(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an etcd and three replicas, for about a minute")
	}
	bin := etcdtest.Binary(t)
	code, out, errs := runBench(t, "scale", "--etcd-bin", bin, "--json", "--scale", "0.01", "--replicas", "1,2", "--dir", t.TempDir())
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var r bench.ScaleResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if r.Scenario != "scale" || !(r.Figure > 0) || r.Baseline != 1.05 || len(r.Groups) != 2 || r.LookOver == nil {
		t.Fatalf("bench scale = %s", out)
	}
	for _, g := range r.Groups {
		if len(g.PerReplica) != g.Replicas || g.Paused != 10 || g.Steps < 40 || !(g.CPUMsPerStep > 0) || !(g.AloneCPUMsPerStep > 0) || !(g.IdleSeconds >= 8) {
			t.Errorf("%d replicas: %+v", g.Replicas, g)
		}
		for i, x := range g.PerReplica {
			if observer := g.Replicas > 1 && i == 0; x.Observer != observer || observer != (x.Steps == 0) || !(x.IdleEtcdKBPerS > 0) {
				t.Errorf("%d replicas, %s: observer %v, %v steps, idle %v KB/s from etcd; want only replica-0 of two the observer, driving nothing",
					g.Replicas, x.Name, x.Observer, x.Steps, x.IdleEtcdKBPerS)
			}
		}
	}
	// The observer may receive nothing from etcd while others work: that
	// is what rein aims at (its keep-alives come every third of a TTL).
	if o := r.Groups[1].Observer; o == nil || o.StepsElsewhere < 40 || !(o.BusyEtcdKB >= 0) || !(o.CPURatio > 0) || r.Groups[0].Observer != nil {
		t.Errorf("observers %+v and %+v; want the second group's only", r.Groups[0].Observer, o)
	}
	if lo := r.LookOver; lo.Replicas != 2 || lo.Finished != 1000 || !(lo.BeforeEtcdKBPerS > 0) || !(lo.CPURatio > 0) {
		t.Errorf("look-over %+v", lo)
	}
	code, _, errs = runBench(t, "scale", "--etcd", "127.0.0.1:1", "--etcd-timeout", "1s", "--dir", t.TempDir())
	if code == exitOK || !strings.Contains(errs, "etcd") {
		t.Fatalf("bench scale on no cluster: exit %d, %s", code, errs)
	}
}
