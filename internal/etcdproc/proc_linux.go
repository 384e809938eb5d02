package etcdproc

import "syscall"

// sysProcAttr kills the member when the thread that started it exits, so a
// crashed test or benchmark leaves no etcd running.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
