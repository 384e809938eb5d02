//go:build !unix

package workspace

import "io/fs"

// nonblock is 0 where there are no FIFOs to wait on.
const nonblock = 0

// links is 1 where the link count is not in the file's info.
func links(fs.FileInfo) uint64 { return 1 }
