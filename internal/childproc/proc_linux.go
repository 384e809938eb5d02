package childproc

import "syscall"

// sysProcAttr kills the child when the thread that started it exits, so a
// crashed test or benchmark leaves no server running.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
