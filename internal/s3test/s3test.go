// Package s3test starts an S3-compatible object store for tests: the pinned
// versitygw binary (.bin/versitygw, built by `bash scripts/tools.sh` from
// tools/go.mod, or $REIN_VERSITYGW_BIN), serving its posix backend from a
// directory under the test's t.TempDir(), on a free 127.0.0.1 port, with
// fixed root credentials and one bucket. A test opens the bucket through
// gocloud.dev/blob (URL, Open), kills the server (SIGKILL) and restarts it
// on the same port and data; t.Cleanup kills whatever is left.
//
// gocloud.dev/blob's s3blob takes its credentials from the AWS SDK's
// default chain, not from the URL: a test in this process calls Setenv (or
// Open, which does), so it cannot run in parallel; a child process (`rein
// serve`) gets Env appended to its environment.
//
// Without the binary a test skips, saying how to build it, unless
// REIN_REQUIRE_S3=1 (scripts/test.sh sets it): then it fails. Only tests
// import this package.
package s3test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/s3blob" // s3:// URLs

	"github.com/reinhq/rein/internal/childproc"
)

// RequireEnv, set to 1, makes a test without the versitygw binary fail
// instead of skipping.
const RequireEnv = "REIN_REQUIRE_S3"

// BinEnv names a versitygw binary to use instead of the one FindBinary
// looks for.
const BinEnv = "REIN_VERSITYGW_BIN"

// The fixed identity of every test server: versitygw's root account, the
// region it signs for, and the one bucket it serves.
const (
	AccessKey = "rein-test-access"
	SecretKey = "rein-test-secret"
	Region    = "us-east-1"
	Bucket    = "rein-test"
)

// ReadyWithin bounds every wait for the server to answer.
const ReadyWithin = 30 * time.Second

// healthPath is the GET path versitygw answers 200 on (its --health): "-"
// is no bucket name, so it shadows no bucket.
const healthPath = "/-/health"

// Server is a running (or killed) versitygw serving one bucket.
type Server struct {
	// Endpoint is the S3 endpoint, http://127.0.0.1:PORT.
	Endpoint string
	// Bucket is the bucket the server holds from the start.
	Bucket string
	// AccessKey and SecretKey are the root account's credentials.
	AccessKey, SecretKey string
	// Region is the region requests are signed for.
	Region string
	// Dir is the data directory: the bucket's objects are files under
	// Dir/Bucket.
	Dir string

	t    testing.TB
	bin  string
	addr string // 127.0.0.1:PORT
	log  *logBuffer

	mu   sync.Mutex
	proc *childproc.Proc // nil: killed and not restarted
}

// Binary is the versitygw binary, or skips t (fails it under
// REIN_REQUIRE_S3=1) when there is none.
func Binary(t testing.TB) string {
	t.Helper()
	bin, err := FindBinary()
	if err != nil {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("%v (%s=1 requires it)", err, RequireEnv)
		}
		t.Skipf("%v; skipping this test", err)
	}
	return bin
}

// Start starts a server with an empty bucket and waits until it answers.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{
		Bucket: Bucket, AccessKey: AccessKey, SecretKey: SecretKey, Region: Region,
		Dir: filepath.Join(t.TempDir(), "s3"),
		t:   t, bin: Binary(t), log: &logBuffer{},
	}
	// versitygw's posix backend serves every directory at the top of its
	// root as a bucket.
	if err := os.MkdirAll(filepath.Join(s.Dir, s.Bucket), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.cleanup)
	// A port free a moment ago may be taken before versitygw listens on
	// it: then it exits at once, and another port is tried.
	var err error
	for range 3 {
		s.addr, err = freeAddr()
		if err != nil {
			t.Fatal(err)
		}
		s.Endpoint = "http://" + s.addr
		if err = s.start(); err == nil {
			return s
		}
		if !errors.Is(err, errExited) {
			break
		}
	}
	t.Fatal(err)
	return nil
}

// URL is the gocloud.dev/blob URL of the bucket (path-style requests over
// plain HTTP to Endpoint); the credentials come from the environment (Env,
// Setenv).
func (s *Server) URL() string {
	q := url.Values{}
	q.Set("endpoint", s.Endpoint)
	q.Set("region", s.Region)
	q.Set("use_path_style", "true")
	q.Set("disable_https", "true")
	return "s3://" + s.Bucket + "?" + q.Encode()
}

// Env is the environment (KEY=value) that gives the AWS SDK the server's
// credentials, for a child process: append it to os.Environ(), later
// entries win. It also empties the variables that would otherwise send
// the SDK elsewhere (a session token, a profile, an endpoint).
func (s *Server) Env() []string {
	return []string{
		"AWS_ACCESS_KEY_ID=" + s.AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + s.SecretKey,
		"AWS_REGION=" + s.Region,
		"AWS_SESSION_TOKEN=",
		"AWS_PROFILE=",
		"AWS_ENDPOINT_URL=",
		"AWS_ENDPOINT_URL_S3=",
	}
}

// Setenv sets Env in this process's environment for the rest of t, as
// t.Setenv does (so t cannot be parallel).
func (s *Server) Setenv(t testing.TB) {
	t.Helper()
	for _, kv := range s.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
}

// Open calls Setenv and opens the bucket with gocloud.dev/blob; it is
// closed at t's cleanup.
func (s *Server) Open(t testing.TB) *blob.Bucket {
	t.Helper()
	s.Setenv(t)
	b, err := blob.OpenBucket(context.Background(), s.URL())
	if err != nil {
		t.Fatalf("open %s: %v", s.URL(), err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// Kill kills the server with SIGKILL and waits until it is gone.
func (s *Server) Kill() {
	s.t.Helper()
	s.mu.Lock()
	p := s.proc
	s.proc = nil
	s.mu.Unlock()
	if p == nil {
		s.t.Fatal("kill versitygw: it is not running")
	}
	if err := p.Kill(); err != nil {
		s.t.Fatal(err)
	}
}

// Restart starts the server, killed by Kill, again on the same port with
// the same data, and waits until it answers.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	running := s.proc != nil
	s.mu.Unlock()
	if running {
		t.Fatal("restart versitygw: it is running; Kill it first")
	}
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
}

// start runs versitygw on s.addr and waits (ReadyWithin at most) until it
// answers; a process that exits meanwhile fails the wait at once with
// errExited.
func (s *Server) start() error {
	p, err := launch(s.bin, s.addr, s.Dir, s.log)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), ReadyWithin)
	defer cancel()
	if err := waitReady(ctx, p, s.Endpoint); err != nil {
		if kerr := p.Kill(); kerr != nil {
			err = errors.Join(err, kerr)
		}
		return fmt.Errorf("%w; its log:\n%s", err, s.log.tail(4096))
	}
	s.mu.Lock()
	s.proc = p
	s.mu.Unlock()
	return nil
}

// cleanup kills the server and, when the test failed, logs the tail of its
// log.
func (s *Server) cleanup() {
	s.mu.Lock()
	p := s.proc
	s.proc = nil
	s.mu.Unlock()
	if p != nil {
		if err := p.Kill(); err != nil {
			s.t.Errorf("cleanup: %v", err)
		}
	}
	if s.t.Failed() {
		s.t.Logf("versitygw log (tail):\n%s", s.log.tail(4096))
	}
}

// errExited is the error of a server process that exited before it
// answered.
var errExited = errors.New("versitygw exited before it answered")

// launch starts versitygw serving the posix directory dir on addr, its
// output to log.
func launch(bin, addr, dir string, log *logBuffer) (*childproc.Proc, error) {
	cmd := exec.Command(bin,
		"--access", AccessKey, "--secret", SecretKey, "--region", Region,
		"--port", addr, "--health", healthPath, "--quiet",
		"posix", dir)
	// versitygw reads many settings from the environment (VGW_*, ROOT_*,
	// LOGFILE, …): it gets none of this process's.
	cmd.Env = []string{}
	p, err := childproc.Start("versitygw", cmd, log)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	return p, nil
}

// waitReady polls endpoint's health path until it answers 200, ctx ends,
// or p exits.
func waitReady(ctx context.Context, p *childproc.Proc, endpoint string) error {
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	var last error
	for {
		if exited, err := p.Exited(); exited {
			return fmt.Errorf("%w (%v)", errExited, err)
		}
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		last = ready(rctx, client, endpoint)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("versitygw at %s did not answer in time: %w (%v)", endpoint, ctx.Err(), last)
		case <-p.Done():
		case <-time.After(20 * time.Millisecond): // poll again
		}
	}
}

// ready asks the server at endpoint whether it serves.
func ready(ctx context.Context, client *http.Client, endpoint string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+healthPath, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s answered %s", healthPath, resp.Status)
	}
	return nil
}

// FindBinary looks for the versitygw binary: $REIN_VERSITYGW_BIN, then
// .bin/versitygw in the Go module that holds the working directory, then
// versitygw on $PATH. The error says how to build it.
func FindBinary() (string, error) {
	return childproc.FindBinary("versitygw", BinEnv)
}

// freeAddr is a 127.0.0.1 address whose port was free a moment ago.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port on 127.0.0.1: %w", err)
	}
	defer l.Close()
	return "127.0.0.1:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port), nil
}
