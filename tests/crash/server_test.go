package crash_test

// The server under test: a `rein serve` process over one database, one
// fixture ledger and, after its first start, one address, started again as
// often as a test kills it. Each start is a generation; every generation's
// stderr goes to one log, each line prefixed with its generation.

import (
	"bufio"
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
)

const (
	// token is the driver's bearer token; the tokens file lists its hash.
	token = "crash-test-token"
	// readTool and writeTool are the fixture tools every run is granted.
	readTool  = "records.get"
	writeTool = "records.update"
	// receiptJSON is the write's receipt, as the fixture file gives it.
	receiptJSON = `{"update_id": "u_1", "status": "applied"}`
)

// fixturesJSON is the tools file: one read, one write.
var fixturesJSON = `{
  "` + readTool + `": [{"output": {"record": "R-1", "balance": "10.00"}}],
  "` + writeTool + `": [{"preview": {"set": {"balance": "0.00"}}, "receipt": ` + receiptJSON + `}]
}`

// instance is what stays the same across a server's generations.
type instance struct {
	dir                       string
	db, ledger, tools, tokens string
	addr                      string // "" until the first generation served
	gens                      int
	log                       *serverLog
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

// tail is the last n lines.
func (l *serverLog) tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines[max(len(l.lines)-n, 0):], "\n")
}

// grep is every line with the prefix ("g3| " for generation 3, "" for
// all) that contains s.
func (l *serverLog) grep(prefix, s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.HasPrefix(line, prefix) && strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

// newInstance writes the tools and tokens files into a temporary directory
// that will hold the database and the ledger.
func newInstance(t *testing.T) *instance {
	t.Helper()
	dir := t.TempDir()
	in := &instance{
		dir:    dir,
		db:     filepath.Join(dir, "rein.db"),
		ledger: filepath.Join(dir, "ledger.tsv"),
		tools:  filepath.Join(dir, "tools.json"),
		tokens: filepath.Join(dir, "tokens.json"),
		log:    &serverLog{},
	}
	sum := sha256.Sum256([]byte(token))
	tokens := fmt.Sprintf(`{"principals": [{"id": "driver", "tenant": "crash", "roles": ["operator", "approver"], "token_sha256": %q}]}`,
		hex.EncodeToString(sum[:]))
	for path, data := range map[string]string{in.tools: fixturesJSON, in.tokens: tokens} {
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("rein serve's log (last 80 lines of %d generations):\n%s", in.gens, in.log.tail(80))
		}
	})
	return in
}

// server is one generation: one `rein serve` process.
type server struct {
	gen     int
	cmd     *exec.Cmd
	serving chan struct{} // closed once the process logged its address
	addr    string        // the address, set before serving closes
	exited  chan struct{} // closed once the process was reaped
	state   *os.ProcessState
	ready   bool // waitServing saw its health check answer
}

var servingRe = regexp.MustCompile(`msg="rein serving" addr=(\S+)`)

// start starts a generation with env added to the environment (a
// failpoint, say). It does not wait for it to serve.
func (in *instance) start(t *testing.T, env ...string) *server {
	t.Helper()
	in.gens++
	s := &server{gen: in.gens, serving: make(chan struct{}), exited: make(chan struct{})}
	listen := in.addr
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	s.cmd = exec.Command(reinBin, "--db", in.db, "serve",
		"--listen", listen,
		"--tools", "fixture:"+in.tools,
		"--fixture-ledger", in.ledger,
		"--tokens", in.tokens,
		"--rate", "0",
		"--reflection=false",
		"--shutdown-timeout", "20s")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REIN_") {
			s.cmd.Env = append(s.cmd.Env, kv)
		}
	}
	s.cmd.Env = append(s.cmd.Env, env...)
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
			// Calls that went well are noise beside the rest.
			if !strings.Contains(line, `msg="finished call"`) || !strings.Contains(line, "grpc.code=OK") {
				in.log.add(fmt.Sprintf("g%d| %s", s.gen, line))
			}
			if m := servingRe.FindStringSubmatch(line); m != nil && s.addr == "" {
				s.addr = m[1]
				close(s.serving)
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	go func() {
		<-scanned // Wait closes the pipe: read it to the end first
		_ = s.cmd.Wait()
		s.state = s.cmd.ProcessState
		close(s.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-s.exited:
		default:
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
	})
	return s
}

// running reports whether the process has not exited.
func (s *server) running() bool {
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// waitServing waits until the generation logged its address and its
// health check answers SERVING. The first generation's address becomes the
// instance's.
func (in *instance) waitServing(t *testing.T, s *server) {
	t.Helper()
	if s.ready {
		return
	}
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	select {
	case <-s.serving:
		if in.addr == "" {
			in.addr = s.addr
		} else if s.addr != in.addr {
			t.Fatalf("generation %d serves on %s, want %s", s.gen, s.addr, in.addr)
		}
	case <-s.exited:
		t.Fatalf("rein serve (generation %d) exited before serving: %v", s.gen, s.state)
	case <-deadline.C:
		t.Fatalf("rein serve (generation %d) did not log its address within 30s", s.gen)
	}
	conn, err := grpc.NewClient(in.addr, grpc.WithTransportCredentials(insecure.NewCredentials()), fastReconnect)
	if err != nil {
		t.Fatal(err)
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
			s.ready = true
			return
		}
		last = err
		select {
		case <-tick.C:
		case <-s.exited:
			t.Fatalf("rein serve (generation %d) exited before its health check answered: %v", s.gen, s.state)
		case <-deadline.C:
			t.Fatalf("rein serve's health check (generation %d) did not answer SERVING within 30s: %v", s.gen, last)
		}
	}
}

// kill sends SIGKILL and waits for the process to be reaped. It fails the
// test if the process had exited on its own.
func (s *server) kill(t *testing.T) {
	t.Helper()
	err := s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
	if err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("SIGKILL generation %d: %v", s.gen, err)
	}
	if ws, ok := s.state.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("rein serve (generation %d) exited on its own (%v) before it was killed", s.gen, s.state)
	}
}

// stop sends SIGTERM and checks that the server stops cleanly: exit 0 and
// the database closed.
func (in *instance) stop(t *testing.T, s *server) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM generation %d: %v", s.gen, err)
	}
	code := s.wait(t, 30*time.Second)
	if code != 0 {
		t.Fatalf("rein serve (generation %d) after SIGTERM: %v, want exit 0", s.gen, s.state)
	}
	if len(in.log.grep(fmt.Sprintf("g%d| ", s.gen), "the database is closed")) == 0 {
		t.Errorf("rein serve (generation %d) does not say it closed the database", s.gen)
	}
}

// wait waits for the process to exit by itself and returns its exit code
// (-1 when a signal ended it).
func (s *server) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-s.exited:
	case <-timer.C:
		t.Fatalf("rein serve (generation %d) did not exit within %v", s.gen, d)
	}
	return s.state.ExitCode()
}

// fastReconnect makes a client reconnect within a few tens of milliseconds
// of a restart (gRPC's default backoff grows to two minutes).
var fastReconnect = grpc.WithConnectParams(grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1.5, Jitter: 0.2, MaxDelay: 100 * time.Millisecond},
	MinConnectTimeout: 2 * time.Second,
})

// dial returns a client of the instance's address, with the driver's
// token, whose watches reconnect with backoff (zero: the default). Its
// calls wait for the server to be back (WaitForReady) instead of failing
// at once while it is down.
func (in *instance) dial(t *testing.T, backoff client.Backoff) *client.Client {
	t.Helper()
	cl, err := client.Dial(in.addr, client.Options{Token: token, Backoff: backoff, DialOptions: []grpc.DialOption{
		fastReconnect,
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true)),
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}
