package etcdtest

import (
	"context"
	"errors"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// testQuota is the --quota-backend-bytes of the quota tests: a few MiB,
// filled in a second or two.
const testQuota = 4 << 20

// noSpaceAlarms is how many NOSPACE alarms cli's cluster has raised.
func noSpaceAlarms(t *testing.T, cli *clientv3.Client) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.AlarmList(ctx)
	if err != nil {
		t.Fatalf("list etcd's alarms: %v", err)
	}
	n := 0
	for _, a := range resp.Alarms {
		if a.Alarm == pb.AlarmType_NOSPACE {
			n++
		}
	}
	return n
}

// TestFillAndFreeSpace: a cluster started with a small quota is filled,
// raises its NOSPACE alarm and refuses even a small
// put; after FreeSpace it has no alarm and takes puts again. The twin: the
// same small put before Fill is taken.
func TestFillAndFreeSpace(t *testing.T) {
	c := StartWith(t, Options{Members: 1, QuotaBackendBytes: testQuota})
	cli := c.Client()
	if err := put(cli, 10*time.Second, "/app/k", "before"); err != nil {
		t.Fatalf("put before the quota is full: %v", err)
	}
	if n := noSpaceAlarms(t, cli); n != 0 {
		t.Fatalf("%d NOSPACE alarms before Fill, want none", n)
	}

	took := c.Fill(cli, "/filler/")
	t.Logf("etcd took %d values before its quota of %d bytes was full", took, testQuota)
	if n := noSpaceAlarms(t, cli); n != 1 {
		t.Fatalf("%d NOSPACE alarms after Fill, want 1", n)
	}
	if err := put(cli, 10*time.Second, "/app/k", "full"); !errors.Is(err, rpctypes.ErrNoSpace) {
		t.Fatalf("a small put under the NOSPACE alarm: %v, want %v", err, rpctypes.ErrNoSpace)
	}

	c.FreeSpace(cli, "/filler/")
	if n := noSpaceAlarms(t, cli); n != 0 {
		t.Fatalf("%d NOSPACE alarms after FreeSpace, want none", n)
	}
	if err := put(cli, 10*time.Second, "/app/k", "after"); err != nil {
		t.Fatalf("put after FreeSpace: %v", err)
	}
	if v := get(t, cli, "/app/k"); v != "after" {
		t.Fatalf("/app/k is %q after FreeSpace, want %q", v, "after")
	}
}
