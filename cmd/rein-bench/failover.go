//go:build reinbench

package main

import (
	"context"
	"fmt"
	"os/exec"
	"time"

	"github.com/spf13/cobra"

	"github.com/reinhq/rein/cmd/rein-bench/bench"
)

// benchFailover runs `rein-bench failover`: replicas of the rein binary
// (--rein) over the bench's etcd (the cluster of --etcd, or one it starts).
func (o *benchOptions) benchFailover(cmd *cobra.Command, e *env) error {
	exe, b, err := o.replicaEtcd(cmd, e)
	if err != nil {
		return err
	}
	defer b.close()
	f := bench.Failover{
		Etcd: b.cli, Endpoints: o.etcd.Endpoints, Prefix: b.root,
		Replica: func(listen, name, prefix string, ttl time.Duration, tools string) *exec.Cmd {
			c := exec.Command(exe, "serve", "--listen", listen, "--name", name, "--etcd", o.etcd.Endpoints, "--etcd-prefix", prefix,
				"--lease-ttl", ttl.String(), "--tools", "fixture:"+tools, "--rate", "0", "--reflection=false", "--shutdown-timeout", "10s")
			return c
		},
	}
	r, err := bench.RunFailover(context.WithoutCancel(cmd.Context()), bench.Options{Scale: o.scale, Dir: o.dir}, f)
	if err != nil {
		return fmt.Errorf("bench failover: %w", err)
	}
	if e.json {
		return writeJSON(e.stdout, r)
	}
	verdict := "met"
	if !r.Met {
		verdict = "MISSED"
	}
	x := r.Extra
	fmt.Fprintf(e.stdout, "failover kill to resumed elsewhere: worst %.2fs, median %.2fs over %.0f kills (bound: lease TTL %.0fs + 1s, %s), %.0f runs carried on; kills %s; runs/s: 1 replica %.1f, 2 replicas %.1f, 3 replicas %.1f (one machine: every replica, etcd and the driver share its cores)\n",
		r.Figure, x["median_kill_to_resumed_s"], x["kills"], x["lease_ttl_s"], verdict, x["runs_carried_on"], seconds(r.Figures),
		x["runs_per_s_1"], x["runs_per_s_2"], x["runs_per_s_3"])
	return nil
}

// replicaEtcd is what the scenarios of rein serve --etcd replicas need:
// the rein binary (--rein) and the bench's etcd (the cluster of --etcd, or
// one it starts), which the caller closes.
func (o *benchOptions) replicaEtcd(cmd *cobra.Command, e *env) (string, *benchEtcd, error) {
	exe, err := o.reinBinary()
	if err != nil {
		return "", nil, err
	}
	if err := o.etcd.check(cmd.Flags(), "etcd"); err != nil {
		return "", nil, err
	}
	b, err := openBenchEtcd(cmd.Context(), &o.etcd, o.dir, e.stderr)
	if err != nil {
		return "", nil, err
	}
	return exe, b, nil
}

func seconds(vs []float64) string {
	s := ""
	for i, v := range vs {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%.2f", v)
	}
	return s
}
