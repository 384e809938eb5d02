package bolt

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/reinhq/rein/internal/store"
)

// The writer keeps one bbolt write transaction open across commits (s.tx):
// each batch is put in it and appended to the log (wal.go), and the batch
// is durable once the log is synced, with one fdatasync. The transaction is
// committed, a checkpoint, when it has held records for checkpointEvery,
// for a batch that would take the log past checkpointBytes, before a
// lifecycle change, a scrub or the close; then the log is written from its
// start again.
//
// Reads go through the open transaction while it holds what the file does
// not (view, in guard.go), under txMu, which the writer holds from a
// batch's first put to its record's sync: a read sees what is durable and
// nothing else, as it did when each batch was a commit of its own.
const (
	checkpointEvery = 2 * time.Second
	checkpointBytes = 16 << 20
)

var (
	keyStoreID    = []byte("store-id")
	keyWALApplied = []byte("wal-applied")
)

// storeIDLen is the length of a store's ID, which its log's header names.
const storeIDLen = 8

// commitBatch puts batch in the open transaction and makes it durable:
// appended to the log and synced, or, when the batch changes a run's
// lifecycle or the log is due one, by a checkpoint. It returns the batch,
// which may have grown by the requests that queued while it was applied.
func (s *Store) commitBatch(batch []*writeReq, results []writeRes) ([]*writeReq, error) {
	s.txMu.Lock()
	defer s.txMu.Unlock()
	if s.broken != nil {
		return batch, s.broken
	}
	if s.tx == nil {
		if err := guard("commit to "+s.path, func() (err error) { s.tx, err = s.db.Begin(true); return err }); err != nil {
			return batch, err
		}
	}
	ops := false
	err := guard("commit to "+s.path, func() error {
		for i := 0; i < len(batch); i++ {
			results[i] = s.applyRequest(s.tx, batch[i])
			var te errTx
			if errors.As(results[i].err, &te) {
				return te.err
			}
			ops = ops || (batch[i].op != nil && results[i].err == nil)
			if i == len(batch)-1 {
				// Those that queued meanwhile (runs whose last commit was
				// answered just before this one began) would otherwise
				// wait for this commit to sync, then for their own.
				batch = s.gather(batch)
			}
		}
		return nil
	})
	if err != nil {
		s.abandon()
		return batch, diskFull(err)
	}
	if ops || s.wal == nil {
		// An erasure's checkpoint cuts the log, so that the run's events
		// are not left in it.
		return batch, s.checkpointLocked(ops)
	}
	rec, n := appendBatch(s.wal.record(), batch, results)
	if n == 0 {
		if s.logged == s.applied {
			s.rollbackClean()
		}
		return batch, nil
	}
	if s.wal.off+int64(len(rec)) > checkpointBytes {
		// The log stays within its bound: a batch that would take it past
		// (a large import, say) goes to the file with all before it.
		return batch, s.checkpointLocked(false)
	}
	if err := s.wal.append(s.logged+1, rec); err != nil {
		s.abandon()
		return batch, err
	}
	s.logged++
	return batch, nil
}

// rollbackClean rolls back the open transaction when it wrote nothing (its
// batches were refused), so that reads go back to read transactions of
// their own.
func (s *Store) rollbackClean() {
	if stats := s.tx.Stats(); stats.GetNodeCount() == 0 {
		_ = s.tx.Rollback()
		s.tx = nil
	}
}

// checkpoint commits the open transaction, if it holds anything.
func (s *Store) checkpoint() error {
	s.txMu.Lock()
	defer s.txMu.Unlock()
	if s.broken != nil {
		return s.broken
	}
	return s.checkpointLocked(false)
}

// checkpointLocked commits the open transaction (bbolt's two syncs) with the
// number of the last record it holds, then has the log written from its
// start (cut, with cut), or makes the log when there is none yet. A
// transaction that wrote nothing is rolled back: the file is unchanged. If
// the commit fails, the records since the last checkpoint are put in a new
// transaction again: they stay durable in the log.
func (s *Store) checkpointLocked(cut bool) error {
	if s.tx == nil {
		return nil
	}
	if s.rollbackClean(); s.tx == nil {
		return nil
	}
	err := guard("checkpoint "+s.path, func() error {
		meta := s.tx.Bucket(bucketMeta)
		if meta.Get(keyStoreID) == nil {
			if err := meta.Put(keyStoreID, s.storeID); err != nil {
				return err
			}
		}
		if err := meta.Put(keyWALApplied, seqKey(s.logged)); err != nil {
			return err
		}
		return s.tx.Commit()
	})
	if err != nil {
		_ = s.tx.Rollback() // after a failed Commit, a no-op
		s.tx = nil
		s.abandon()
		return fmt.Errorf("commit to %s: %w", s.path, diskFull(err))
	}
	s.tx = nil
	s.applied = s.logged
	if s.afterCheckpoint != nil {
		s.afterCheckpoint()
	}
	if s.wal != nil {
		if err := s.wal.restart(cut); err != nil {
			s.broken = fmt.Errorf("the store's log: %w; restart rein", err)
		}
		return nil
	}
	// The first checkpoint of this open put the store's ID in the file; the
	// log that names it can be made. If that fails, batches are
	// checkpointed each, and the next tries again.
	if wal, err := createWAL(WALPath(s.path), s.storeID, s.noSync); err == nil {
		s.wal = wal
	}
	return nil
}

// abandon rolls the open transaction back, with whatever a failed batch
// left in it, and puts the records logged since the last checkpoint in a
// new one, read back from the log. If they cannot be, the store refuses
// every write from then on: what it holds in the log is applied at the
// next Open.
func (s *Store) abandon() {
	if s.tx != nil {
		_ = s.tx.Rollback()
		s.tx = nil
	}
	s.states.clear()
	if s.logged == s.applied {
		return
	}
	err := func() error {
		_, recs, err := readWAL(s.wal.path)
		if err != nil {
			return err
		}
		recs, err = pendingRecords(recs, s.applied)
		if err != nil {
			return err
		}
		if len(recs) == 0 || recs[len(recs)-1].number < s.logged {
			return fmt.Errorf("the log ends before record %d", s.logged)
		}
		return s.applyInNewTx("commit to "+s.path, recs[:s.logged-s.applied])
	}()
	if err != nil {
		s.broken = fmt.Errorf("write to %s: the store cannot take its log's records %d to %d back after a failed commit (%w); "+
			"every write is refused until rein is restarted, which applies them", s.path, s.applied+1, s.logged, err)
	}
}

// finish is the writer's last work at Close: a checkpoint, after which the
// log is removed. If the checkpoint fails, the log stays for the next Open
// to apply.
func (s *Store) finish() error {
	s.txMu.Lock()
	defer s.txMu.Unlock()
	err := s.broken
	if err == nil {
		err = s.checkpointLocked(false)
	}
	if s.tx != nil {
		_ = s.tx.Rollback()
		s.tx = nil
	}
	if s.wal != nil {
		_ = s.wal.close()
		if err == nil {
			_ = os.Remove(s.wal.path)
		}
		s.wal = nil
	}
	return err
}

// newStoreID is a random ID for a store that has none yet.
func newStoreID() []byte {
	id := make([]byte, storeIDLen)
	_, _ = rand.Read(id)
	return id
}

// pendingRecords is the records of a log after the one numbered applied,
// which the file holds: none when the log holds nothing newer, an error
// when the first newer one is not the next (the file is older than the
// log: a backup restored beside a newer log).
func pendingRecords(recs []walRecord, applied uint64) ([]walRecord, error) {
	for i, r := range recs {
		if r.number <= applied {
			continue
		}
		if r.number != applied+1 {
			return nil, fmt.Errorf("%w: the log's records start at %d, and the store file holds records up to %d: "+
				"the ones between are missing (the file is older than its log, restored from a backup?); "+
				"move the log away to open the file as it is", store.ErrDataLoss, r.number, applied)
		}
		return recs[i:], nil
	}
	return nil, nil
}

// applyInNewTx begins the open transaction and applies recs in it; if that
// fails, the transaction is rolled back and there is none.
func (s *Store) applyInNewTx(what string, recs []walRecord) error {
	err := guard(what, func() (err error) {
		if s.tx, err = s.db.Begin(true); err != nil {
			return err
		}
		return s.applyRecords(s.tx, recs)
	})
	if err != nil && s.tx != nil {
		_ = s.tx.Rollback()
		s.tx = nil
	}
	return err
}

// applyRecords applies the requests of recs in tx, as the writer did when
// it logged them.
func (s *Store) applyRecords(tx *bbolt.Tx, recs []walRecord) error {
	for _, rec := range recs {
		reqs, err := decodeBatch(rec.body)
		if err != nil {
			return fmt.Errorf("record %d: %w", rec.number, err)
		}
		for i, r := range reqs {
			if res := s.applyRequest(tx, r); res.err != nil {
				return fmt.Errorf("record %d, request %d (run %s): it does not apply to the store as its earlier records left it: %w", rec.number, i, r.runID, res.err)
			}
		}
	}
	return nil
}
