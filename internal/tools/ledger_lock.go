//go:build unix

package tools

import (
	"fmt"
	"os"
	"syscall"
)

// lockLedger takes the fixture ledger's advisory lock (exclusive to write,
// shared to read) and returns its release.
func lockLedger(f *os.File, exclusive bool) (func(), error) {
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		return nil, fmt.Errorf("lock the fixture ledger %s: %w", f.Name(), err)
	}
	return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }, nil
}
