//go:build unix

package bolt

import (
	"fmt"
	"os"
	"syscall"
)

// chownLike gives the file at path the owner and group of the file info
// describes, when they are not its own already: a compacted copy made by
// root must stay the rein serve's user's to open.
func chownLike(path string, info os.FileInfo) error {
	want, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	now, err := os.Stat(path)
	if err != nil {
		return err
	}
	if got, ok := now.Sys().(*syscall.Stat_t); ok && got.Uid == want.Uid && got.Gid == want.Gid {
		return nil
	}
	if err := os.Chown(path, int(want.Uid), int(want.Gid)); err != nil {
		return fmt.Errorf("%w: run rein compact as the file's owner (uid %d) or as root", err, want.Uid)
	}
	return nil
}

// syncDir fsyncs the directory dir, so that a rename in it is durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		_ = d.Close()
		return err
	}
	return d.Close()
}
