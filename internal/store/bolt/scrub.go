package bolt

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/reinhq/rein/internal/store"
)

// scrubTxBytes bounds each transaction of a scrub's copy.
const scrubTxBytes = 64 << 20

// Scrub rewrites the store into a new file holding only what is stored now,
// and swaps it in: the pages a deleted run's content was on (bbolt frees a
// page but never overwrites it) are gone with the old file. Reads and writes
// wait while it runs; it takes as long as copying what the store holds
// (small, when finished runs are archived). The copy is made by bbolt's own
// compaction, synced, and renamed over the file, so a crash leaves either
// the old file or the new one whole.
func (s *Store) Scrub(ctx context.Context) error {
	if s.readOnly {
		return fmt.Errorf("scrub %s: %w", s.path, store.ErrReadOnly)
	}
	done := make(chan error, 1)
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return fmt.Errorf("scrub %s: %w", s.path, store.ErrClosed)
	}
	select {
	case s.scrubs <- done:
	case <-ctx.Done():
		s.mu.RUnlock()
		return ctx.Err()
	}
	s.mu.RUnlock()
	return <-done
}

// rewrite is Scrub's work, on the writer's goroutine, so no write is in
// flight; it holds dbMu so that no read is either.
func (s *Store) rewrite() error {
	s.dbMu.Lock()
	defer s.dbMu.Unlock()
	tmp := s.path + ".scrub"
	_ = os.Remove(tmp) // a crashed scrub's
	dst, err := bbolt.Open(tmp, 0o600, &bbolt.Options{Timeout: time.Second, NoSync: s.noSync})
	if err != nil {
		return fmt.Errorf("scrub %s: create %s: %w", s.path, tmp, err)
	}
	fail := func(what string, err error) error {
		_ = dst.Close()
		_ = os.Remove(tmp)
		return fmt.Errorf("scrub %s: %s: %w; the store is unchanged", s.path, what, err)
	}
	if err := guard("scrub "+s.path, func() error { return bbolt.Compact(dst, s.db, scrubTxBytes) }); err != nil {
		return fail("copy", err)
	}
	if err := dst.Sync(); err != nil {
		return fail("sync the copy", err)
	}
	if err := os.Rename(tmp, s.path); err != nil {
		return fail("rename the copy over the store", err)
	}
	if d, err := os.Open(filepath.Dir(s.path)); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	// dst holds the new file's lock and mapping from here; the old file's
	// inode goes when its last descriptor does.
	old := s.db
	s.db = dst
	if err := s.publishFile(dst); err != nil {
		return fmt.Errorf("scrub %s: read the new file: %w", s.path, err)
	}
	if err := old.Close(); err != nil {
		return fmt.Errorf("scrub %s: close the old file: %w", s.path, err)
	}
	return nil
}
