package etcdtest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reinhq/rein/internal/etcdproc"
)

// put writes k=v through cli within d.
func put(cli *clientv3.Client, d time.Duration, k, v string) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_, err := cli.Put(ctx, k, v)
	return err
}

func get(t *testing.T, cli *clientv3.Client, k string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, k)
	if err != nil {
		t.Fatalf("get %s: %v", k, err)
	}
	if len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}

// A cluster of three keeps its quorum with one member killed, loses it with
// two, and gets it back, with its data, when they restart.
func TestClusterKillRestart(t *testing.T) {
	c := Start(t, 3)
	cli := c.Client()
	if err := put(cli, 10*time.Second, "k", "1"); err != nil {
		t.Fatalf("put on a healthy cluster: %v", err)
	}

	first := c.Leader(cli)
	c.Kill(first)
	c.WaitHealthy()
	if err := put(cli, 10*time.Second, "k", "2"); err != nil {
		t.Fatalf("put with one member (the leader) killed: %v", err)
	}

	second := (first + 1) % 3
	c.Kill(second)
	if err := put(cli, 2*time.Second, "k", "3"); err == nil {
		t.Fatal("put with two of three members killed succeeded; want it to fail")
	}

	c.Restart(first)
	c.Restart(second)
	c.WaitHealthy()
	if err := put(cli, 10*time.Second, "k2", "4"); err != nil {
		t.Fatalf("put after the members returned: %v", err)
	}
	if got := get(t, cli, "k2"); got != "4" {
		t.Fatalf("k2 = %q, want 4", got)
	}
	if got := get(t, cli, "k"); got != "2" && got != "3" {
		t.Fatalf("k = %q after the restarts, want 2 (or 3, if the failed put was committed later)", got)
	}
}

// A paused member does not answer; resumed, it does again.
func TestClusterStopCont(t *testing.T) {
	c := Start(t, 1)
	cli := c.Client()
	c.Stop(0)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	err := etcdproc.Healthy(ctx, "http://"+c.Endpoint(0))
	cancel()
	if err == nil {
		t.Fatal("a SIGSTOPped member answered /health")
	}
	c.Cont(0)
	c.WaitHealthy()
	if err := put(cli, 10*time.Second, "k", "v"); err != nil {
		t.Fatalf("put after SIGCONT: %v", err)
	}
}

// $REIN_ETCD_BIN naming something that is not an executable is refused
// with a message naming the variable.
func TestFindBinaryBadEnv(t *testing.T) {
	notExec := filepath.Join(t.TempDir(), "etcd")
	if err := os.WriteFile(notExec, []byte("not a program"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{notExec, filepath.Join(t.TempDir(), "missing")} {
		t.Setenv(etcdproc.BinEnv, p)
		_, err := etcdproc.FindBinary()
		if err == nil || !strings.Contains(err.Error(), etcdproc.BinEnv) {
			t.Errorf("FindBinary with $%s=%s: %v, want an error naming the variable", etcdproc.BinEnv, p, err)
		}
	}
}

// A member that cannot start (its client URL is no address it can listen
// on) fails the wait at once rather than at the deadline.
func TestWaitHealthyMemberExits(t *testing.T) {
	bin := Binary(t)
	ms, err := etcdproc.NewMembers(t.TempDir(), 1)
	if err != nil {
		t.Fatal(err)
	}
	ms[0].ClientURL = "http://192.0.2.1:2379" // TEST-NET-1: not this machine's
	p, err := etcdproc.Cluster{Bin: bin, Members: ms}.Start(0, &logBuffer{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Kill() })
	ctx, cancel := context.WithTimeout(context.Background(), HealthyWithin)
	defer cancel()
	start := time.Now()
	err = etcdproc.WaitHealthy(ctx, p)
	if err == nil || !strings.Contains(err.Error(), "exited") {
		t.Fatalf("WaitHealthy on a member that cannot start: %v, want it to say the member exited", err)
	}
	if time.Since(start) >= HealthyWithin {
		t.Fatalf("WaitHealthy took the whole deadline; want it to notice the exit")
	}
}
