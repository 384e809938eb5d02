//go:build reinbench

package bench

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"
	"testing"
	"time"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store/bolt"
	"github.com/reinhq/rein/server"
)

// serveEnv, set to a store's path, makes the test binary a rein server for
// the watch scenario's memory measurement instead of running the tests: the
// bench package cannot run the rein binary's `serve`, so it serves the same
// node the way `rein serve` does.
const serveEnv = "REIN_BENCH_TEST_SERVE_DB"

func TestMain(m *testing.M) {
	if db := os.Getenv(serveEnv); db != "" {
		os.Exit(serveForTest(db))
	}
	os.Exit(m.Run())
}

// serveForTest serves db on a free loopback port, logs the address like
// `rein serve` and stops gracefully on SIGINT or SIGTERM.
func serveForTest(db string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	st, err := bolt.Open(db, bolt.Options{})
	if err != nil {
		log.Error("open", "error", err)
		return 1
	}
	node, err := server.Open(ctx, server.Config{Store: st, Resume: true, Logger: log})
	if err != nil {
		log.Error("open", "error", err)
		return 1
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		node.Close()
		log.Error("listen", "error", err)
		return 1
	}
	log.Info("rein serving", "addr", lis.Addr().String(), "db", db)
	served := make(chan error, 1)
	go func() { served <- node.GRPC.Serve(lis) }()
	select {
	case <-ctx.Done():
	case err := <-served:
		node.Close()
		log.Error("serve", "error", err)
		return 1
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	node.Shutdown(sctx)
	<-served
	return 0
}

// testServer is a WatchServer that starts this test binary as a server.
func testServer(t *testing.T) func(db string) (*exec.Cmd, error) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return func(db string) (*exec.Cmd, error) {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), serveEnv+"="+db)
		return cmd, nil
	}
}

// TestWatchSmall runs the watch scenario at a tiny scale (20 streams, 4
// runs) and checks that the result is well formed and that every stream got
// every event once. It never asserts a speed, a latency or a size.
func TestWatchSmall(t *testing.T) {
	dir := t.TempDir()
	r, err := Watch(context.Background(), Options{Scale: 0.002, Rounds: 2, Dir: dir, Backend: boltBackend(), WatchServer: testServer(t)})
	if err != nil {
		t.Fatal(err)
	}
	if r.Scenario != "watch" || r.Unit != "deliveries/s" {
		t.Errorf("scenario %q unit %q", r.Scenario, r.Unit)
	}
	if !(r.Figure > 0) || !(r.Baseline > 0) {
		t.Fatalf("figure %v, baseline %v; want both > 0", r.Figure, r.Baseline)
	}
	if want := r.Figure / r.Baseline; math.Abs(r.Ratio-want) > 1e-9*want {
		t.Errorf("ratio %v, want figure/baseline = %v", r.Ratio, want)
	}
	if r.Rounds != 2 || len(r.Figures) != 2 || len(r.Baselines) != 2 || len(r.Ratios) != 2 {
		t.Errorf("rounds %d, figures %v, baselines %v, ratios %v; want 2 of each", r.Rounds, r.Figures, r.Baselines, r.Ratios)
	}
	x := r.Extra
	for k, want := range map[string]float64{
		"streams": 20, "runs": 4, "events_per_run": 20, "paced_events_per_run": 10, "deliveries": 20 * 20,
		"gaps": 0, "duplicates": 0, "baseline_gaps": 0, "baseline_duplicates": 0,
	} {
		if got, ok := x[k]; !ok || got != want {
			t.Errorf("extra %s = %v (present %v), want %v", k, got, ok, want)
		}
	}
	if r.Runs != 4 || r.Events != 4*20 {
		t.Errorf("runs %d, events %d; want 4 and 80", r.Runs, r.Events)
	}
	for _, side := range []string{"", "baseline_"} {
		p50, p99 := x[side+"p50_ms"], x[side+"p99_ms"]
		if !(p50 >= 0) || !(p99 >= p50) || !(x[side+"max_ms"] >= p99) {
			t.Errorf("%slatency p50 %v, p99 %v, max %v; want 0 ≤ p50 ≤ p99 ≤ max", side, p50, p99, x[side+"max_ms"])
		}
	}
	if !(x["paced_deliveries_per_s"] > 0) || !(x["baseline_paced_deliveries_per_s"] > 0) {
		t.Errorf("paced rates %v, %v; want both > 0", x["paced_deliveries_per_s"], x["baseline_paced_deliveries_per_s"])
	}
	rss := x["rss_idle_mib"]
	if runtime.GOOS == "linux" && !(rss > 0) {
		t.Errorf("rss_idle_mib = %v, want the server's resident memory", rss)
	}
	t.Logf("idle server: %.1f MiB with %v streams (%.1f MiB before them)", rss, x["streams"], x["rss_before_streams_mib"])
	// Met needs every target.
	want := r.Ratio >= r.Target && x["p99_ratio"] <= watchP99Target && rss > 0 && rss <= watchRSSTargetMiB
	if r.Met != want {
		t.Errorf("met %v; want %v (ratio %v, p99 ratio %v, rss %v)", r.Met, want, r.Ratio, x["p99_ratio"], rss)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("%d files left in the temporary directory", len(left))
	}
}

// TestWatchCountsGapsAndDuplicates drives the streams from a side that
// publishes one event twice and skips another: every stream must count one
// duplicate and one gap, and still finish.
func TestWatchCountsGapsAndDuplicates(t *testing.T) {
	p := newWatchPlan(2, 6, 2, 3, time.Millisecond, 5)
	b := newBroadcaster(p)
	dup, skip := p.phases[1].first+1, p.phases[2].first+2
	side := startBroadcaster(t, b, func(run int, ev *reinv1.Event) {
		switch ev.GetSequence() {
		case skip:
			return
		case dup:
			b.publish(run, ev)
		}
		b.publish(run, ev)
	})
	w, err := driveWatch(context.Background(), p, side)
	if err != nil {
		t.Fatal(err)
	}
	if w.gaps != p.streams || w.dups != p.streams {
		t.Errorf("gaps %d, duplicates %d; want %d of each", w.gaps, w.dups, p.streams)
	}
	if got, want := w.unpaced.m.units, float64(p.streams*(p.phases[2].events-1)); got != want {
		t.Errorf("%v unpaced deliveries, want %v", got, want)
	}
}

// startBroadcaster serves b on loopback TCP, committing through publish.
func startBroadcaster(t *testing.T, b *broadcaster, publish func(run int, ev *reinv1.Event)) watchSide {
	t.Helper()
	side, stop, err := serveBroadcaster(b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	side.commit = func(_ context.Context, run int, ev *reinv1.Event) (time.Time, error) {
		now := time.Now()
		publish(run, ev)
		return now, nil
	}
	return side
}

func TestWatchPlanSequences(t *testing.T) {
	p := newWatchPlan(3, 2, 1, 4, time.Second, 5)
	if p.streams != 3 {
		t.Errorf("%d streams, want at least one per run (3)", p.streams)
	}
	want := []watchPhase{{events: 1, first: 2}, {events: 4, first: 3, interval: time.Second}, {events: 5, first: 7}}
	if fmt.Sprint(p.phases) != fmt.Sprint(want) {
		t.Errorf("phases %v, want %v", p.phases, want)
	}
	if p.last() != 11 {
		t.Errorf("last %d, want 11", p.last())
	}
	for r, evs := range p.evs {
		if len(evs) != 10 {
			t.Fatalf("run %d has %d events, want 10", r, len(evs))
		}
		for i, ev := range evs {
			if ev.GetRunId() != p.ids[r] || ev.GetSequence() != uint64(i+2) {
				t.Errorf("run %d event %d is %s/%d", r, i, ev.GetRunId(), ev.GetSequence())
			}
		}
	}
}

func TestWatchIdleRSSWithoutServer(t *testing.T) {
	rss, err := watchIdleRSS(context.Background(), Options{}, boltBackend(), newWatchPlan(1, 1, 1, 1, time.Second, 1), t.TempDir())
	if err != nil || rss.idle != -1 {
		t.Errorf("rss %+v, err %v; want -1 and no error", rss, err)
	}
}
