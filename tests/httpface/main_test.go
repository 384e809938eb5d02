// Package httpface_test attacks `rein serve --http` from outside, as issue
// 26 did, against a rein binary built without the race detector (whose
// shadow memory would hide what the server itself holds):
//
//   - TestMemoryIsBoundedBeforeAuth sends hostile bodies twenty at a time
//     and reads the server's peak memory from /proc.
//   - TestDecodingIsBounded sends requests that are cheap on the wire and
//     dear decoded to both ports, twenty at a time, and reads the same.
//   - TestStalledConnectionsAreClosed holds connections half-sent and idle
//     and checks the server closes them on its timeouts.
package httpface_test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reinhq/rein/tests/internal/reinbin"
)

// reinBin is the rein binary under test, built by TestMain.
var reinBin string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	tmp, err := os.MkdirTemp("", "rein-httpface-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	reinBin = filepath.Join(tmp, "rein")
	if err := reinbin.Build(reinBin); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// server is a `rein serve --http` process.
type server struct {
	cmd  *exec.Cmd
	web  string // the HTTP face's address
	mu   sync.Mutex
	log  strings.Builder
	done chan struct{}
}

// serve starts rein serve with --http on a free port and args, and waits
// until the HTTP face listens.
func serve(t *testing.T, args ...string) *server {
	t.Helper()
	dir := t.TempDir()
	all := append([]string{"serve", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--db", filepath.Join(dir, "rein.db")}, args...)
	s := &server{cmd: exec.Command(reinBin, all...), done: make(chan struct{})}
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	re := regexp.MustCompile(`http_addr=(\S+)`)
	go func() {
		defer close(s.done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			s.mu.Lock()
			s.log.WriteString(sc.Text() + "\n")
			s.mu.Unlock()
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		_ = s.cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = s.cmd.Process.Kill()
		<-s.done
		if t.Failed() {
			t.Logf("rein serve's log:\n%s", s.output())
		}
	})
	select {
	case s.web = <-addr:
	case <-s.done:
		t.Fatalf("rein serve exited before it served:\n%s", s.output())
	case <-time.After(30 * time.Second):
		t.Fatalf("rein serve did not serve --http within 30s:\n%s", s.output())
	}
	return s
}

func (s *server) output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.String()
}

// peakRSS is the server's peak resident set (VmHWM), in bytes.
func (s *server) peakRSS(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		t.Skipf("no /proc here to read a process's memory: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in the server's /proc status")
	return 0
}
