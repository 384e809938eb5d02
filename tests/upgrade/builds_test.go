package upgrade_test

// The builds the upgrade tests start: the old one, built from git once per
// commit, and this checkout's; and the servers and CLI calls of either.

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/reinhq/rein/tests/internal/reinbin"
)

// defaultOldCommit is the last commit before issue 49's work: the build an
// operator upgrades from.
const defaultOldCommit = "d9140e6"

// moduleRoot is this checkout's root.
func moduleRoot(t *testing.T) string {
	t.Helper()
	_, here, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot tell where the module is")
	}
	return filepath.Join(filepath.Dir(here), "..", "..")
}

// oldBuild is the rein binary of commit (REIN_UPGRADE_OLD_COMMIT or
// defaultOldCommit), built from git's copy of that commit once and kept
// under the temporary directory by its full hash. It skips the test when
// git or the commit is missing.
func oldBuild(t *testing.T, root string) (bin, commit string) {
	t.Helper()
	commit = os.Getenv("REIN_UPGRADE_OLD_COMMIT")
	if commit == "" {
		commit = defaultOldCommit
	}
	// CI (scripts/test.sh) sets REIN_REQUIRE_OLD_BUILD: there a missing
	// commit fails the test rather than skip it.
	skip := t.Skipf
	if os.Getenv("REIN_REQUIRE_OLD_BUILD") != "" {
		skip = t.Fatalf
	}
	if _, err := exec.LookPath("git"); err != nil {
		skip("the old build is built from git, and git is not on PATH: %v", err)
	}
	if err := exec.Command("git", "-C", root, "cat-file", "-e", commit+"^{commit}").Run(); err != nil {
		skip("git history lacks commit %s (a shallow clone?): run git fetch --unshallow, or set REIN_UPGRADE_OLD_COMMIT to a commit it holds", commit)
	}
	out, err := exec.Command("git", "-C", root, "rev-parse", commit+"^{commit}").Output()
	if err != nil {
		t.Fatalf("git rev-parse %s: %v", commit, err)
	}
	full := strings.TrimSpace(string(out))
	dir := filepath.Join(os.TempDir(), "rein-upgrade-old", full)
	bin = filepath.Join(dir, "rein")
	if _, err := os.Stat(bin); err == nil {
		t.Logf("old build %s: %s (built before)", commit, bin)
		return bin, commit
	}
	src := filepath.Join(dir, "src")
	if err := os.RemoveAll(src); err != nil {
		t.Fatal(err)
	}
	if err := extract(root, full, src); err != nil {
		t.Fatalf("git archive %s: %v", commit, err)
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	tmp := bin + ".tmp"
	build := exec.CommandContext(ctx, "go", "build", "-o", tmp, "./cmd/rein")
	build.Dir = src
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build rein at %s: %v\n%s", commit, err, b)
	}
	if err := os.Rename(tmp, bin); err != nil {
		t.Fatal(err)
	}
	t.Logf("old build %s: built in %s", commit, time.Since(start).Round(time.Second))
	return bin, commit
}

// extract writes git's tree of commit into dir (git archive, read as tar).
func extract(root, commit, dir string) error {
	cmd := exec.Command("git", "-C", root, "archive", "--format=tar", commit)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	tr := tar.NewReader(out)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		path := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(path, dir+string(filepath.Separator)) {
			return fmt.Errorf("archive entry %q escapes %s", h.Name, dir)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(path, 0o755)
		case tar.TypeReg:
			err = writeEntry(path, tr, os.FileMode(h.Mode)&0o755|0o600)
		case tar.TypeSymlink:
			// third_party and .bin link to shared tools; the build needs
			// neither.
		}
		if err != nil {
			return err
		}
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("%v: %s", err, stderr.String())
	}
	return nil
}

func writeEntry(path string, r io.Reader, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func TestMain(m *testing.M) {
	code := m.Run()
	if newBuilt != "" {
		_ = os.RemoveAll(filepath.Dir(newBuilt))
	}
	os.Exit(code)
}

// newBuild is this checkout's rein, built once for the package's tests.
func newBuild(t *testing.T) string {
	t.Helper()
	newOnce.Do(func() {
		dir, err := os.MkdirTemp("", "rein-upgrade-new-")
		if err != nil {
			newErr = err
			return
		}
		newBuilt = filepath.Join(dir, "rein")
		newErr = reinbin.Build(newBuilt)
	})
	if newErr != nil {
		t.Fatal(newErr)
	}
	return newBuilt
}

var (
	newOnce  sync.Once
	newBuilt string
	newErr   error
)

// server is one `rein serve` process.
type server struct {
	tag    string // names it in a log of several servers
	cmd    *exec.Cmd
	addr   string
	log    *bytes.Buffer
	mu     *sync.Mutex
	exited chan struct{}
}

var servingRe = regexp.MustCompile(`msg="rein serving" addr=(\S+)`)

// serve starts bin's rein serve on db and waits until it logs its address.
func serve(t *testing.T, bin, db, tools string) *server {
	t.Helper()
	return start(t, bin, "--db", db, "--listen", "127.0.0.1:0", "--tools", "fixture:"+tools)
}

// start starts bin's rein serve with args (and --reflection=false) and
// waits until it logs its address.
func start(t *testing.T, bin string, args ...string) *server {
	t.Helper()
	s := &server{log: &bytes.Buffer{}, mu: &sync.Mutex{}, exited: make(chan struct{})}
	s.cmd = exec.Command(bin, append(append([]string{"serve"}, args...), "--reflection=false")...)
	s.cmd.Env = cleanEnv()
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start %s serve: %v", bin, err)
	}
	serving := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if line := sc.Text(); !strings.Contains(line, `msg="finished call"`) || !strings.Contains(line, "grpc.code=OK") {
				s.mu.Lock()
				s.log.WriteString(line + "\n")
				s.mu.Unlock()
			}
			if m := servingRe.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case serving <- m[1]:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		_ = s.cmd.Wait()
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
	select {
	case s.addr = <-serving:
	case <-s.exited:
		t.Fatalf("%s serve exited before serving:\n%s", bin, s.logText())
	case <-time.After(30 * time.Second):
		t.Fatalf("%s serve did not log its address within 30s:\n%s", bin, s.logText())
	}
	return s
}

func (s *server) logText() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.String()
}

// stop sends SIGTERM and waits for a clean exit.
func (s *server) stop(t *testing.T) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("rein serve did not exit within 30s of SIGTERM:\n%s", s.logText())
	}
	if code := s.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("rein serve after SIGTERM: exit %d, want 0:\n%s", code, s.logText())
	}
}

// kill sends SIGKILL and waits for the process to be reaped.
func (s *server) kill(t *testing.T) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL: %v", err)
	}
	<-s.exited
}

// cleanEnv is the environment without REIN_ variables (a profile, a
// token) that would change what the CLI does.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REIN_") {
			env = append(env, kv)
		}
	}
	return append(env, "XDG_CONFIG_HOME="+os.TempDir()+"/rein-upgrade-no-config")
}

// cli runs bin with args and returns its stdout, failing the test unless
// it exits with want.
func cli(t *testing.T, bin string, want int, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = cleanEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("%s %s: %v", filepath.Base(bin), strings.Join(args, " "), err)
	}
	if code := cmd.ProcessState.ExitCode(); code != want {
		t.Fatalf("%s %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", bin, strings.Join(args, " "), code, want, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// summary decodes a run's summary (rein run, inspect, approve, input --json).
func summary(t *testing.T, out string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("not a run's summary: %v\n%s", err, out)
	}
	return m
}
