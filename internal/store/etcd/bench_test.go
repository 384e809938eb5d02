//go:build reinbench

package etcd

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/reinhq/rein/cmd/rein-bench/bench"
	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/store/seal"
	"github.com/reinhq/rein/internal/webhook"
)

// BenchmarkAppend measures durable appends of 3-event steps (etcd with
// fsync, on this machine's disk) by runs goroutines, one per run, each
// waiting for its append before the next: runs=1 is one append at a time,
// runs=64 many runs' appends sharing Txns (batch.go). Each has a twin
// "raw": the same bytes (the sealed events and snapshot) put by a bare Txn
// per append with the one compare, pipelined on one connection, none of
// the store's work (read, fold, seal, cache, batching).
//
// The third, "outbox", is the store opened with the webhook outbox and
// its tenant holding a subscription that chooses none of the events: what
// matching them costs an append (a compare of the tenant's
// P webhook-rev key in its Txn, the match on the cached subscriptions).
func BenchmarkAppend(b *testing.B) {
	cli := durableEtcdClient(b)
	for _, runs := range []int{1, 8, 64} {
		for _, mode := range []string{"store", "outbox", "raw"} {
			b.Run(fmt.Sprintf("runs=%d/%s", runs, mode), func(b *testing.B) { benchAppend(b, cli, runs, mode) })
		}
	}
}

// durableEtcd starts a one-member etcd with fsync in a temporary
// directory, and a client of it; both end with the benchmark.
func durableEtcd(b *testing.B) (*embed.Etcd, *clientv3.Client) {
	b.Helper()
	e, err := startEtcd(b.TempDir(), freeURL(), freeURL(), true)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(e.Close)
	cli, err := newClient(e)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cli.Close() })
	return e, cli
}

// durableEtcdClient is durableEtcd's client.
func durableEtcdClient(b *testing.B) *clientv3.Client {
	b.Helper()
	_, cli := durableEtcd(b)
	return cli
}

const benchEventsPerAppend = 3

var benchRound atomic.Int64

func benchAppend(b *testing.B, cli *clientv3.Client, runs int, mode string) {
	ctx := b.Context()
	raw := mode == "raw"
	var opts Options
	if mode == "outbox" {
		opts.Outbox = (&webhook.Matcher{}).Outbox()
	}
	// A prefix of its own each time: the testing package calls a benchmark
	// more than once (b.N = 1 first).
	s, err := Open(ctx, cli, fmt.Sprintf("/bench/%s/%d/", b.Name(), benchRound.Add(1)), opts)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if mode == "outbox" {
		if err := s.CreateWebhook(ctx, &reinv1.Webhook{Name: "none", Tenant: "acme", EventKinds: []string{"tool_changed"}}); err != nil {
			b.Fatal(err)
		}
	}
	ids := make([]string, runs)
	for i := range ids {
		ids[i] = fmt.Sprintf("run-%04d", i)
		if _, _, err := s.Create(ctx, started(ids[i])); err != nil {
			b.Fatal(err)
		}
	}
	// Each run's appends, built and sealed before the clock starts.
	per := (b.N + runs - 1) / runs
	appends := make([][][]*reinv1.Event, runs)
	for i, id := range ids {
		appends[i] = make([][]*reinv1.Event, per)
		for j := range per {
			appends[i][j] = steps(id, uint64(2+j*benchEventsPerAppend), benchEventsPerAppend)
		}
	}
	var put func(run, j int) error
	if raw {
		put = rawAppend(b, s, ids, appends)
	} else {
		put = func(run, j int) error {
			_, err := s.Append(ctx, ids[run], uint64(1+j*benchEventsPerAppend), appends[run][j])
			return err
		}
	}
	b.ResetTimer()
	var wg sync.WaitGroup
	for run := range runs {
		wg.Go(func() {
			for j := range per {
				if err := put(run, j); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	total := float64(per * runs)
	b.ReportMetric(total/b.Elapsed().Seconds(), "appends/s")
	b.ReportMetric(total*benchEventsPerAppend/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(0, "ns/op")
}

// rawAppend is put for the raw twin: the sealed events and each append's
// snapshot (the fold of the run so far, made before the clock starts) in a
// Txn that compares the snapshot's ModRevision, as the store's does.
func rawAppend(b *testing.B, s *Store, ids []string, appends [][][]*reinv1.Event) func(run, j int) error {
	type sealed struct {
		events [][]byte
		snap   []byte
	}
	data := make([][]sealed, len(ids))
	revs := make([]int64, len(ids))
	for i, id := range ids {
		cur, err := s.readRun(b.Context(), id)
		if err != nil {
			b.Fatal(err)
		}
		revs[i] = cur.snapRev
		st := cur.st
		data[i] = make([]sealed, len(appends[i]))
		for j, evs := range appends[i] {
			var err error
			if data[i][j].events, err = sealEvents("bench", evs); err != nil {
				b.Fatal(err)
			}
			if st, err = runstate.ApplyAll(st, evs); err != nil {
				b.Fatal(err)
			}
			if data[i][j].snap, err = seal.Seal(st.Proto(false)); err != nil {
				b.Fatal(err)
			}
		}
	}
	return func(run, j int) error {
		id, d := ids[run], data[run][j]
		ops := make([]clientv3.Op, 0, len(d.events)+1)
		for k, v := range d.events {
			ops = append(ops, clientv3.OpPut(s.keys.event(id, uint64(2+j*benchEventsPerAppend+k)), string(v)))
		}
		ops = append(ops, clientv3.OpPut(s.keys.run(id), string(d.snap)))
		resp, err := s.cli.Txn(b.Context()).If(clientv3.Compare(clientv3.ModRevision(s.keys.run(id)), "=", revs[run])).Then(ops...).Commit()
		if err != nil {
			return err
		}
		if !resp.Succeeded {
			return fmt.Errorf("raw append to %s: compare failed", id)
		}
		revs[run] = resp.Header.Revision
		return nil
	}
}

// BenchmarkListFirstPage lists the newest 20 of 5000 runs, unfiltered and
// by one status: what a console's first page costs as the store grows.
func BenchmarkListFirstPage(b *testing.B) {
	ctx := b.Context()
	s, err := Open(ctx, shared, fmt.Sprintf("/bench/list/%d/", benchRound.Add(1)), testOptions)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < 5000; i += 8 {
				if _, _, err := s.Create(ctx, started(fmt.Sprintf("run-%05d", i))); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, statuses := range [][]reinv1.RunStatus{nil, {reinv1.RunStatus_RUN_STATUS_RUNNING}} {
		b.Run(fmt.Sprintf("statuses=%d", len(statuses)), func(b *testing.B) {
			for b.Loop() {
				page, err := s.List(ctx, store.Filter{Statuses: statuses, Limit: 20})
				if err != nil || len(page.Runs) != 20 || page.Runs[0].RunID != "run-04999" {
					b.Fatalf("List = %d runs, %v", len(page.Runs), err)
				}
			}
		})
	}
}

// BenchmarkScenarioAppend runs rein-bench's append scenario (64 runs
// appending 3-event steps, against the ceiling: the same events put raw,
// 64 per Txn, from one goroutine) on the etcd backend, with fsync, at a
// twentieth of its size; run it with -benchtime 1x. It reports the
// scenario's best figure, baseline and their ratio.
func BenchmarkScenarioAppend(b *testing.B) {
	cli := durableEtcdClient(b)
	prefix := func(path string) string { return fmt.Sprintf("/bench%s/", path) }
	backend := bench.Backend{
		Name: "etcd",
		Open: func(path string, noSync bool) (bench.Store, error) { // etcd's own flags decide fsync
			return Open(b.Context(), cli, prefix(path), Options{})
		},
		Ceiling: Ceiling{Client: cli, Prefix: prefix},
	}
	for b.Loop() {
		r, err := bench.Append(b.Context(), bench.Options{Scale: 0.05, Rounds: 3, Dir: b.TempDir(), Backend: backend})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(r.Figure, "events/s")
		b.ReportMetric(r.Baseline, "raw-events/s")
		b.ReportMetric(r.Ratio, "ratio")
		b.Logf("figures %v, baselines %v, ratios %v; extra %v", r.Figures, r.Baselines, r.Ratios, r.Extra)
	}
}
