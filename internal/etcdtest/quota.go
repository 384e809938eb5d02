package etcdtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// fillValueBytes is the size of each value Fill puts: well within etcd's
// default --max-request-bytes (1.5 MiB) and the client's 2 MiB.
const fillValueBytes = 512 << 10

// quotaWithin bounds each request of Fill and FreeSpace.
const quotaWithin = 30 * time.Second

// Fill puts values of 512 KiB under prefix through cli until etcd refuses
// one for its quota, which raises the cluster's NOSPACE alarm: from then on
// etcd refuses every write that adds data. The cluster must have been
// started with a small Options.QuotaBackendBytes (a few MiB fill in a
// second or two). etcd counts its database's size as last committed (every
// 100ms), so it may take several MiB past the quota before it refuses. Any
// other error, or a quota that does not fill within four times its size and
// 32 MiB more, fails the test. It returns the puts etcd took.
func (c *Cluster) Fill(cli *clientv3.Client, prefix string) int {
	c.t.Helper()
	quota := c.cfg.QuotaBackendBytes
	if quota <= 0 {
		c.t.Fatal("Fill needs a cluster started with Options.QuotaBackendBytes: etcd's default quota is 2 GiB")
	}
	value := string(bytes.Repeat([]byte{'q'}, fillValueBytes))
	most := int((4*quota+32<<20)/fillValueBytes) + 1
	for i := range most {
		ctx, cancel := context.WithTimeout(context.Background(), quotaWithin)
		_, err := cli.Put(ctx, fmt.Sprintf("%s%06d", prefix, i), value)
		cancel()
		switch {
		case err == nil:
		case errors.Is(err, rpctypes.ErrNoSpace):
			return i
		default:
			c.t.Fatalf("fill etcd's quota: put %d under %s: %v", i, prefix, err)
		}
	}
	c.t.Fatalf("fill etcd's quota: etcd took %d values of %d bytes, far past its --quota-backend-bytes %d, without refusing one", most, fillValueBytes, quota)
	return most
}

// FreeSpace undoes Fill as an operator would: it deletes the keys under
// prefix, compacts etcd's history to the revision of that delete, waits for
// the compaction, defragments every running member (which gives the freed
// pages back, so the database is under the quota again) and disarms every
// alarm. Writes are taken again when it returns.
func (c *Cluster) FreeSpace(cli *clientv3.Client, prefix string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), quotaWithin)
	defer cancel()
	del, err := cli.Delete(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		c.t.Fatalf("free etcd's space: delete %s: %v", prefix, err)
	}
	if _, err := cli.Compact(ctx, del.Header.Revision, clientv3.WithCompactPhysical()); err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
		c.t.Fatalf("free etcd's space: compact to revision %d: %v", del.Header.Revision, err)
	}
	for i := range c.cfg.Members {
		c.mu.Lock()
		running := c.procs[i] != nil && !c.stop[i]
		c.mu.Unlock()
		if !running {
			continue
		}
		if _, err := cli.Defragment(ctx, c.Endpoint(i)); err != nil {
			c.t.Fatalf("free etcd's space: defragment member %d: %v", i, err)
		}
	}
	if _, err := cli.AlarmDisarm(ctx, &clientv3.AlarmMember{}); err != nil {
		c.t.Fatalf("free etcd's space: disarm the alarms: %v", err)
	}
}
