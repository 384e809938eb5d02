package bolt

import (
	"errors"
	"fmt"
	"runtime/debug"
	"syscall"

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
	return guard(what, func() error { return s.db.View(fn) })
}

// update runs fn in a write transaction, guarded, and commits it unless fn
// failed or wrote nothing: a batch whose every request was refused leaves
// the file byte for byte as it was (bbolt would write a new meta page and
// free list for an empty commit). A full disk is ErrDiskFull.
func (s *Store) update(fn func(tx *bbolt.Tx) error) error {
	err := guard("commit to "+s.path, func() error {
		tx, err := s.db.Begin(true)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }() // after a Commit, a no-op
		if err := fn(tx); err != nil {
			return err
		}
		// bbolt materialises a node for every Put, Delete, CreateBucket and
		// NextSequence, and for nothing else before the commit.
		if stats := tx.Stats(); stats.GetNodeCount() == 0 {
			return nil
		}
		return tx.Commit()
	})
	if errors.Is(err, syscall.ENOSPC) {
		err = fmt.Errorf("%w: %w", store.ErrDiskFull, err)
	}
	return err
}
