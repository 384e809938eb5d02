package failover_test

// A replica is one `rein serve --etcd` process, started again on the same
// address and name after each kill; every start's stderr goes to one log.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/reinhq/rein/client"
)

const (
	readTool    = "records.get"
	writeTool   = "records.update"
	receiptJSON = `{"update_id": "u_1", "status": "applied"}`
	// prefix is the etcd prefix every replica shares.
	prefix = "/rein-failover/"
)

var fixturesJSON = `{
  "` + readTool + `": [{"output": {"record": "R-1", "balance": "10.00"}}],
  "` + writeTool + `": [{"preview": {"set": {"balance": "0.00"}}, "receipt": ` + receiptJSON + `}]
}`

// group is what the replicas of a test share: the etcd endpoints, the
// tools file, the fixture ledger and the lease TTL.
type group struct {
	dir, tools, ledger string
	etcd               string
	ttl                time.Duration
	log                *serverLog
	// extra are more flags for every replica.
	extra []string
}

func newGroup(t *testing.T, endpoints []string, ttl time.Duration) *group {
	t.Helper()
	dir := t.TempDir()
	g := &group{dir: dir, tools: filepath.Join(dir, "tools.json"), ledger: filepath.Join(dir, "ledger.tsv"),
		etcd: strings.Join(endpoints, ","), ttl: ttl, log: &serverLog{}}
	if err := os.WriteFile(g.tools, []byte(fixturesJSON), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the replicas' logs (last 120 lines):\n%s", g.log.tail(120))
		}
	})
	return g
}

// serverLog collects every replica's stderr, each line prefixed with the
// replica's name and start.
type serverLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *serverLog) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, line)
}

func (l *serverLog) tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines[max(0, len(l.lines)-n):], "\n")
}

// count is how many lines of prefix hold s.
func (l *serverLog) count(prefix, s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.HasPrefix(line, prefix) && strings.Contains(line, s) {
			n++
		}
	}
	return n
}

// replica is one server of the group, by name and address.
type replica struct {
	g      *group
	name   string
	addr   string
	starts int
	cmd    *exec.Cmd
	exited chan struct{}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func (g *group) replica(t *testing.T, name string) *replica {
	r := &replica{g: g, name: name, addr: freeAddr(t)}
	t.Cleanup(func() {
		if r.cmd != nil && r.running() {
			_ = r.cmd.Process.Signal(syscall.SIGCONT)
			_ = r.cmd.Process.Kill()
			<-r.exited
		}
	})
	return r
}

// start starts the replica and waits until its health check answers.
func (r *replica) start(t *testing.T) {
	t.Helper()
	r.starts++
	r.exited = make(chan struct{})
	r.cmd = exec.Command(reinBin, "serve", "--listen", r.addr, "--name", r.name,
		"--etcd", r.g.etcd, "--etcd-prefix", prefix, "--lease-ttl", r.g.ttl.String(),
		"--tools", "fixture:"+r.g.tools, "--fixture-ledger", r.g.ledger,
		"--rate", "0", "--reflection=false", "--shutdown-timeout", "10s")
	r.cmd.Args = append(r.cmd.Args, r.g.extra...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REIN_") {
			r.cmd.Env = append(r.cmd.Env, kv)
		}
	}
	r.cmd.Stdout = io.Discard
	stderr, err := r.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", r.name, err)
	}
	tag := fmt.Sprintf("%s/%d| ", r.name, r.starts)
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if line := sc.Text(); !strings.Contains(line, `msg="finished call"`) || !strings.Contains(line, "grpc.code=OK") {
				r.g.log.add(tag + line)
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	exited := r.exited
	cmd := r.cmd
	go func() {
		<-scanned
		_ = cmd.Wait()
		close(exited)
	}()
	r.waitServing(t)
}

func (r *replica) running() bool {
	select {
	case <-r.exited:
		return false
	default:
		return true
	}
}

func (r *replica) waitServing(t *testing.T) {
	t.Helper()
	conn, err := grpc.NewClient(r.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		res, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && res.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return
		}
		if !r.running() {
			t.Fatalf("%s exited before serving", r.name)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not serve within 30s: %v", r.name, err)
		}
		<-tick.C
	}
}

// kill sends SIGKILL and waits for the process to be reaped.
func (r *replica) kill(t *testing.T) {
	t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL %s: %v", r.name, err)
	}
	<-r.exited
}

func (r *replica) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := r.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("%v %s: %v", sig, r.name, err)
	}
}

// fastReconnect makes a client move to another server within tens of
// milliseconds (gRPC's default backoff grows to two minutes).
var fastReconnect = grpc.WithConnectParams(grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1.5, Jitter: 0.2, MaxDelay: 200 * time.Millisecond},
	MinConnectTimeout: 2 * time.Second,
})

// dial is a client of the servers at addrs, tried in order.
func dial(t *testing.T, addrs ...string) *client.Client {
	t.Helper()
	cl, err := client.Dial(strings.Join(addrs, ","), client.Options{DialOptions: []grpc.DialOption{fastReconnect}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}
