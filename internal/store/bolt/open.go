package bolt

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	bbolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/reinhq/rein/internal/store"
)

// initialMmapSize is how much of the file bbolt maps at first: address
// space, not memory. A commit that grows the file past the mapping remaps
// it, and first copies every key and value its transaction holds out of the
// old mapping; a checkpoint's transaction holds two seconds of commits, so
// the file is mapped with room to grow before the first remap.
const initialMmapSize = 256 << 20

// defaultLockTimeout is Options.LockTimeout's default.
const defaultLockTimeout = 100 * time.Millisecond

// Open opens or creates the store at path. A file that is not a rein store,
// is truncated, or is not bbolt at all is refused with an error that names
// the path, and is left byte-for-byte unchanged. So is a damaged one whose
// reading panics (its free list, say): the error wraps store.ErrDataLoss.
// Opening a healthy rein store writes nothing to it.
func Open(path string, opts Options) (*Store, error) {
	if opts.LockTimeout == 0 {
		opts.LockTimeout = defaultLockTimeout
	}
	if opts.ReadOnly {
		return openReadOnly(path, opts)
	}
	if err := guard("open store "+path, func() error { return check(path, opts.LockTimeout) }); err != nil {
		return nil, err
	}
	var db *bbolt.DB
	err := guard("open store "+path, func() (err error) {
		db, err = bbolt.Open(path, 0o600, &bbolt.Options{Timeout: opts.LockTimeout, NoSync: opts.NoSync, InitialMmapSize: initialMmapSize})
		return err
	})
	if err != nil {
		return nil, openError(path, err)
	}
	var missing, mark bool
	err = guard("open store "+path, func() error {
		return db.View(func(tx *bbolt.Tx) (err error) {
			missing = needsInit(tx)
			mark, err = checkStoreFormat(tx, path, buildOf(opts)) // format.go
			return err
		})
	})
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	err = guard("open store "+path, func() error {
		if !missing && !mark {
			return nil
		}
		return db.Update(func(tx *bbolt.Tx) error {
			if err := initialise(tx); err != nil {
				return err
			}
			return markStoreFormat(tx, buildOf(opts))
		})
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("initialise store %s: %w", path, err)
	}
	s := &Store{db: db, path: path, noSync: opts.NoSync, reads: make(chan struct{}, readTurns()), reqs: make(chan *writeReq, maxBatch), scrubs: make(chan chan error), done: make(chan struct{}), failed: make(chan struct{}), outbox: opts.Outbox}
	if err := s.recoverWAL(); err != nil {
		_ = db.Close()
		return nil, err
	}
	if err := guard("open store "+path, func() error { return s.publishFile(db) }); err != nil {
		_ = db.Close()
		return nil, err
	}
	go s.writer()
	return s, nil
}

// openReadOnly opens an existing store read-only: one bbolt open with a
// shared lock, checked as check does, and no writer.
func openReadOnly(path string, opts Options) (*Store, error) {
	info, err := statStore(path)
	if err != nil {
		return nil, err
	}
	if info == nil {
		return nil, fmt.Errorf("open store %s read-only: %w", path, os.ErrNotExist)
	}
	var db *bbolt.DB
	if err := guard("open store "+path, func() (err error) {
		db, err = bbolt.Open(path, 0o400, &bbolt.Options{ReadOnly: true, Timeout: opts.LockTimeout})
		return err
	}); err != nil {
		return nil, openError(path, err)
	}
	if err := guard("open store "+path, func() error {
		return db.View(func(tx *bbolt.Tx) error {
			if err := checkFormat(tx, path, info.Size()); err != nil {
				return err
			}
			_, err := checkStoreFormat(tx, path, buildOf(opts)) // format.go
			return err
		})
	}); err != nil {
		_ = db.Close()
		return nil, err
	}
	copied, err := pendingCopy(path, db)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	if copied != "" {
		// The file lacks the last commits its log holds: reads go to a
		// private copy with them applied.
		_ = db.Close()
		if err := guard("open store "+path, func() (err error) {
			db, err = bbolt.Open(copied, 0o400, &bbolt.Options{ReadOnly: true, Timeout: opts.LockTimeout})
			return err
		}); err != nil {
			_ = os.Remove(copied)
			return nil, openError(path, err)
		}
	}
	s := &Store{db: db, path: path, readOnly: true, copied: copied, reads: make(chan struct{}, readTurns()), reqs: make(chan *writeReq), done: make(chan struct{}), failed: make(chan struct{})}
	close(s.done) // no writer
	if err := guard("open store "+path, func() error { return s.publishFile(db) }); err != nil {
		_ = db.Close()
		return nil, err
	}
	return s, nil
}

// topBuckets are the buckets every rein store has (a file from an older
// rein lacks the later ones, blobs: Open makes them, and reads treat a
// missing one as empty).
var topBuckets = [][]byte{bucketRuns, bucketContracts, bucketRequests, bucketStatus, bucketChanges, bucketBlobs, bucketEnded, bucketDeletions, bucketDeleted}

// needsInit reports whether the file lacks its format mark, its ID (a file
// from a rein before the log) or a bucket.
func needsInit(tx *bbolt.Tx) bool {
	meta := tx.Bucket(bucketMeta)
	if meta == nil || meta.Get(keyFormat) == nil || meta.Get(keyStoreID) == nil {
		return true
	}
	for _, b := range topBuckets {
		if tx.Bucket(b) == nil {
			return true
		}
	}
	return false
}

func initialise(tx *bbolt.Tx) error {
	meta, err := tx.CreateBucketIfNotExists(bucketMeta)
	if err != nil {
		return err
	}
	if meta.Get(keyFormat) == nil {
		if err := meta.Put(keyFormat, formatV3); err != nil {
			return err
		}
	}
	if meta.Get(keyStoreID) == nil {
		// The log's header names it (wal.go), and Open makes the log.
		if err := meta.Put(keyStoreID, newStoreID()); err != nil {
			return err
		}
	}
	backfill := tx.Bucket(bucketEnded) == nil && tx.Bucket(bucketStatus) != nil
	for _, b := range topBuckets {
		if _, err := tx.CreateBucketIfNotExists(b); err != nil {
			return err
		}
	}
	if backfill {
		return backfillEnded(tx)
	}
	return nil
}

// check refuses a file that exists but is not a healthy rein store. It opens
// the file read-only, so a refused file is never written to.
//
// It also reads the file's free list (PreLoadFreelist), which the read-write
// open would read: a damaged one panics here, in the caller's guard, before
// anything could write. (bbolt cannot close a database whose Open panicked:
// that open's descriptor and shared lock stay with the process, which is
// about to report the damage and stop.)
func check(path string, timeout time.Duration) error {
	info, err := statStore(path)
	if err != nil || info == nil {
		return err
	}
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: timeout, PreLoadFreelist: true})
	if err != nil {
		return openError(path, err)
	}
	defer db.Close()
	return db.View(func(tx *bbolt.Tx) error { return checkFormat(tx, path, info.Size()) })
}

// statStore returns the file's info, or nil when there is no file. A path
// that cannot be a store (a directory, an empty file) is an error.
func statStore(path string) (os.FileInfo, error) {
	info, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	if info.IsDir() {
		return nil, fmt.Errorf("open store %s: it is a directory; pass the path of a database file", path)
	}
	if info.Size() == 0 {
		return nil, fmt.Errorf("open store %s: the file is empty; it is not a rein store (remove it to start a new store)", path)
	}
	return info, nil
}

// checkFormat refuses a file that is truncated or is another program's
// bbolt database.
func checkFormat(tx *bbolt.Tx, path string, size int64) error {
	if want := tx.Size(); want > size {
		return fmt.Errorf("open store %s: the file is truncated (%d bytes, its header says %d); restore it from a backup", path, size, want)
	}
	meta := tx.Bucket(bucketMeta)
	format := []byte(nil)
	if meta != nil {
		format = meta.Get(keyFormat)
	}
	known := bytes.Equal(format, formatV1) || bytes.Equal(format, formatV2) || bytes.Equal(format, formatV3) || bytes.Equal(format, formatV4)
	if bytes.HasPrefix(format, []byte("rein-store-")) && !known {
		return fmt.Errorf("open store %s: the file is in store format %q, which a newer rein wrote and this one does not know; run that rein on it (or rein export its runs with it); it was left unchanged", path, format)
	}
	if !known {
		empty := true
		_ = tx.ForEach(func([]byte, *bbolt.Bucket) error { empty = false; return nil })
		if empty {
			return nil
		}
		return fmt.Errorf("open store %s: the file is a bbolt database but not a rein store; pass another --db path", path)
	}
	return nil
}

func openError(path string, err error) error {
	switch {
	case errors.Is(err, store.ErrDataLoss):
		return fmt.Errorf("open store %s: %w", path, err)
	case errors.Is(err, bolterrors.ErrTimeout):
		return fmt.Errorf("open store %s: the file is locked by another process (a rein serve, or a rein command writing to it): "+
			"run this command against that server with --server HOST:PORT, or stop it first, or pass another --db path", path)
	case errors.Is(err, os.ErrPermission), errors.Is(err, syscall.EROFS):
		return fmt.Errorf("open store %s: %w: the file or its directory cannot be written (check the owner and mode, or the mount); "+
			"the commands that only read (list, inspect, events, export, watch, pending, check) open it read-only and work", path, err)
	}
	return fmt.Errorf("open store %s: the file is not a valid rein store (%v); it was left unchanged, restore it from a backup or pass another --db path", path, err)
}
