package bolt

import (
	"os"

	"golang.org/x/sys/unix"
)

// fdatasync syncs f's data, and its size when that changed, as bbolt does
// its file's.
func fdatasync(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }
