package bolt

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"

	bbolt "go.etcd.io/bbolt"

	"github.com/reinhq/rein/internal/store"
)

// recoverWAL applies, at Open, the records of the store's log that the file
// does not hold yet (the last commits before a crash), in one checkpoint,
// which makes the log anew. A log the file holds all of is removed; with
// none, nothing is written.
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
	path := WALPath(s.path)
	recs, err := s.logFor(id, applied)
	if err != nil || recs == nil {
		if err == nil {
			_ = os.Remove(path) // none, or nothing the file lacks
		}
		return err
	}
	s.txMu.Lock()
	defer s.txMu.Unlock()
	s.logged = recs[len(recs)-1].number
	if err := s.applyInNewTx("open store "+s.path, recs); err != nil {
		return fmt.Errorf("open store %s: apply its log %s: %w", s.path, path, err)
	}
	if err := s.checkpointLocked(false); err != nil {
		return fmt.Errorf("open store %s: apply its log %s: %w", s.path, path, err)
	}
	// The checkpoint made the log anew, empty, over the one applied.
	return nil
}

// logFor reads the store's log and returns the records the file, whose ID
// and last applied record are given, lacks: nil when there is no log or it
// holds nothing newer, an error when it is another store's or does not
// follow on from the file.
func (s *Store) logFor(id []byte, applied uint64) ([]walRecord, error) {
	path := WALPath(s.path)
	walID, recs, err := readWAL(path)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", s.path, err)
	}
	if walID == nil {
		return nil, nil
	}
	if !bytes.Equal(walID, id) {
		if len(recs) == 0 {
			return nil, nil
		}
		return nil, fmt.Errorf("open store %s: %w: the log beside it, %s, is another store's (it names store %x, this file is store %x) and holds %d commits; "+
			"put the file it belongs to back, or move the log away to open this file as it is", s.path, store.ErrDataLoss, path, walID, id, len(recs))
	}
	recs, err = pendingRecords(recs, applied)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %s: %w", s.path, path, err)
	}
	return recs, nil
}

// pendingCopy, for a read-only open whose file lacks records of its log (a
// store whose server crashed), copies the file to a private temporary one
// and applies the records there, so that the reader sees every commit that
// was acknowledged while the store's own files stay as they are. It returns
// "" when the file holds everything.
func pendingCopy(path string, db *bbolt.DB) (string, error) {
	recs, err := pendingOf(path, db)
	if err != nil || recs == nil {
		return "", err
	}
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
// that the file lacks (logFor).
func pendingOf(path string, db *bbolt.DB) ([]walRecord, error) {
	id, applied, err := walMeta(path, db)
	if err != nil {
		return nil, err
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

// checkWAL is rein check's look at the store's log, read-only: an error when
// it is another store's, does not follow on from the file, or holds a
// record that does not decode. Records the file lacks are no problem: the
// next Open applies them.
func checkWAL(path string, db *bbolt.DB) error {
	recs, err := pendingOf(path, db)
	if err != nil {
		return err
	}
	for _, rec := range recs {
		if _, err := decodeBatch(rec.body); err != nil {
			return fmt.Errorf("the store's log %s: record %d: %w", WALPath(path), rec.number, err)
		}
	}
	return nil
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
