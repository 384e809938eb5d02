package bolt

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/reinhq/rein/internal/store"
)

// recoverWAL applies, at Open, the records of the store's log that the file
// does not hold yet (the last commits before a crash), in one checkpoint,
// then makes the log anew, empty, for the writer. Making it failing is
// Open's error: the store never commits without its log.
//
// A log damaged in its middle (walDamage) is not taken for a torn end: the
// whole records before the damage are applied, the log is kept beside the
// file as FILE-wal.broken-TIME (brokenPath), and Open refuses with
// store.ErrDataLoss naming the record; it refuses while such a file is
// there, until the operator has dealt with the commits it holds and moved
// it away.
func (s *Store) recoverWAL() error {
	id, applied, err := walMeta(s.path, s.db)
	if err != nil {
		return err
	}
	s.applied, s.logged = applied, applied
	s.storeID = id
	if s.storeID == nil {
		s.storeID = newStoreID()
	}
	if err := refuseBroken(s.path); err != nil {
		return err
	}
	path := WALPath(s.path)
	recs, damage, err := s.logFor(id, applied)
	if err != nil {
		return err
	}
	if len(recs) > 0 {
		if err := s.applyAtOpen(recs); err != nil {
			return fmt.Errorf("open store %s: apply its log %s: %w", s.path, path, err)
		}
	}
	if damage != nil {
		return s.keepBroken(damage)
	}
	wal, err := createWAL(path, s.storeID, s.noSync)
	if err != nil {
		return fmt.Errorf("open store %s: %w; the store takes no write without its log: free the disk or fix the directory's permissions, then start rein again", s.path, err)
	}
	s.wal = wal
	return nil
}

// applyAtOpen applies recs and checkpoints them.
func (s *Store) applyAtOpen(recs []walRecord) error {
	s.txMu.Lock()
	defer s.txMu.Unlock()
	s.logged = recs[len(recs)-1].number
	if err := s.applyInNewTx("open store "+s.path, recs); err != nil {
		return err
	}
	return s.checkpointLocked(false, false)
}

// brokenSuffix is what a damaged log kept beside its file is named after
// the log's own name: FILE-wal.broken-TIME.
const brokenSuffix = ".broken-"

// keepBroken renames the damaged log to FILE-wal.broken-TIME, where no
// checkpoint can cut it, and returns Open's error naming it.
func (s *Store) keepBroken(d *walDamage) error {
	kept := WALPath(s.path) + brokenSuffix + time.Now().UTC().Format("20060102T150405Z")
	if err := os.Rename(WALPath(s.path), kept); err != nil {
		return fmt.Errorf("open store %s: %w; and it could not be kept aside as %s (%v): the log was left where it is", s.path, d, kept, err)
	}
	if !s.noSync {
		_ = syncDir(filepath.Dir(s.path))
	}
	return fmt.Errorf("open store %s: %w. The store now holds every commit before record %d; the log was kept as %s. "+
		"The runs of the commits from record %d on lost their last steps (rein check --db %s names the records); "+
		"restore the store from a backup, or move %s out of the store's directory to start rein without them",
		s.path, d, d.number, kept, d.number, s.path, kept)
}

// refuseBroken refuses a store beside which a damaged log was kept
// (keepBroken): the operator moves it away once its commits are dealt with.
func refuseBroken(path string) error {
	kept, err := filepath.Glob(globQuote(WALPath(path)) + brokenSuffix + "*")
	if err != nil || len(kept) == 0 {
		return nil
	}
	return fmt.Errorf("open store %s: %w: a damaged log of this store was kept as %s, and the commits from its damaged record on are not in the store; "+
		"once they are dealt with (restored from a backup, or given up), move that file out of the store's directory and start rein again",
		path, store.ErrDataLoss, strings.Join(kept, ", "))
}

// globQuote escapes the pattern characters of a path for filepath.Glob.
func globQuote(path string) string {
	var b strings.Builder
	for _, r := range path {
		if strings.ContainsRune(`*?[\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// logFor reads the store's log and returns the records the file, whose ID
// and last applied record are given, lacks (nil when there is no log or it
// holds nothing newer), and the damage that ended them early, if any; an
// error when it is another store's or does not follow on from the file.
func (s *Store) logFor(id []byte, applied uint64) ([]walRecord, *walDamage, error) {
	path := WALPath(s.path)
	l, err := readWAL(path, applied)
	if err != nil {
		return nil, nil, fmt.Errorf("open store %s: %w", s.path, err)
	}
	if l.id == nil {
		return nil, nil, nil
	}
	if !bytes.Equal(l.id, id) {
		if len(l.recs) == 0 && l.damage == nil {
			return nil, nil, nil
		}
		return nil, nil, fmt.Errorf("open store %s: %w: the log beside it, %s, is another store's (it names store %x, this file is store %x) and holds %d commits; "+
			"put the file it belongs to back, or move the log away to open this file as it is", s.path, store.ErrDataLoss, path, l.id, id, len(l.recs))
	}
	recs, err := pendingRecords(l.recs, applied)
	if err != nil {
		return nil, nil, fmt.Errorf("open store %s: %s: %w", s.path, path, err)
	}
	return recs, l.damage, nil
}

// pendingCopy, for a read-only open whose file lacks records of its log (a
// store whose server crashed), copies the file to a private temporary one
// and applies the records there, so that the reader sees every commit that
// was acknowledged while the store's own files stay as they are. It returns
// "" when the file holds everything. A damaged log is an error.
func pendingCopy(path string, db *bbolt.DB) (string, error) {
	recs, damage, err := pendingOf(path, db)
	if err == nil && damage != nil {
		err = fmt.Errorf("open store %s: %w; open it read-write (rein serve) to keep the log aside and apply the records before the damage", path, damage)
	}
	if err != nil || recs == nil {
		return "", err
	}
	return applyToCopy(path, recs)
}

// applyToCopy copies the file at path to a private temporary one and
// applies recs there, as Open would (applyRecords).
func applyToCopy(path string, recs []walRecord) (string, error) {
	tmp, err := copyToTemp(path)
	if err != nil {
		return "", fmt.Errorf("open store %s read-only: its log holds %d commits the file does not; copying the file to apply them: %w", path, len(recs), err)
	}
	cp, err := bbolt.Open(tmp, 0o600, &bbolt.Options{NoSync: true, NoGrowSync: true})
	if err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("open store %s read-only: open its copy %s: %w", path, tmp, err)
	}
	err = guard("open store "+path, func() error {
		return cp.Update(func(tx *bbolt.Tx) error { return (&Store{path: tmp}).applyRecords(tx, recs) })
	})
	if cerr := cp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("open store %s read-only: apply its log %s: %w", path, WALPath(path), err)
	}
	return tmp, nil
}

// pendingOf is the records of the log of the store at path, open as db,
// that the file lacks, and the log's damage (logFor).
func pendingOf(path string, db *bbolt.DB) ([]walRecord, *walDamage, error) {
	id, applied, err := walMeta(path, db)
	if err != nil {
		return nil, nil, err
	}
	return (&Store{path: path}).logFor(id, applied)
}

// walMeta is what the file at path, open as db, says of its log: the
// store's ID (nil before the first checkpoint) and the number of the last
// record it holds.
func walMeta(path string, db *bbolt.DB) (id []byte, applied uint64, err error) {
	err = guard("open store "+path, func() error {
		return db.View(func(tx *bbolt.Tx) error {
			meta := tx.Bucket(bucketMeta)
			if meta == nil {
				return nil
			}
			id = bytes.Clone(meta.Get(keyStoreID))
			if v := meta.Get(keyWALApplied); len(v) == 8 {
				applied = binary.BigEndian.Uint64(v)
			}
			return nil
		})
	})
	return id, applied, err
}

// copyToTemp copies the file at path to a new temporary file.
func copyToTemp(path string) (string, error) {
	src, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer src.Close()
	dst, err := os.CreateTemp("", "rein-store-*.db")
	if err != nil {
		return "", err
	}
	_, err = io.Copy(dst, src)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(dst.Name())
		return "", err
	}
	return dst.Name(), nil
}
