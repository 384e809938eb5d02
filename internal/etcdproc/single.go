package etcdproc

import (
	"context"
	"fmt"
	"io"
	"time"
)

// StartSingle starts a one-member cluster of bin with its data under dir
// and waits until it is healthy or ctx ends. A port taken between choosing
// it and etcd binding it is retried on new ports, three times at most.
// durable false skips fsync.
func StartSingle(ctx context.Context, bin, dir string, durable bool, log io.Writer) (*Proc, error) {
	var last error
	for attempt := range 3 {
		ms, err := NewMembers(fmt.Sprintf("%s/try%d", dir, attempt), 1)
		if err != nil {
			return nil, err
		}
		c := Cluster{Bin: bin, Members: ms, Token: "rein-single", NoFsync: !durable}
		p, err := c.Start(0, log)
		if err != nil {
			return nil, err
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		last = WaitHealthy(wctx, p)
		cancel()
		if last == nil {
			return p, nil
		}
		_ = p.Kill()
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("start etcd from %s: %w", bin, last)
}
