package metrics

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reinhq/rein/internal/etcdflags"
	"github.com/reinhq/rein/internal/etcdtest"
)

// etcdReceivedBytes is rein_etcd_received_bytes_total as m's registry
// serves it, and whether it serves it at all.
func etcdReceivedBytes(t *testing.T, m *Metrics) (float64, bool) {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "rein_etcd_received_bytes_total" {
			return mf.GetMetric()[0].GetCounter().GetValue(), true
		}
	}
	return 0, false
}

// etcdClient is a client of the cluster as rein serve dials one, with m's
// dial options.
func etcdClient(t *testing.T, c *etcdtest.Cluster, m *Metrics) *clientv3.Client {
	t.Helper()
	f := etcdflags.Flags{Endpoints: c.Endpoint(0), Prefix: "/rein/", Timeout: 5 * time.Second}
	cli, err := f.Client(m.EtcdDialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// TestEtcdReceivedBytes: the bytes the etcd client receives are counted:
// reading 64 values of 1 KiB grows rein_etcd_received_bytes_total by at
// least their size, and a second client of the same Metrics adds to the
// same counter.
func TestEtcdReceivedBytes(t *testing.T) {
	c := etcdtest.Start(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	value := strings.Repeat("v", 1024)
	for i := range 64 {
		if _, err := c.Client().Put(ctx, fmt.Sprintf("/rein/k%02d", i), value); err != nil {
			t.Fatal(err)
		}
	}
	m := New()
	cli := etcdClient(t, c, m)
	before, ok := etcdReceivedBytes(t, m)
	if !ok {
		t.Fatal("rein_etcd_received_bytes_total is not on the registry once the client has the dial options")
	}
	resp, err := cli.Get(ctx, "/rein/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 64 {
		t.Fatalf("read %d keys, want 64", len(resp.Kvs))
	}
	after, _ := etcdReceivedBytes(t, m)
	if got := after - before; got < 64*1024 {
		t.Fatalf("reading 64 KiB of values grew rein_etcd_received_bytes_total by %v bytes, want at least %d", got, 64*1024)
	}
	other := etcdClient(t, c, m)
	if _, err := other.Get(ctx, "/rein/k00"); err != nil {
		t.Fatal(err)
	}
	if again, _ := etcdReceivedBytes(t, m); again < after+1024 {
		t.Fatalf("a second client's read of 1 KiB took the counter from %v to %v; want both clients counted on one counter", after, again)
	}
	if n, err := testutil.GatherAndCount(m.Registry, "rein_etcd_received_bytes_total"); err != nil || n != 1 {
		t.Fatalf("rein_etcd_received_bytes_total registered %d times (%v), want once", n, err)
	}
}

// TestEtcdReceivedBytesNilMetrics: without metrics (rein serve without
// --admin-listen) the client gets no dial option and reads as well, and
// nothing is counted: a Metrics whose options no client took serves no
// such counter.
func TestEtcdReceivedBytesNilMetrics(t *testing.T) {
	var none *Metrics
	if opts := none.EtcdDialOptions(); opts != nil {
		t.Fatalf("a nil Metrics gave %d dial options, want none", len(opts))
	}
	c := etcdtest.Start(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Client().Put(ctx, "/rein/k", "v"); err != nil {
		t.Fatal(err)
	}
	cli := etcdClient(t, c, none)
	if resp, err := cli.Get(ctx, "/rein/k"); err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("read without metrics: %v, %v", resp, err)
	}
	if v, ok := etcdReceivedBytes(t, New()); ok {
		t.Fatalf("a Metrics no etcd client used serves rein_etcd_received_bytes_total = %v; want it absent", v)
	}
}
