//go:build reinbench

package main

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/reinhq/rein/cmd/rein-bench/bench"
	"github.com/reinhq/rein/internal/store"
	etcdstore "github.com/reinhq/rein/internal/store/etcd"
)

// defaultScaleReplicas are the replica counts `rein-bench scale` measures
// without --replicas.
var defaultScaleReplicas = []int{1, 2, 4, 8}

// benchScale runs `rein-bench scale`: groups of replicas of the rein
// binary (--rein), --replicas of them in turn, over the bench's etcd (the
// cluster of --etcd, or one it starts).
func (o *benchOptions) benchScale(cmd *cobra.Command, e *env) error {
	for _, n := range o.replicas {
		if n < 1 || n > 64 {
			return usageError("--replicas %v: each count must be from 1 to 64", o.replicas)
		}
	}
	if o.scale <= 0 {
		return usageError("--scale must be positive, got %v", o.scale)
	}
	exe, b, err := o.replicaEtcd(cmd, e)
	if err != nil {
		return err
	}
	defer b.close()
	s := bench.Scale{
		Etcd: b.cli, Endpoints: o.etcd.Endpoints, Prefix: b.root, Replicas: o.replicas,
		Replica: func(listen, admin, name, prefix string, ttl time.Duration, maxRuns int, tools string) *exec.Cmd {
			return exec.Command(exe, "serve", "--listen", listen, "--admin-listen", admin, "--name", name,
				"--etcd", o.etcd.Endpoints, "--etcd-prefix", prefix, "--lease-ttl", ttl.String(), "--max-runs", strconv.Itoa(maxRuns),
				"--tools", "fixture:"+tools, "--rate", "0", "--reflection=false", "--shutdown-timeout", "10s")
		},
		Open: func(ctx context.Context, prefix string) (store.Store, error) {
			return etcdstore.Open(ctx, b.cli, prefix, etcdstore.Options{Timeout: b.timeout})
		},
	}
	// An interrupt ends the scenario: its waits end, and it stops the
	// replicas and the bench's etcd on the way out.
	r, err := bench.RunScale(cmd.Context(), bench.Options{Scale: o.scale, Dir: o.dir}, s)
	if err != nil {
		return fmt.Errorf("bench scale: %w", err)
	}
	if e.json {
		return writeJSON(e.stdout, r)
	}
	return r.WriteText(e.stdout)
}
