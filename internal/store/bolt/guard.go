package bolt

import (
	"fmt"
	"runtime/debug"

	bbolt "go.etcd.io/bbolt"

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

// view runs fn in a read transaction, guarded. what names what is read
// ("run R"), for the error a damaged page gives.
func (s *Store) view(what string, fn func(tx *bbolt.Tx) error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return fmt.Errorf("read store %s: %w", s.path, store.ErrClosed)
	}
	s.dbMu.RLock()
	defer s.dbMu.RUnlock()
	s.txMu.Lock()
	if s.broken != nil {
		// The file lacks what the log holds, and the transaction that held
		// it is gone: a read now could go back in time.
		defer s.txMu.Unlock()
		return fmt.Errorf("read %s: %w", what, s.broken)
	}
	if tx := s.tx; tx != nil {
		// It holds durable commits the file does not yet (checkpoint.go).
		defer s.txMu.Unlock()
		return guard(what, func() error { return fn(tx) })
	}
	s.txMu.Unlock()
	return guard(what, func() error { return s.db.View(fn) })
}
