// Package configfile reads the small files an operator gives rein serve
// (the tenants file, the policy file) without trusting them: only a
// regular file, not readable by group or others (it may hold secrets),
// bounded in size, and never waited on (a FIFO or a device is refused
// unread).
package configfile

import (
	"fmt"
	"io"
	"io/fs"
	"os"
)

// MaxBytes is the largest file Read reads.
const MaxBytes = 1 << 20

// Read reads the file at path; what names it in errors ("a tenants
// file"). The type is checked on the path first (so a device is never
// opened), then the path is opened without waiting (O_NONBLOCK, where
// there are FIFOs) and the open file is checked again, which is what
// counts when the path was swapped between the two. A file that grows past
// the cap while it is read is refused too.
func Read(path, what string) ([]byte, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if err := usable(path, what, info); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|nonblock, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if info, err = f.Stat(); err != nil {
		return nil, err
	}
	if err := usable(path, what, info); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > MaxBytes {
		return nil, tooLarge(path, what)
	}
	return data, nil
}

// usable refuses a file Read does not read: anything but a regular file,
// one readable by group or others, one over the cap.
func usable(path, what string, info fs.FileInfo) error {
	m := info.Mode()
	if !m.IsRegular() {
		return fmt.Errorf("%s is %s; refused: %s is a regular file", path, kind(m), what)
	}
	if perm := m.Perm(); perm&0o077 != 0 {
		return fmt.Errorf("%s is readable by others (mode %04o): it may hold secrets; run chmod 600 %s", path, perm, path)
	}
	if info.Size() > MaxBytes {
		return tooLarge(path, what)
	}
	return nil
}

func tooLarge(path, what string) error {
	return fmt.Errorf("%s is larger than %d bytes (1 MiB); refused: %s is small", path, MaxBytes, what)
}

// kind names a file mode that is not a regular file.
func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "not a regular file"
}

// Error is a refused file: the file, the line (0 when it is not known)
// and what is wrong. The tenants and the policy files' parsers return it.
type Error struct {
	File string
	Line int
	Msg  string
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Msg)
}
