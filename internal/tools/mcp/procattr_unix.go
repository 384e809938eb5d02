//go:build unix

package mcp

import (
	"os/exec"
	"syscall"
)

// detach starts a stdio server in its own process group, so that a Ctrl+C
// meant for rein does not kill it before rein's graceful stop has finished
// the calls in flight; rein closes it after.
func detach(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} }
