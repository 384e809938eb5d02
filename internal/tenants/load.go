package tenants

import "github.com/reinhq/rein/internal/configfile"

// MaxFileBytes is the largest tenants file Load reads.
const MaxFileBytes = configfile.MaxBytes

// Load reads and parses the tenants file at path. The file must be a
// regular file of at most MaxFileBytes, not readable by group or others
// (mode 0600 or stricter: it may hold secrets). Nothing here waits: a FIFO
// or a device is refused without being read (configfile.Read).
func Load(path string) (*Settings, error) {
	data, err := configfile.Read(path, "a tenants file")
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}
