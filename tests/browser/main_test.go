// Package browser tests rein's web console in a real headless Chromium
// (Debian's chromium package), driven by chromedp, against a real
// `rein serve --http` on 127.0.0.1 built from this checkout.
//
// Without chromium the tests skip, naming the package to install; with
// REIN_REQUIRE_BROWSER=1 (scripts/test.sh sets it, and scripts/tools.sh
// installs chromium) they fail instead, so CI always runs them.
package browser

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

var update = flag.Bool("update", false, "write the console's screenshot, docs/console.png, from the test's flow")

// reinBin is the rein binary TestMain builds.
var reinBin string

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	tmp, err := os.MkdirTemp("", "rein-browser-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	reinBin = filepath.Join(tmp, "rein")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-o", reinBin, "./cmd/rein")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build ./cmd/rein: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// chromium finds Debian's chromium, or skips (fails, when the test command
// requires the browser tests) naming the package to install.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no chromium on PATH: install Debian's chromium package (apt-get install chromium) to run the web console's browser tests"
	if os.Getenv("REIN_REQUIRE_BROWSER") == "1" {
		t.Fatal(msg + " (REIN_REQUIRE_BROWSER=1: they may not be skipped)")
	}
	t.Skip(msg)
	return ""
}

// The principals of the server's tokens file; a token is its ID + "-token".
var principals = []struct{ id, roles string }{
	{"ana", `["approver", "operator"]`}, // reviews in the browser
	{"ops", `["operator"]`},             // starts the runs, over gRPC
	{"vic", `["viewer"]`},               // may look, not decide
}

func tokenOf(id string) string { return id + "-token" }

// server is a real rein serve, restartable on the same ports and store.
type server struct {
	t          *testing.T
	dir        string
	grpcAddr   string
	httpAddr   string
	cmd        *exec.Cmd
	runs       reinv1.RunServiceClient
	conn       *grpc.ClientConn
	logs       *os.File
	stopped    chan struct{}
	restarting bool
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

func startServer(t *testing.T) *server {
	t.Helper()
	dir := t.TempDir()
	var entries []string
	for _, p := range principals {
		sum := sha256.Sum256([]byte(tokenOf(p.id)))
		entries = append(entries, fmt.Sprintf(`{"id": %q, "tenant": "acme", "roles": %s, "token_sha256": %q}`, p.id, p.roles, hex.EncodeToString(sum[:])))
	}
	write(t, filepath.Join(dir, "tokens.json"), `{"principals": [`+strings.Join(entries, ", ")+`]}`)
	write(t, filepath.Join(dir, "tools.json"), fixtureTools)
	s := &server{t: t, dir: dir, grpcAddr: freeAddr(t), httpAddr: freeAddr(t)}
	logs, err := os.Create(filepath.Join(dir, "serve.log"))
	if err != nil {
		t.Fatal(err)
	}
	s.logs = logs
	s.start()
	conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	s.conn, s.runs = conn, reinv1.NewRunServiceClient(conn)
	t.Cleanup(func() {
		conn.Close()
		s.stop()
		logs.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logs.Name()); err == nil {
				t.Logf("rein serve's log:\n%s", b)
			}
		}
	})
	return s
}

func (s *server) start() {
	s.t.Helper()
	s.cmd = exec.Command(reinBin, "serve", "--db", filepath.Join(s.dir, "rein.db"),
		"--listen", s.grpcAddr, "--http", s.httpAddr, "--tokens", filepath.Join(s.dir, "tokens.json"),
		"--tools", "fixture:"+filepath.Join(s.dir, "tools.json"), "--shutdown-timeout", "5s", "--rate", "0")
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.stopped = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { cmd.Wait(); close(done) }(s.cmd, s.stopped)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(s.url())
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-s.stopped:
			s.t.Fatalf("rein serve exited before it served %s", s.url())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("rein serve did not serve %s within 30s: %v", s.url(), err)
		}
	}
}

// stop stops the server as an operator does (SIGTERM), and waits.
func (s *server) stop() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.stopped:
	case <-time.After(20 * time.Second):
		s.cmd.Process.Kill()
		<-s.stopped
	}
	s.cmd = nil
}

func (s *server) url() string { return "http://" + s.httpAddr + "/" }

// as is a context carrying id's token, for the gRPC client.
func as(ctx context.Context, id string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tokenOf(id))
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

// browser is one headless Chromium for the whole test; each tab is a
// context of it.
func browser(t *testing.T, ctx context.Context) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(1280, 900))
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	b, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(b); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return b
}

// tab opens a new tab (its own sessionStorage: its own sign-in).
func tab(t *testing.T, b context.Context) context.Context {
	t.Helper()
	ctx, cancel := chromedp.NewContext(b)
	t.Cleanup(cancel)
	return ctx
}

// shots is where the screenshots go: kept and printed when a test fails
// (or with REIN_KEEP_SCREENSHOTS=1), removed otherwise.
type shots struct {
	t   *testing.T
	dir string
}

func newShots(t *testing.T) *shots {
	dir, err := os.MkdirTemp("", "rein-console-screenshots-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("REIN_KEEP_SCREENSHOTS") == "1" {
			t.Logf("screenshots of the console's pages are in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	return &shots{t: t, dir: dir}
}

// take saves the tab's page as NAME.png.
func (s *shots) take(ctx context.Context, name string) string {
	s.t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		s.t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(s.dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		s.t.Fatal(err)
	}
	return path
}
