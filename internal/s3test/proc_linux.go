package s3test

import "syscall"

// sysProcAttr kills the server when the thread that started it exits, so a
// crashed test leaves no versitygw running.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
