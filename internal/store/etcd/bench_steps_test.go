//go:build reinbench

package etcd

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/reinhq/rein/cmd/rein-bench/bench"
	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
)

// BenchmarkScenarioSteps runs rein-bench's steps scenarios (one run, then
// 16 at once, of scripted tool-call steps through the engine, against the
// same events put raw, as the engine groups them) on the etcd backend, with
// fsync, at a tenth of their size; run it with -benchtime 1x, and with
// -cpuprofile to see what bounds a step (etcd runs in this process, so the
// profile holds its server's work too).
func BenchmarkScenarioSteps(b *testing.B) {
	e, cli := durableEtcd(b)
	// The stores' calls are counted on a client of their own: what a step
	// costs in round trips, beside the ceiling's two Txns.
	counts := &rpcCounts{n: map[string]int{}}
	storeCli, err := countingClient([]string{e.Config().AdvertiseClientUrls[0].String()}, counts)
	if err != nil {
		b.Fatal(err)
	}
	defer storeCli.Close()
	prefix := func(path string) string { return fmt.Sprintf("/bench%s/", path) }
	backend := bench.Backend{
		Name: "etcd",
		Open: func(path string, noSync bool) (bench.Store, error) { // etcd's own flags decide fsync
			return Open(b.Context(), storeCli, prefix(path), Options{})
		},
		MaxAppendEvents: 1000,
		Ceiling:         Ceiling{Client: cli, Prefix: prefix},
	}
	for _, sc := range []struct {
		name string
		run  func(b *testing.B, o bench.Options) (bench.Result, error)
	}{
		{"steps", func(b *testing.B, o bench.Options) (bench.Result, error) { return bench.Steps(b.Context(), o) }},
		{"steps-runs", func(b *testing.B, o bench.Options) (bench.Result, error) { return bench.StepsRuns(b.Context(), o) }},
	} {
		b.Run(sc.name, func(b *testing.B) {
			for b.Loop() {
				counts.take()
				const rounds = 2
				r, err := sc.run(b, bench.Options{Scale: 0.1, Rounds: rounds, Dir: b.TempDir(), Backend: backend})
				if err != nil {
					b.Fatal(err)
				}
				n := counts.take()
				for _, m := range slices.Sorted(maps.Keys(n)) {
					b.ReportMetric(float64(n[m])/(rounds*r.Extra["steps"]), m+"/step")
				}
				b.ReportMetric(r.Figure, "steps/s")
				b.ReportMetric(r.Baseline, "raw-steps/s")
				b.ReportMetric(r.Ratio, "ratio")
				b.Logf("figures %v, baselines %v; cpu µs/step %.0f vs %.0f; commits/step %.2f",
					r.Figures, r.Baselines, r.Extra["cpu_us_per_step"], r.Extra["baseline_cpu_us_per_step"], r.Extra["commits_per_step"])
			}
		})
	}
}

// commitClock times the appends of one run's steps through a Store and
// the Txns its client sends: where a commit's time goes.
type commitClock struct {
	mu                       sync.Mutex
	returned, called, sentAt time.Time
	// between is from an append's return to the next one's call (the
	// engine's step), before from the call to its Txn leaving (the
	// store's work), txn the Txn's round trip.
	between, before, txn []time.Duration
}

func (c *commitClock) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	t0 := time.Now()
	err := invoker(ctx, method, req, reply, cc, opts...)
	if _, ok := req.(*pb.TxnRequest); ok {
		c.mu.Lock()
		if !c.called.IsZero() {
			c.before = append(c.before, t0.Sub(c.called))
			c.called = time.Time{}
		}
		c.txn = append(c.txn, time.Since(t0))
		c.mu.Unlock()
	}
	return err
}

// clockedStore is a Store whose appends c times.
type clockedStore struct {
	*Store
	c *commitClock
}

func (s clockedStore) Append(ctx context.Context, runID string, expected uint64, events []*reinv1.Event, opts ...store.AppendOption) (runstate.State, error) {
	c := s.c
	now := time.Now()
	c.mu.Lock()
	if !c.returned.IsZero() {
		c.between = append(c.between, now.Sub(c.returned))
	}
	c.called = now
	c.mu.Unlock()
	st, err := s.Store.Append(ctx, runID, expected, events, opts...)
	c.mu.Lock()
	c.returned = time.Now()
	c.mu.Unlock()
	return st, err
}

func median(d []time.Duration) float64 {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return float64(d[len(d)/2].Microseconds())
}

// BenchmarkStepCommit runs rein-bench steps (one run, 2,000 steps here) on
// the etcd backend and reports, as medians over its commits, where a
// commit's time goes: the engine's step between two appends (between-µs),
// the store's work before its Txn leaves (store-µs), the Txn's round trip
// (txn-µs), and the round trips of the ceiling's Txns: the same bytes put
// raw (ceiling-txn-µs) and the events alone (events-txn-µs). Run it with
// -benchtime 1x. REIN_BENCH_CEILING_PAUSE (such as 35µs) keeps the CPU
// busy that long before each of the ceiling's Txns of the same bytes, as
// rein's work between two commits does: what such a pause costs the Txn
// after it.
func BenchmarkStepCommit(b *testing.B) {
	pause, err := time.ParseDuration(cmp.Or(os.Getenv("REIN_BENCH_CEILING_PAUSE"), "0s"))
	if err != nil {
		b.Fatalf("REIN_BENCH_CEILING_PAUSE: %v", err)
	}
	e, _ := durableEtcd(b)
	endpoints := []string{e.Config().AdvertiseClientUrls[0].String()}
	clock := &commitClock{}
	// The ceiling's Txns of the same bytes (they put a snapshot) and of
	// the events alone.
	var ceilingTxns, eventsTxns []time.Duration
	var ceilingMu sync.Mutex
	dial := func(icpt grpc.UnaryClientInterceptor) *clientv3.Client {
		cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
			DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(icpt)}})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cli.Close() })
		return cli
	}
	storeCli := dial(clock.intercept)
	ceilingCli := dial(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		t, ok := req.(*pb.TxnRequest)
		snapshot := ok && slices.ContainsFunc(t.Success, func(op *pb.RequestOp) bool {
			return strings.Contains(string(op.GetRequestPut().GetKey()), "/run/")
		})
		if snapshot {
			for t0 := time.Now(); time.Since(t0) < pause; {
				// busy, as rein's work between two commits is
			}
		}
		t0 := time.Now()
		err := invoker(ctx, method, req, reply, cc, opts...)
		d := time.Since(t0)
		if !ok {
			return err
		}
		ceilingMu.Lock()
		if snapshot {
			ceilingTxns = append(ceilingTxns, d)
		} else {
			eventsTxns = append(eventsTxns, d)
		}
		ceilingMu.Unlock()
		return err
	})
	prefix := func(path string) string { return fmt.Sprintf("/commit%s/", path) }
	backend := bench.Backend{
		Name: "etcd",
		Open: func(path string, _ bool) (bench.Store, error) {
			s, err := Open(b.Context(), storeCli, prefix(path), Options{})
			if err != nil {
				return nil, err
			}
			return clockedStore{s, clock}, nil
		},
		MaxAppendEvents: 1000,
		Ceiling:         Ceiling{Client: ceilingCli, Prefix: prefix},
	}
	for b.Loop() {
		r, err := bench.Steps(b.Context(), bench.Options{Scale: 0.4, Rounds: 3, Dir: b.TempDir(), Backend: backend})
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("ratio %.2f (the events alone %.2f): figures %v, baselines %v", r.Ratio, r.Extra["events_ratio"], r.Figures, r.Baselines)
	}
	b.ReportMetric(median(clock.between), "between-µs")
	b.ReportMetric(median(clock.before), "store-µs")
	b.ReportMetric(median(clock.txn), "txn-µs")
	b.ReportMetric(median(ceilingTxns), "ceiling-txn-µs")
	b.ReportMetric(median(eventsTxns), "events-txn-µs")
}
