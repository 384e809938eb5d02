package bolt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	bbolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/reinhq/rein/internal/store"
)

// Online backup and restore (rein backup, rein restore; docs/storage.md).
//
// A backup is one consistent bbolt file, taken while the store serves, as
// etcd's snapshot is: the log's records are first moved into the file (a
// checkpoint), then the file is written out as one read transaction sees
// it (bbolt's Tx.WriteTo), while the writer goes on committing. So the copy
// holds every commit acknowledged before Backup was called, needs no log
// beside it, and opens as a store of its own (rein serve --db on it works).
//
// The read transaction pins the pages it sees: the writer commits beside
// it, but a commit that must grow the file's mapping (past 256 MiB at
// first) waits for the backup to end, and so does a scrub.

// Backup writes a consistent copy of the store's file to w and returns how
// many bytes it wrote. It holds every commit acknowledged before it was
// called. ctx ends it early, with ctx's error; what was written to w by
// then is not a backup.
func (s *Store) Backup(ctx context.Context, w io.Writer) (int64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return 0, fmt.Errorf("back up store %s: %w", s.path, store.ErrClosed)
	}
	if !s.readOnly {
		// A read-only store has no log of its own to move: its file (or
		// its private copy, with the log applied) holds every commit.
		if err := s.checkpoint(); err != nil {
			return 0, fmt.Errorf("back up store %s: move its log into the file first: %w", s.path, err)
		}
	}
	s.dbMu.RLock()
	defer s.dbMu.RUnlock()
	var n int64
	err := guard("back up store "+s.path, func() error {
		return s.db.View(func(tx *bbolt.Tx) (err error) {
			n, err = tx.WriteTo(ctxWriter{ctx, w})
			return err
		})
	})
	if err != nil {
		return n, fmt.Errorf("back up store %s: %w", s.path, err)
	}
	return n, nil
}

// ctxWriter is a Writer that stops writing once ctx ends.
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (c ctxWriter) Write(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.w.Write(p)
}

// BackupFile is Backup of the store at path, which no process holds: it
// opens the store (applying what its log holds, as Open does), writes the
// copy to w, and closes it. A file that does not exist is an error wrapping
// os.ErrNotExist; one another process holds (a rein serve), ErrInUse.
func BackupFile(ctx context.Context, path string, w io.Writer) (int64, error) {
	info, err := statStore(path)
	if err != nil {
		return 0, err
	}
	if info == nil {
		return 0, fmt.Errorf("back up store %s: %w", path, os.ErrNotExist)
	}
	if held(path) {
		return 0, fmt.Errorf("back up store %s: the file is %w (bbolt's lock on it is held: a rein serve, say): "+
			"back it up through that server with rein backup --server HOST:PORT", path, ErrInUse)
	}
	s, err := Open(path, Options{})
	if err != nil {
		return 0, err
	}
	n, err := s.Backup(ctx, w)
	if cerr := s.Close(); err == nil && cerr != nil {
		err = cerr
	}
	return n, err
}

// RestoreOptions tune Restore.
type RestoreOptions struct {
	// Force replaces a store already at the destination (and moves a log
	// beside it aside, to FILE-wal.replaced-TIME); without it, Restore
	// refuses to.
	Force bool
}

// ErrExists is Restore's error for a destination that holds a store (or a
// store's log) already, without RestoreOptions.Force.
var ErrExists = errors.New("a store is there already")

// errDamagedBackup is Restore's error for a backup that fails its check; it
// is store.ErrDataLoss.
var errDamagedBackup = fmt.Errorf("damaged or not a rein store (%w)", store.ErrDataLoss)

// Restore makes path the store backup holds: it copies backup beside path,
// syncs it, checks the copy whole as Check does (bbolt's consistency check
// among it), and renames it over path, then syncs the directory. A backup
// that fails the check is refused, and nothing is written at path: the
// error wraps store.ErrDataLoss. A destination that exists (or has a log
// beside it) is ErrExists unless opts.Force; one another process holds is
// ErrInUse, even with Force.
func Restore(backup, path string, opts RestoreOptions) error {
	if _, err := os.Stat(backup); err != nil {
		return fmt.Errorf("restore %s: %w", backup, err)
	}
	wal := WALPath(path)
	if !opts.Force {
		for _, p := range []string{path, wal} {
			if _, err := os.Lstat(p); err == nil {
				return fmt.Errorf("restore to %s: %s exists: %w; pass --force to replace it (the store there is lost), or restore to another path", path, p, ErrExists)
			}
		}
	}
	if err := notHeld(path); err != nil {
		return err
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".restore-*")
	if err != nil {
		return fmt.Errorf("restore to %s: create the copy in %s: %w", path, dir, err)
	}
	tmpPath := tmp.Name()
	done := false
	defer func() {
		if !done {
			_ = os.Remove(tmpPath)
		}
	}()
	if err := copyInto(tmp, backup); err != nil {
		return fmt.Errorf("restore to %s: copy %s: %w; nothing was written at %s", path, backup, err, path)
	}
	problems, err := Check(tmpPath, Options{})
	if err != nil {
		return fmt.Errorf("restore to %s: check the copy of %s: %w; nothing was written at %s", path, backup, err, path)
	}
	if len(problems) > 0 {
		more := ""
		if n := len(problems) - 1; n > 0 {
			more = fmt.Sprintf(" (and %d more)", n)
		}
		return fmt.Errorf("restore to %s: the backup %s is %w: %s%s; nothing was written at %s. `rein check --db %s` lists every problem; restore another backup",
			path, backup, errDamagedBackup, problems[0], more, path, backup)
	}
	if _, err := os.Lstat(wal); err == nil {
		// The log of the store being replaced: the restored file must not
		// take its records for its own.
		aside := wal + ".replaced-" + time.Now().UTC().Format("20060102T150405Z")
		if err := os.Rename(wal, aside); err != nil {
			return fmt.Errorf("restore to %s: move the old store's log %s aside: %w; nothing was written at %s", path, wal, err, path)
		}
	}
	if err := os.Rename(tmpPath, path); err != nil {
		return fmt.Errorf("restore to %s: rename the checked copy over it: %w", path, err)
	}
	done = true
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("restore to %s: sync the directory %s: %w", path, dir, err)
	}
	return nil
}

// notHeld refuses a destination whose store another process holds.
func notHeld(path string) error {
	if held(path) {
		return fmt.Errorf("restore to %s: the file is %w (bbolt's lock on it is held: a rein serve, say); stop it first", path, ErrInUse)
	}
	return nil
}

// held reports whether another process holds bbolt's lock on the file at
// path. A file that is missing, or damaged past opening, is not held.
func held(path string) bool {
	if _, err := os.Stat(path); err != nil {
		return false
	}
	var db *bbolt.DB
	err := guard("open store "+path, func() (err error) {
		db, err = bbolt.Open(path, 0o400, &bbolt.Options{ReadOnly: true, Timeout: defaultLockTimeout})
		return err
	})
	if err == nil {
		_ = db.Close()
	}
	return errors.Is(err, bolterrors.ErrTimeout)
}

// copyInto copies the file at src into dst, syncs dst and closes it.
func copyInto(dst *os.File, src string) error {
	in, err := os.Open(src)
	if err != nil {
		_ = dst.Close()
		return err
	}
	defer in.Close()
	if _, err := io.Copy(dst, in); err != nil {
		_ = dst.Close()
		return err
	}
	if err := dst.Sync(); err != nil {
		_ = dst.Close()
		return err
	}
	return dst.Close()
}
