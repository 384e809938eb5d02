package tenants

import (
	"fmt"
	"io"
	"io/fs"
	"os"
)

// MaxFileBytes is the largest tenants file Load reads.
const MaxFileBytes = 1 << 20

// Load reads and parses the tenants file at path. The file must be a
// regular file of at most MaxFileBytes, not readable by group or others
// (mode 0600 or stricter: it may hold secrets). Nothing here waits: a FIFO
// or a device is refused without being read, as is a file that grows past
// the cap while it is read.
func Load(path string) (*Settings, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// readFile reads path as Load says. The type is checked on the path first
// (so a device is never opened), then the path is opened without waiting
// (O_NONBLOCK, where there are FIFOs) and the open file is checked again,
// which is what counts when the path was swapped between the two.
func readFile(path string) ([]byte, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if err := usable(path, info); err != nil {
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
	if err := usable(path, info); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > MaxFileBytes {
		return nil, tooLarge(path)
	}
	return data, nil
}

// usable refuses a file Load does not read: anything but a regular file,
// one readable by group or others, one over the cap.
func usable(path string, info fs.FileInfo) error {
	m := info.Mode()
	if !m.IsRegular() {
		return fmt.Errorf("%s is %s; refused: a tenants file is a regular file", path, kind(m))
	}
	if perm := m.Perm(); perm&0o077 != 0 {
		return fmt.Errorf("%s is readable by others (mode %04o): it may hold secrets; run chmod 600 %s", path, perm, path)
	}
	if info.Size() > MaxFileBytes {
		return tooLarge(path)
	}
	return nil
}

func tooLarge(path string) error {
	return fmt.Errorf("%s is larger than %d bytes (1 MiB); refused: a tenants file is small", path, MaxFileBytes)
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
