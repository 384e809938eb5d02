//go:build unix

package configfile

import "syscall"

// nonblock opens without waiting: an open(2) of a FIFO for reading returns
// at once instead of waiting for a writer. It changes nothing for a
// regular file.
const nonblock = syscall.O_NONBLOCK
