//go:build !linux

package bolt

import "os"

// fdatasync syncs f: where there is no fdatasync, with fsync.
func fdatasync(f *os.File) error { return f.Sync() }
