//go:build unix

package workspace

import (
	"io/fs"
	"syscall"
)

// nonblock opens without waiting: an open(2) of a FIFO for reading returns
// at once instead of waiting for a writer. It changes nothing for a
// regular file or a directory.
const nonblock = syscall.O_NONBLOCK

// links is the number of hard links to the file info describes.
func links(info fs.FileInfo) uint64 {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink)
	}
	return 1
}
