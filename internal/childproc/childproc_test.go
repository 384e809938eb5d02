package childproc

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const testEnv = "REIN_CHILDPROC_TEST_BIN"

func executable(t *testing.T, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// FindBinary takes $env first, then the first of dirs that holds the
// binary; the twins: $env naming no executable is refused naming the
// variable, and with the binary nowhere the error says how to build it.
func TestFindBinary(t *testing.T) {
	first, second := t.TempDir(), t.TempDir()
	want := executable(t, second, "srv")
	executable(t, t.TempDir(), "srv") // not in dirs
	if got, err := FindBinary("srv", testEnv, first, second); err != nil || got != want {
		t.Fatalf("FindBinary over dirs = %q, %v; want %s", got, err, want)
	}
	named := executable(t, t.TempDir(), "other")
	t.Setenv(testEnv, named)
	if got, err := FindBinary("srv", testEnv, second); err != nil || got != named {
		t.Fatalf("FindBinary with $%s = %q, %v; want %s", testEnv, got, err, named)
	}
	notExec := filepath.Join(t.TempDir(), "srv")
	if err := os.WriteFile(notExec, []byte("not a program"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(testEnv, notExec)
	if _, err := FindBinary("srv", testEnv, second); err == nil || !strings.Contains(err.Error(), testEnv) {
		t.Fatalf("FindBinary with $%s naming no executable: %v; want an error naming the variable", testEnv, err)
	}
	t.Setenv(testEnv, "")
	t.Setenv("PATH", "")
	t.Chdir(t.TempDir()) // no go.mod above it
	if _, err := FindBinary("srv", testEnv, first); err == nil || !strings.Contains(err.Error(), "bash scripts/tools.sh") {
		t.Fatalf("FindBinary with no srv anywhere: %v; want an error saying how to build it", err)
	}
}

// A child's output goes to its log and its exit is reported; a stopped
// child is killed; Stop ends one that honours SIGTERM within its grace.
// The twin: a binary that cannot start is an error and no process.
func TestProc(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	var log bytes.Buffer
	p, err := Start("echo", exec.Command(sh, "-c", "echo started"), &log)
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if exited, err := p.Exited(); !exited || err != nil || log.String() != "started\n" {
		t.Fatalf("a child that echoed: exited %v (%v), log %q; want a clean exit and its line", exited, err, log.String())
	}

	p, err = Start("sleeper", exec.Command(sh, "-c", "exec sleep 60"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if exited, _ := p.Exited(); exited {
		t.Fatal("the sleeper exited at once")
	}
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if exited, err := p.Exited(); !exited || err == nil {
		t.Fatalf("after Kill: exited %v (%v); want a killed process", exited, err)
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("a signal to an exited child: %v; want none", err)
	}

	p, err = Start("sleeper", exec.Command(sh, "-c", "exec sleep 60"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := p.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took >= 30*time.Second {
		t.Fatalf("Stop took the whole grace (%v); want SIGTERM to end it", took)
	}

	if p, err := Start("nothing", exec.Command(filepath.Join(t.TempDir(), "missing")), io.Discard); err == nil || p != nil {
		t.Fatalf("Start of a missing binary: %v, %v; want an error", p, err)
	}
}
