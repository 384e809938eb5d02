package bolt

import (
	"runtime/debug"

	"github.com/reinhq/rein/internal/store"
)

// guard runs fn, which reads the mapped file through bbolt, so that damage
// cannot take the process down: a fault reading the mapping (a damaged page
// pointing outside it) is a panic on this goroutine (debug.SetPanicOnFault),
// and any panic (a fault, or bbolt's own on a page that fails its checks)
// is recovered into an ErrDataLoss error about what. bbolt rolls the
// transaction back as the panic unwinds it, so the store stays usable.
func guard(what string, fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = &pageFault{what: what, panic: p}
		}
	}()
	return fn()
}

// pageFault is a panic guard recovered: a page of the file that cannot be
// read. It is ErrDataLoss.
type pageFault struct {
	what  string
	panic any
}

func (e *pageFault) Error() string {
	return damaged(e.what, "a page of the file cannot be read (%v)", e.panic).Error()
}

func (e *pageFault) Unwrap() error { return store.ErrDataLoss }
