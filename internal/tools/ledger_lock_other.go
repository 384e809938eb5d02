//go:build !unix

package tools

import "os"

// lockLedger is a no-op where there is no flock: one process per ledger.
func lockLedger(*os.File, bool) (func(), error) { return func() {}, nil }
