package server

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// ---- 1. many watchers, dropped connections ----

// TestWatchersSurviveDroppedConnections: runs append while 50 watchers follow
// them with client.Watch over TCP connections that are cut at random events;
// every watcher ends with exactly the stored log, and every stream the
// server sent passes the validator.
func TestWatchersSurviveDroppedConnections(t *testing.T) {
	const runs, steps, watchers = 3, 200, 50
	rng := rand.New(rand.NewPCG(watchSeedOf(t), 1))
	node := openWatchNode(t, Config{Tools: fixtures(), Models: scriptedModels(readsScript(steps, 1)...)})
	addr := serveWatchTCP(t, node, "127.0.0.1:0")

	var ids []string
	for i := range runs {
		ids = append(ids, startWatchedRun(t, node, fmt.Sprintf("r%d", i), readsContract(steps)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), watchTestBound)
	defer cancel()
	ws := make([]*dropWatcher, watchers)
	var wg sync.WaitGroup
	for i := range ws {
		w := &dropWatcher{runID: ids[i%runs]}
		for range 1 + rng.IntN(4) {
			w.drops = append(w.drops, 1+rng.IntN(4*steps-100))
		}
		slices.Sort(w.drops)
		w.drops = slices.Compact(w.drops)
		ws[i] = w
		wg.Go(func() { w.run(ctx, addr) })
	}
	wg.Wait()

	logs := map[string][]*reinv1.Event{}
	for _, id := range ids {
		wantRunStatus(t, node.Store, id, reinv1.RunStatus_RUN_STATUS_COMPLETED)
		logs[id] = watchLog(t, node.Store, id)
		if len(logs[id]) != 4*steps {
			t.Fatalf("run %s has %d events, want %d", id, len(logs[id]), 4*steps)
		}
	}
	drops, streams := 0, 0
	for i, w := range ws {
		if err := w.check(logs[w.runID]); err != nil {
			t.Errorf("watcher %d (drops at %v): %v", i, w.drops, err)
			continue
		}
		// Every cut but one that lands after the run's last event (the
		// stream had ended OK) must be followed by a new dial.
		if w.dropped == 0 || w.dials.Load() < int64(w.dropped) {
			t.Errorf("watcher %d: cut %d of %d connections, dialled %d times", i, w.dropped, len(w.drops), w.dials.Load())
		}
		drops += w.dropped
		streams += len(w.rec.records())
	}
	t.Logf("%d watchers of %d runs: %d connections cut, %d streams opened", watchers, runs, drops, streams)
}

// ---- 2. a server restart ----

// TestWatchersResumeAcrossRestart: watchers follow runs over TCP; the node
// shuts down mid-run (their streams end with Unavailable, said by the server
// itself); a new node opens the same file with Resume on the same address;
// the watchers resume and end with the whole logs, and the runs complete.
func TestWatchersResumeAcrossRestart(t *testing.T) {
	const runs, steps, watchers = 3, 150, 12
	path := filepath.Join(t.TempDir(), "rein.db")
	models := scriptedModels(readsScript(steps, 2)...)
	first, err := Open(context.Background(), Config{Store: boltAt(t, path), Tools: fixtures(), Models: models})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(first.Close)
	addr := serveWatchTCP(t, first, "127.0.0.1:0")
	var ids []string
	for i := range runs {
		ids = append(ids, startWatchedRun(t, first, fmt.Sprintf("r%d", i), readsContract(steps)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), watchTestBound)
	defer cancel()
	ws := make([]*dropWatcher, watchers)
	var wg sync.WaitGroup
	for i := range ws {
		w := &dropWatcher{runID: ids[i%runs]}
		ws[i] = w
		wg.Go(func() { w.run(ctx, addr) })
	}

	// Every watcher is streaming and every run is well under way.
	pollUntil(t, 20*time.Second, "watchers and runs did not get going", func() bool {
		for _, w := range ws {
			if w.seen.Load() < 20 {
				return false
			}
		}
		for _, id := range ids {
			if st, err := first.Store.Load(ctx, id); err != nil || st.Version < 40 {
				return false
			}
		}
		return true
	})
	for _, id := range ids {
		st, err := first.Store.Load(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if st.Status != reinv1.RunStatus_RUN_STATUS_RUNNING {
			t.Fatalf("run %s is already %v before the restart; the test needs runs mid-way", id, st.Status)
		}
		t.Logf("at shutdown: run %s at version %d of %d", id, st.Version, 4*steps)
	}
	down := time.Now()
	sctx, scancel := context.WithTimeout(context.Background(), time.Second)
	first.Shutdown(sctx)
	scancel()
	t.Logf("first node shut down in %v", time.Since(down))

	second := openWatchNode(t, Config{Store: boltAt(t, path), Tools: fixtures(), Models: models, Resume: true})
	for _, id := range ids {
		st, err := second.Store.Load(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if st.Version >= uint64(4*steps) {
			t.Fatalf("run %s completed before the restart; the test needs runs mid-way", id)
		}
	}
	if got := serveWatchTCP(t, second, addr); got != addr {
		t.Fatalf("second node listens on %s, want %s", got, addr)
	}
	up := time.Now()
	wg.Wait()
	t.Logf("watchers done %v after the second node listened", time.Since(up))

	for _, id := range ids {
		wantRunStatus(t, second.Store, id, reinv1.RunStatus_RUN_STATUS_COMPLETED)
	}
	for i, w := range ws {
		log := watchLog(t, second.Store, w.runID)
		if err := w.check(log); err != nil {
			t.Errorf("watcher %d: %v", i, err)
			continue
		}
		recs := w.rec.records()
		if len(recs) < 2 {
			t.Errorf("watcher %d opened %d streams; it should have reconnected", i, len(recs))
			continue
		}
		// The stream cut by the shutdown ended with the server's own
		// Unavailable; every failed attempt until the second node was up
		// is Unavailable too; the last stream ended OK.
		if st := status.Convert(recs[0].Err); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "shutting down") {
			t.Errorf("watcher %d: the stream open at shutdown ended with %v, want the server's Unavailable", i, recs[0].Err)
		}
		for j, r := range recs[:len(recs)-1] {
			if code := status.Code(r.Err); code != codes.Unavailable {
				t.Errorf("watcher %d: stream %d ended with %v (%v), want Unavailable", i, j, code, r.Err)
			}
		}
		if last := recs[len(recs)-1]; !last.Ended || last.Err != nil {
			t.Errorf("watcher %d: the last stream ended with %v, want OK", i, last.Err)
		}
	}
}

// watchTestBound bounds a watch test's streaming: far above what it takes
// (a few seconds), so that a loaded 2-core machine under -race does not
// fail it, and still a bound on a hang.
const watchTestBound = 2 * time.Minute
