// Package rofs makes a store file read-only for tests of rein's read-only
// opens. Only tests import it.
package rofs

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// ReadOnly makes path and its directory read-only (modes 0400 and 0500)
// and returns the path to open. Root ignores modes, so for root the
// directory is bind-mounted read-only and the path under the mount is
// returned; the test is skipped when that cannot be done.
func ReadOnly(t *testing.T, path string) string {
	t.Helper()
	dir := filepath.Dir(path)
	if err := os.Chmod(path, 0o400); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(dir, 0o700) })
	if os.Geteuid() != 0 {
		return path
	}
	ro := t.TempDir()
	if out, err := exec.Command("mount", "--bind", "-o", "ro", dir, ro).CombinedOutput(); err != nil {
		t.Skipf("root, and cannot mount a read-only bind mount: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", ro).Run() })
	path = filepath.Join(ro, filepath.Base(path))
	if f, err := os.OpenFile(path, os.O_RDWR, 0); !errors.Is(err, syscall.EROFS) {
		if err == nil {
			f.Close()
		}
		t.Skipf("the bind mount is not read-only: %v", err)
	}
	return path
}
