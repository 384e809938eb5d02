package main

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestClusterDemo runs scripts/cluster-demo.sh, docs/operating.md's "Running
// several servers": three etcd members and two replicas; a run approved on
// the first, which is killed mid-call, completes on the second, its write
// applied once. It needs the pinned etcd (bash scripts/tools.sh builds
// .bin/etcd); without it the test skips, unless REIN_REQUIRE_ETCD=1.
func TestClusterDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an etcd cluster and two servers (about 20s)")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, ".bin", "etcd")); err != nil {
		if os.Getenv("REIN_REQUIRE_ETCD") == "1" {
			t.Fatalf("no .bin/etcd (%v): run bash scripts/tools.sh", err)
		}
		t.Skipf("no .bin/etcd: run bash scripts/tools.sh to build the pinned etcd (%v)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// Eight ports free a moment ago, held until all are picked so they
	// differ, for etcd's clients and peers and the two replicas.
	var ports []string
	var held []net.Listener
	for range 8 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
		_, port, _ := net.SplitHostPort(l.Addr().String())
		ports = append(ports, port)
	}
	for _, l := range held {
		_ = l.Close()
	}
	cmd := exec.CommandContext(ctx, "bash", "scripts/cluster-demo.sh")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "REIN_DEMO_PORTS="+strings.Join(ports, " "))
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/cluster-demo.sh: %v\n%s", err, out)
	}
	for _, want := range []string{"run_taken", "carried on by replica-b", "completed", "applied 1 time(s)"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the demo's output lacks %q:\n%s", want, out)
		}
	}
}
