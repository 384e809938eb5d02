//go:build !unix

package bolt

import "os"

// chownLike does nothing: files here have no owner and group to keep.
func chownLike(string, os.FileInfo) error { return nil }

// syncDir does nothing: a directory cannot be fsynced here.
func syncDir(string) error { return nil }
