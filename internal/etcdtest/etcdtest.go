// Package etcdtest starts clusters of etcd member processes for tests: the
// pinned binary (.bin/etcd, built by `bash scripts/tools.sh`, or
// $REIN_ETCD_BIN), on free 127.0.0.1 ports, each member's data under the
// test's t.TempDir(). A test kills (SIGKILL), pauses (SIGSTOP), resumes
// (SIGCONT) and restarts members by index; t.Cleanup kills whatever is left.
//
// Without the binary a test skips, saying how to build it, unless
// REIN_REQUIRE_ETCD=1 (scripts/test.sh sets it): then it fails. Only tests
// import this package.
package etcdtest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/reinhq/rein/internal/etcdproc"
)

// RequireEnv, set to 1, makes a test without the etcd binary fail instead of
// skipping.
const RequireEnv = "REIN_REQUIRE_ETCD"

// The raft timings of a test cluster: short, so an election after a kill
// takes well under a second, and not so short that a loaded 2-core machine
// makes the leader flap.
const (
	HeartbeatInterval = 50 * time.Millisecond
	ElectionTimeout   = 500 * time.Millisecond
)

// HealthyWithin bounds every wait for a cluster to be healthy.
const HealthyWithin = 30 * time.Second

// Binary is the etcd binary, or skips t (fails it under REIN_REQUIRE_ETCD=1)
// when there is none.
func Binary(t testing.TB) string {
	t.Helper()
	bin, err := etcdproc.FindBinary()
	if err != nil {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("%v (%s=1 requires it)", err, RequireEnv)
		}
		t.Skipf("%v; skipping this test", err)
	}
	return bin
}

// Options change a cluster from the default: three members, no fsync.
type Options struct {
	// Members is the member count; 0 is 3.
	Members int
	// Durable turns fsync on.
	Durable bool
	// MaxRequestBytes is etcd's --max-request-bytes; 0 is etcd's default.
	MaxRequestBytes int
	// QuotaBackendBytes is etcd's --quota-backend-bytes; 0 is etcd's
	// default (2 GiB). A small one fills in seconds (Fill).
	QuotaBackendBytes int64
}

// Cluster is a running test cluster.
type Cluster struct {
	t   testing.TB
	cfg etcdproc.Cluster

	mu    sync.Mutex
	procs []*etcdproc.Proc // nil: killed and not restarted
	stop  []bool           // SIGSTOPped
	logs  []*logBuffer
}

// Start starts a cluster of n members and waits until it is healthy.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	return StartWith(t, Options{Members: n})
}

// StartWith starts a cluster as opts say and waits until it is healthy.
func StartWith(t testing.TB, opts Options) *Cluster {
	t.Helper()
	bin := Binary(t)
	if opts.Members <= 0 {
		opts.Members = 3
	}
	ms, err := etcdproc.NewMembers(t.TempDir(), opts.Members)
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{
		t: t,
		cfg: etcdproc.Cluster{
			Bin: bin, Members: ms, Token: fmt.Sprintf("rein-test-%d-%d", os.Getpid(), time.Now().UnixNano()),
			HeartbeatInterval: HeartbeatInterval, ElectionTimeout: ElectionTimeout,
			NoFsync: !opts.Durable, MaxRequestBytes: opts.MaxRequestBytes, QuotaBackendBytes: opts.QuotaBackendBytes,
		},
		procs: make([]*etcdproc.Proc, len(ms)),
		stop:  make([]bool, len(ms)),
		logs:  make([]*logBuffer, len(ms)),
	}
	t.Cleanup(c.cleanup)
	for i := range ms {
		c.logs[i] = &logBuffer{}
		p, err := c.cfg.Start(i, c.logs[i])
		if err != nil {
			t.Fatal(err)
		}
		c.procs[i] = p
	}
	c.WaitHealthy()
	return c
}

// Len is the member count.
func (c *Cluster) Len() int { return len(c.cfg.Members) }

// Endpoints are every member's client address (host:port), running or not.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.cfg.Members {
		eps = append(eps, m.Endpoint())
	}
	return eps
}

// Endpoint is member i's client address.
func (c *Cluster) Endpoint(i int) string { return c.cfg.Members[i].Endpoint() }

// Dir is member i's data directory (etcd's --data-dir): its database is
// member/snap/db, its write-ahead log under member/wal.
func (c *Cluster) Dir(i int) string { return c.cfg.Members[i].Dir }

// Client is an etcd client of every member, closed at cleanup.
func (c *Cluster) Client() *clientv3.Client {
	c.t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:            c.Endpoints(),
		DialTimeout:          5 * time.Second,
		DialKeepAliveTime:    time.Second,
		DialKeepAliveTimeout: time.Second,
		Logger:               zap.NewNop(),
	})
	if err != nil {
		c.t.Fatalf("etcd client of %v: %v", c.Endpoints(), err)
	}
	c.t.Cleanup(func() { cli.Close() })
	return cli
}

// Kill kills member i with SIGKILL and waits until it is gone.
func (c *Cluster) Kill(i int) {
	c.t.Helper()
	c.mu.Lock()
	p := c.procs[i]
	c.procs[i], c.stop[i] = nil, false
	c.mu.Unlock()
	if p == nil {
		c.t.Fatalf("kill etcd member %d: it is not running", i)
	}
	if err := p.Kill(); err != nil {
		c.t.Fatal(err)
	}
}

// Stop pauses member i with SIGSTOP.
func (c *Cluster) Stop(i int) { c.signal(i, syscall.SIGSTOP, true) }

// Cont resumes member i, paused by Stop, with SIGCONT.
func (c *Cluster) Cont(i int) { c.signal(i, syscall.SIGCONT, false) }

func (c *Cluster) signal(i int, sig syscall.Signal, stopped bool) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.procs[i]
	if p == nil {
		c.t.Fatalf("signal etcd member %d with %v: it is not running", i, sig)
	}
	if err := p.Signal(sig); err != nil {
		c.t.Fatal(err)
	}
	if sig == syscall.SIGSTOP {
		waitStopped(p.Pid())
	}
	c.stop[i] = stopped
}

// waitStopped waits, up to 5s, until the kernel shows process pid stopped
// (state T in /proc/PID/stat): a signal is delivered asynchronously, and a
// member that has not stopped yet may still answer. Where /proc cannot
// tell, it waits a tenth of a second.
func waitStopped(pid int) {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			return
		}
		// The state follows the command's closing parenthesis.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && (b[i+2] == 'T' || b[i+2] == 't') {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Restart starts member i, killed by Kill, again with the same data dir
// and ports. It does not wait: call WaitHealthy.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.procs[i] != nil {
		c.t.Fatalf("restart etcd member %d: it is running; Kill it first", i)
	}
	p, err := c.cfg.Start(i, c.logs[i])
	if err != nil {
		c.t.Fatal(err)
	}
	c.procs[i] = p
}

// WaitHealthy waits (HealthyWithin at most) until every member that runs
// and is not paused reports healthy, which needs a leader: with a quorum
// lost it fails the test.
func (c *Cluster) WaitHealthy() {
	c.t.Helper()
	if err := c.waitHealthy(HealthyWithin); err != nil {
		c.t.Fatal(err)
	}
}

func (c *Cluster) waitHealthy(within time.Duration) error {
	c.mu.Lock()
	var live []*etcdproc.Proc
	for i, p := range c.procs {
		if p != nil && !c.stop[i] {
			live = append(live, p)
		}
	}
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	return etcdproc.WaitHealthy(ctx, live...)
}

// cleanup kills every member and, when the test failed, logs the tail of
// each member's log.
func (c *Cluster) cleanup() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, p := range c.procs {
		if p != nil {
			if err := p.Kill(); err != nil {
				c.t.Errorf("cleanup: %v", err)
			}
			c.procs[i] = nil
		}
	}
	if c.t.Failed() {
		for i, l := range c.logs {
			if l != nil {
				c.t.Logf("etcd member %s log (tail):\n%s", c.cfg.Members[i].Name, l.tail(4096))
			}
		}
	}
}

// logBuffer is a member's log, kept in memory across restarts.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > 1<<20 { // keep the last part only
		rest := l.b.Bytes()[l.b.Len()-(256<<10):]
		nb := append([]byte(nil), rest...)
		l.b.Reset()
		l.b.Write(nb)
	}
	return l.b.Write(p)
}

func (l *logBuffer) tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.b.String()
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return strings.TrimRight(s, "\n")
}

// Leader is the index of the member that leads the cluster, asked of the
// running members (HealthyWithin at most).
func (c *Cluster) Leader(cli *clientv3.Client) int {
	c.t.Helper()
	deadline := time.Now().Add(HealthyWithin)
	var last error
	for time.Now().Before(deadline) {
		for i := range c.cfg.Members {
			c.mu.Lock()
			running := c.procs[i] != nil && !c.stop[i]
			c.mu.Unlock()
			if !running {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			st, err := cli.Status(ctx, c.Endpoint(i))
			cancel()
			if err != nil {
				last = err
				continue
			}
			if st.Leader != 0 && st.Leader == st.Header.MemberId {
				return i
			}
		}
		<-time.After(50 * time.Millisecond) // poll again
	}
	c.t.Fatalf("no etcd member leads within %v (%v)", HealthyWithin, last)
	return -1
}
