package powerloss_test

// The machine under test: a disk (lossyfs over a backing directory) and a
// `rein serve` process over the store on it, started again after each cut
// on the same files and address. Each start is a generation; every
// generation's stderr goes to one log, each line prefixed with it.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
	"github.com/reinhq/rein/tests/internal/lossyfs"
)

const (
	// token is the driver's bearer token; the tokens file lists its hash.
	token = "powerloss-test-token"
	// readTool is the fixture tool every run calls.
	readTool = "records.get"
	// dbName is the store's file on the lossy disk; its log is dbName-wal.
	dbName  = "rein.db"
	walName = dbName + "-wal"
)

var fixturesJSON = `{"` + readTool + `": [{"output": {"record": "R-1", "balance": "10.00"}}]}`

// machine is what stays the same across cuts: the disk, the files beside
// it (tools, tokens, not under test) and, after the first start, the
// server's address.
type machine struct {
	t       *testing.T
	backing string // the disk's content
	mnt     string // where it is mounted
	disk    *lossyfs.FS
	boots   int
	db      string
	etc     string // tools and tokens, on the test's own disk
	tools   string
	tokens  string
	addr    string
	cl      *client.Client // once addr is known
	gens    int
	log     *serverLog
	srv     *server // the generation running, if any
}

// serverLog collects every generation's stderr.
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
	return strings.Join(l.lines[max(len(l.lines)-n, 0):], "\n")
}

// newMachine makes an empty disk, mounts it, and writes the tools and
// tokens files.
func newMachine(t *testing.T) *machine {
	t.Helper()
	requireFUSE(t)
	m := &machine{t: t, backing: t.TempDir(), mnt: t.TempDir(), etc: t.TempDir(), log: &serverLog{}}
	m.db = filepath.Join(m.mnt, dbName)
	m.tools = filepath.Join(m.etc, "tools.json")
	m.tokens = filepath.Join(m.etc, "tokens.json")
	sum := sha256.Sum256([]byte(token))
	tokens := fmt.Sprintf(`{"principals": [{"id": "driver", "tenant": "powerloss", "roles": ["operator", "admin"], "token_sha256": %q}]}`,
		hex.EncodeToString(sum[:]))
	for path, data := range map[string]string{m.tools: fixturesJSON, m.tokens: tokens} {
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	m.boot()
	// Cleanups run last first: this one, before t.TempDir's removals.
	t.Cleanup(func() {
		if m.srv != nil && m.srv.running() {
			_ = m.srv.cmd.Process.Kill()
			m.disk.Release()
			<-m.srv.exited
		}
		if err := m.disk.Unmount(10 * time.Second); err != nil {
			t.Errorf("unmount the lossy disk: %v", err)
		}
		if t.Failed() {
			t.Logf("rein serve's log (last 60 lines of %d generations):\n%s", m.gens, m.log.tail(60))
		}
	})
	return m
}

// boot mounts the disk.
func (m *machine) boot() {
	m.t.Helper()
	disk, err := lossyfs.Mount(m.mnt, m.backing)
	if err != nil {
		m.t.Fatal(err)
	}
	m.disk = disk
	m.boots++
}

// powerCut cuts the power now if a trigger has not (the server, if any,
// is stuck in the operation it was cut at), kills the server with SIGKILL,
// keeps of the unsynced state what policy says, and boots again.
func (m *machine) powerCut(policy lossyfs.Policy) {
	m.t.Helper()
	m.disk.Cut()
	if s := m.srv; s != nil {
		if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
			m.t.Fatalf("SIGKILL generation %d: %v", s.gen, err)
		}
		m.disk.Release()
		<-s.exited
		if ws, ok := s.state.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			m.t.Fatalf("rein serve (generation %d) exited on its own (%v) before the power cut killed it", s.gen, s.state)
		}
		m.srv = nil
	}
	report, err := m.disk.Crash(policy, 10*time.Second)
	if err != nil {
		m.t.Fatal(err)
	}
	m.t.Logf("power cut (boot %d): %s", m.boots, strings.Join(report, "; "))
	m.boot()
}

// onDisk reports whether the disk holds a file of that name.
func (m *machine) onDisk(name string) bool {
	_, err := os.Stat(filepath.Join(m.backing, name))
	return err == nil
}

// check runs `rein check --db` on the store as the disk holds it, with no
// server running, and returns its exit code and output.
func (m *machine) check() (int, string) {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, reinBin, "--db", m.db, "check")
	cmd.Env = cleanEnv()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String()
	}
	m.t.Fatalf("rein check: %v\n%s", err, out.String())
	return 0, ""
}

// cleanEnv is the environment without REIN_ variables.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REIN_") {
			env = append(env, kv)
		}
	}
	return env
}

// server is one generation: one `rein serve` process.
type server struct {
	gen     int
	cmd     *exec.Cmd
	serving chan struct{} // closed once the process logged its address
	addr    string
	exited  chan struct{} // closed once the process was reaped
	state   *os.ProcessState
}

var servingRe = regexp.MustCompile(`msg="rein serving" addr=(\S+)`)

// start starts a generation on the disk; it does not wait for it to serve.
func (m *machine) start() *server {
	t := m.t
	t.Helper()
	m.gens++
	s := &server{gen: m.gens, serving: make(chan struct{}), exited: make(chan struct{})}
	listen := m.addr
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	s.cmd = exec.Command(reinBin, "--db", m.db, "serve",
		"--listen", listen,
		"--tools", "fixture:"+m.tools,
		"--tokens", m.tokens,
		"--rate", "0",
		"--reflection=false",
		"--shutdown-timeout", "20s")
	s.cmd.Env = cleanEnv()
	s.cmd.Stdout = io.Discard
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start rein serve: %v", err)
	}
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if !strings.Contains(line, `msg="finished call"`) || !strings.Contains(line, "grpc.code=OK") {
				m.log.add(fmt.Sprintf("g%d| %s", s.gen, line))
			}
			if match := servingRe.FindStringSubmatch(line); match != nil && s.addr == "" {
				s.addr = match[1]
				close(s.serving)
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	go func() {
		<-scanned
		_ = s.cmd.Wait()
		s.state = s.cmd.ProcessState
		close(s.exited)
	}()
	m.srv = s
	return s
}

func (s *server) running() bool {
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// errExited is waitServing's error when the process exited first.
var errExited = errors.New("rein serve exited before it served")

// waitServing waits until the generation logged its address and its
// health check answers SERVING. It may run on a goroutine of its own.
func (m *machine) waitServing(s *server) error {
	deadline := time.NewTimer(60 * time.Second)
	defer deadline.Stop()
	select {
	case <-s.serving:
	case <-s.exited:
		return errExited
	case <-deadline.C:
		return fmt.Errorf("rein serve (generation %d) did not log its address within 60s", s.gen)
	}
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()), fastReconnect)
	if err != nil {
		return err
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		res, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && res.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		last = err
		select {
		case <-tick.C:
		case <-s.exited:
			return errExited
		case <-deadline.C:
			return fmt.Errorf("rein serve's health check (generation %d) did not answer SERVING within 60s: %v", s.gen, last)
		}
	}
}

// stop sends SIGTERM and checks that the server stops cleanly, with exit 0.
func (m *machine) stop(s *server) {
	t := m.t
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM generation %d: %v", s.gen, err)
	}
	timer := time.NewTimer(60 * time.Second)
	defer timer.Stop()
	select {
	case <-s.exited:
	case <-timer.C:
		t.Fatalf("rein serve (generation %d) did not exit within 60s of SIGTERM", s.gen)
	}
	m.srv = nil
	if code := s.state.ExitCode(); code != 0 {
		t.Fatalf("rein serve (generation %d) after SIGTERM: %v, want exit 0", s.gen, s.state)
	}
}

// fastReconnect makes a client reconnect within a few tens of milliseconds
// of a restart.
var fastReconnect = grpc.WithConnectParams(grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1.5, Jitter: 0.2, MaxDelay: 100 * time.Millisecond},
	MinConnectTimeout: 2 * time.Second,
})

// dial returns a client of the machine's address whose calls wait for the
// server to be back instead of failing while it is down.
func (m *machine) dial() *client.Client {
	m.t.Helper()
	cl, err := client.Dial(m.addr, client.Options{
		Token:   token,
		Backoff: client.Backoff{Min: 5 * time.Millisecond, Max: 100 * time.Millisecond},
		DialOptions: []grpc.DialOption{
			fastReconnect,
			grpc.WithDefaultCallOptions(grpc.WaitForReady(true)),
		},
	})
	if err != nil {
		m.t.Fatal(err)
	}
	m.t.Cleanup(func() { _ = cl.Close() })
	return cl
}
