// Package childproc runs the pinned helper binaries that rein's tests and
// benchmarks start as servers (etcd members in internal/etcdproc,
// versitygw in internal/s3test): it finds a binary, starts it as a child
// of this process, and signals, kills and reaps it. On Linux a child is
// killed when the thread that started it exits, so a crashed test or
// benchmark leaves no server behind.
//
// What a server is (its flags, its ports, when it is ready) stays with the
// package that runs it.
package childproc

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// Proc is a running child process.
type Proc struct {
	what string // names the process in errors: "etcd member m0", "versitygw"
	cmd  *exec.Cmd
	done chan struct{}
	err  error // the process's exit, set before done closes
}

// Start starts cmd with its output (stdout and stderr) to log; what names
// the process in errors. The error of a process that did not start is
// cmd.Start's, for the caller to say what it was starting.
func Start(what string, cmd *exec.Cmd, log io.Writer) (*Proc, error) {
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Proc{what: what, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Pid is the process's ID.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has exited, and how.
func (p *Proc) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Signal sends sig to the process; a process that has exited is not an
// error.
func (p *Proc) Signal(sig syscall.Signal) error {
	if exited, _ := p.Exited(); exited {
		return nil
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal %s (pid %d) with %v: %w", p.what, p.cmd.Process.Pid, sig, err)
	}
	return nil
}

// Kill sends SIGKILL (after SIGCONT, so a stopped process dies too) and
// waits for the process to exit.
func (p *Proc) Kill() error {
	if err := p.Signal(syscall.SIGCONT); err != nil {
		return err
	}
	if err := p.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-p.done
	return nil
}

// Stop ends the process with SIGTERM, as an operator would, and waits up to
// grace for it to exit before killing it.
func (p *Proc) Stop(grace time.Duration) error {
	if err := p.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
		return p.Kill()
	}
}

// FindBinary looks for the binary called name: $env, then each of dirs
// (the first that holds name wins), then .bin/name in the Go module that
// holds the working directory, then name on $PATH. The error says how to
// build it.
func FindBinary(name, env string, dirs ...string) (string, error) {
	if p := os.Getenv(env); p != "" {
		if !isExec(p) {
			return "", fmt.Errorf("$%s is %s, which is not an executable file", env, p)
		}
		return p, nil
	}
	for _, d := range dirs {
		if p := filepath.Join(d, name); isExec(p) {
			return p, nil
		}
	}
	if root, ok := moduleRoot(); ok {
		if p := filepath.Join(root, ".bin", name); isExec(p) {
			return p, nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("no %s binary: build the pinned one with `bash scripts/tools.sh` (it writes .bin/%s), or name one with $%s", name, name, env)
}

// moduleRoot is the nearest directory at or above the working directory
// that holds a go.mod.
func moduleRoot() (string, bool) {
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, true
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", false
		}
		dir = up
	}
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}
