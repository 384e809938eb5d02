//go:build reinbench

package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/store/bolt"
	"github.com/reinhq/rein/internal/tools"
)

// boltBackend is the bolt store as the rein binary gives it to the bench.
// Only the tests name a storage engine; the package does not.
func boltBackend() Backend {
	return Backend{
		Name: "bolt",
		Open: func(path string, noSync bool) (Store, error) {
			return bolt.Open(path, bolt.Options{NoSync: noSync})
		},
		OpenOutbox: func(path string, outbox store.Outbox) (Store, error) {
			return bolt.Open(path, bolt.Options{Outbox: outbox})
		},
		Size:    bolt.Size,
		Ceiling: bolt.Ceiling{},
	}
}

// small is the options of a quick run on the bolt backend.
func small(t *testing.T, scale float64) Options {
	return Options{Scale: scale, Rounds: 2, Dir: t.TempDir(), Backend: boltBackend()}
}

// TestScenariosNeedABackend: a scenario given no backend, or one without
// the ceiling it compares against, refuses to run and says why.
func TestScenariosNeedABackend(t *testing.T) {
	noCeiling := boltBackend()
	noCeiling.Name, noCeiling.Ceiling = "plain", nil
	for _, sc := range Scenarios() {
		if sc.Name == "mcp" {
			continue // it measures a rein serve process, on that process's own store
		}
		t.Run(sc.Name, func(t *testing.T) {
			_, err := sc.Run(context.Background(), Options{Scale: 0.001, Rounds: 1, Dir: t.TempDir()})
			if err == nil || !strings.Contains(err.Error(), "no storage backend") {
				t.Errorf("without a backend: %v, want an error naming the missing backend", err)
			}
		})
	}
	for _, name := range []string{"append", "steps", "steps-runs", "fold"} {
		scs, _ := Lookup(name)
		_, err := scs[0].Run(context.Background(), Options{Scale: 0.001, Rounds: 1, Dir: t.TempDir(), Backend: noCeiling})
		if err == nil || !strings.Contains(err.Error(), "plain backend offers no ceiling") {
			t.Errorf("%s without a ceiling: %v, want an error naming the backend", name, err)
		}
	}
}

// TestBackendTarget: the scenarios measured against a ceiling take the
// target their backend sets, and their own when it sets none.
func TestBackendTarget(t *testing.T) {
	for _, c := range []struct {
		target float64
		want   map[string]float64
	}{
		{0, map[string]float64{"append": 0.7, "steps-runs": 0.8, "fold": 0.8}},
		{0.65, map[string]float64{"append": 0.65, "steps-runs": 0.65, "fold": 0.65}},
	} {
		for name, want := range c.want {
			o := small(t, 0.001)
			o.Rounds, o.Runs, o.Backend.Target = 1, 2, c.target
			scs, _ := Lookup(name)
			r, err := scs[0].Run(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			if r.Target != want || r.Met != (r.Ratio >= want) {
				t.Errorf("%s on a backend with target %v: target %v (met %v at %.2f), want %v", name, c.target, r.Target, r.Met, r.Ratio, want)
			}
		}
	}
}

// TestCeilingLog exercises the ceiling as the bench uses it, at a small
// size: puts from one goroutine and from several at once land in their
// runs' logs, in order, and Scan reads them back.
func TestCeilingLog(t *testing.T) {
	c := boltBackend().Ceiling
	path := filepath.Join(t.TempDir(), "ceiling.db")
	ids := []string{"run_a", "run_b", "run_c", "run_d"}
	put, closeLog, err := c.CreateLog(path, ids)
	if err != nil {
		t.Fatal(err)
	}
	const perRun = 50
	var wg sync.WaitGroup
	errs := make(chan error, len(ids))
	for run := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := uint64(1); seq <= perRun; seq += 2 {
				data := [][]byte{[]byte(ids[run] + "-" + string(rune('0'+seq%10))), []byte(ids[run])}
				if err := put([]int{run, run}, []uint64{seq, seq + 1}, data); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if err := closeLog(); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		var seqs []uint64
		err := c.Scan(path, id, func(seq uint64, data []byte) error {
			if !strings.HasPrefix(string(data), id) {
				t.Errorf("%s event %d holds %q", id, seq, data)
			}
			seqs = append(seqs, seq)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(seqs) != perRun || seqs[0] != 1 || seqs[perRun-1] != perRun {
			t.Errorf("%s: sequences %v, want 1…%d", id, seqs, perRun)
		}
	}
	// The twin: an unknown run is an error, and fn's error stops the scan.
	if err := c.Scan(path, "run_nope", func(uint64, []byte) error { return nil }); err == nil {
		t.Error("Scan of an unknown run succeeded")
	}
	boom := errors.New("boom")
	if err := c.Scan(path, ids[0], func(uint64, []byte) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("Scan returned %v, want fn's error", err)
	}
}

// TestStepsRunsSmall runs the steps-runs scenario with 3 runs of 5 steps and
// checks its counts and its CPU and bytes figures. It never asserts a speed.
func TestStepsRunsSmall(t *testing.T) {
	o := small(t, 0.01)
	o.Runs = 3
	r, err := StepsRuns(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	x := r.Extra
	// 5 tool calls and the final answer per run.
	if r.Scenario != "steps-runs" || r.Runs != 3 || x["steps"] != 18 || x["steps_per_run"] != 6 {
		t.Errorf("scenario %q, runs %d, steps %v (%v a run); want steps-runs, 3, 18, 6", r.Scenario, r.Runs, x["steps"], x["steps_per_run"])
	}
	for _, k := range []string{"cpu_us_per_step", "baseline_cpu_us_per_step", "commits", "commits_per_step"} {
		if !(x[k] > 0) {
			t.Errorf("extra %s = %v, want > 0", k, x[k])
		}
	}
	if _, ok := x["baseline_bytes_written_per_commit"]; ok {
		t.Error("steps-runs reports the baseline's bytes per commit, which its grouped ceiling does not count")
	}
}

// BenchmarkStepsFigure is the steps scenario's figure alone (REIN_BENCH_RUNS
// runs at once, 1 unless set, of REIN_BENCH_STEPS tool-call steps, 500 unless
// set, through the engine on a durable bolt store; with REIN_BENCH_NOSYNC=1
// without fsync, so that the
// profile shows the CPU the step path costs rather than the waits), for a
// CPU profile of the step path:
//
//	go test ./cmd/rein-bench/bench -run '^$' -bench StepsFigure -benchtime 3x -cpuprofile /tmp/steps.pprof
func BenchmarkStepsFigure(b *testing.B) {
	calls := 500
	if v, err := strconv.Atoi(os.Getenv("REIN_BENCH_STEPS")); err == nil && v > 0 {
		calls = v
	}
	runs := 1
	if v, err := strconv.Atoi(os.Getenv("REIN_BENCH_RUNS")); err == nil && v > 0 {
		runs = v
	}
	be := boltBackend()
	if os.Getenv("REIN_BENCH_NOSYNC") == "1" {
		be.Open = func(path string, _ bool) (Store, error) { return bolt.Open(path, bolt.Options{NoSync: true}) }
	}
	contracts := stepsContracts(calls, runs)
	fixtures := tools.NewFixtures(map[string][]tools.FixtureResult{
		"read_file": {{Output: structpb.NewStringValue(fixtureText())}},
	})
	dir := b.TempDir()
	steps, cpu := 0.0, time.Duration(0)
	for i := 0; b.Loop(); i++ {
		fr, err := stepsFigure(context.Background(), be, filepath.Join(dir, fmt.Sprintf("figure-%d.db", i)), contracts, fixtures, false, false, nil)
		if err != nil {
			b.Fatal(err)
		}
		steps += fr.m.units
		cpu += fr.cpu
	}
	b.ReportMetric(steps/b.Elapsed().Seconds(), "steps/s")
	b.ReportMetric(float64(cpu.Microseconds())/steps, "cpu-µs/step")
}

// With Traces the steps scenario builds the runs' spans (one chat and one
// execute_tool span a step, and the runs' invoke_agent spans), so its
// figure includes what tracing costs; without, it builds none.
func TestStepsRunsTraced(t *testing.T) {
	o := small(t, 0.01)
	o.Runs = 3
	o.Traces = true
	r, err := StepsRuns(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	// 18 steps: 18 chat spans, 15 execute_tool spans, 3 invoke_agent spans, in each of the rounds.
	if got := r.Extra["spans"]; got < 36 {
		t.Errorf("%v spans built, want at least the 36 of one round", got)
	}
	o.Traces = false
	r, err = StepsRuns(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Extra["spans"]; ok {
		t.Error("spans counted without Traces")
	}
}
