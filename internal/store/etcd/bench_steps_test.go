package etcd

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/reinhq/rein/internal/bench"
)

// rpcCounts counts a client's unary calls by method.
type rpcCounts struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *rpcCounts) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	c.mu.Lock()
	c.n[method[strings.LastIndex(method, "/")+1:]]++
	c.mu.Unlock()
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (c *rpcCounts) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = map[string]int{}
	return n
}

// countingClient is a client of endpoints whose unary calls c counts.
func countingClient(endpoints []string, c *rpcCounts) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(c.intercept)},
	})
}

// BenchmarkScenarioSteps runs rein bench's steps scenarios (one run, then
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
