package workspace

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// The tools read and write regular files and list directories; nothing
// else. A FIFO would hold a read until a writer comes (forever, and not
// through its context: open(2) waits in the kernel), a device or a socket
// is not a file's content. A regular file with more than one hard link is
// refused too: its other names may be outside the workspace (a link made
// to /etc/shadow, or to another tenant's file), so reading it reads a file
// from outside, and the os.Root cannot tell.
//
// Nothing here waits: the type is checked on the path first (Lstat, so a
// device is never opened), then the path is opened with O_NONBLOCK, and
// the open file is checked again (fstat), which is what counts when the
// path was swapped between the two.

// openNode opens target (resolved, relative to root) for reading, without
// waiting, and returns it with its info. It refuses what the tools do not
// use (usable), naming the path as rel, the model's.
func openNode(root *os.Root, target, rel string) (*os.File, fs.FileInfo, error) {
	if info, err := root.Lstat(target); err == nil && info.Mode()&fs.ModeSymlink == 0 {
		if err := usable(info, rel); err != nil {
			return nil, nil, err
		}
	}
	f, err := root.OpenFile(target, os.O_RDONLY|nonblock, 0)
	if err != nil {
		return nil, nil, err
	}
	info, err := f.Stat()
	if err == nil {
		err = usable(info, rel)
	} else {
		err = fmt.Errorf("stat %q: %w", rel, pathless(err))
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, info, nil
}

// usable refuses what the tools do not read or write: anything but a
// directory or a regular file, and a regular file with other hard links.
func usable(info fs.FileInfo, rel string) error {
	m := info.Mode()
	switch {
	case m.IsDir():
		return nil
	case !m.IsRegular():
		return fmt.Errorf("%q is %s; refused: the file tools use regular files and directories only", rel, kind(m))
	}
	if n := links(info); n > 1 {
		return fmt.Errorf("%q has %d hard links; refused: a file with other hard links may also be a file outside the workspace, so the file tools neither read nor write it (copy it to a new file to use it)", rel, n)
	}
	return nil
}

// kind names a file mode that is not a regular file or a directory.
func kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	}
	return "not a regular file"
}

// pathless is err without the path an *fs.PathError carries: a file opened
// through an os.Root names itself by its absolute path, which the model
// must not see. The caller names the file as the model gave it.
func pathless(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// relative is err as the model may see it: any mention of the absolute
// root left in it (a wrapped error this package did not format) is made
// relative to the workspace. errors.Is and errors.As still see err.
func (w *Workspace) relative(err error) error {
	if err == nil || !strings.Contains(err.Error(), w.root) {
		return err
	}
	msg := strings.ReplaceAll(err.Error(), w.root+string(filepath.Separator), "")
	return &relativeError{msg: strings.ReplaceAll(msg, w.root, "."), err: err}
}

type relativeError struct {
	msg string
	err error
}

func (e *relativeError) Error() string { return e.msg }
func (e *relativeError) Unwrap() error { return e.err }

// nonblocking is the root as an fs.FS (for fs.WalkDir) whose Open never
// waits and opens only directories and regular files.
type nonblocking struct{ root *os.Root }

func (n nonblocking) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	f, _, err := openNode(n.root, filepath.FromSlash(name), name)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: pathless(err)}
	}
	return f, nil
}
