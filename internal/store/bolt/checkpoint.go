package bolt

import (
	"bytes"
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
// Reads never go through the open transaction: they read the last
// checkpoint under the overlay of what was synced since, which the writer
// publishes after each sync and each checkpoint (snapshot.go). txMu is the
// writer's (and Open's, and Failure's): no read takes it.
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
// A failure that leaves what is on disk unknown (a sync, a bbolt commit)
// halts the store (haltLocked): its error is then store.ErrUnavailable.
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
	w := &wtx{tx: s.tx, rec: s.wal.record()}
	err := guard("commit to "+s.path, func() error {
		for i := 0; i < len(batch); i++ {
			results[i] = s.applyRequest(w, batch[i])
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
		return batch, s.abandonLocked(diskFull(err))
	}
	if ops {
		// An erasure's checkpoint cuts the log, so that the run's events
		// are not left in it.
		return batch, s.checkpointLocked(true, false)
	}
	rec := w.rec
	if len(rec) == walRecordHdr+walNumberLen {
		// Every request was refused, or stored nothing (a create its
		// request ID found).
		if s.logged == s.applied {
			s.rollbackClean()
		}
		return batch, nil
	}
	if s.wal.off+int64(len(rec)) > checkpointBytes {
		// The log stays within its bound: a batch that would take it past
		// (a large import, say) goes to the file with all before it.
		return batch, s.checkpointLocked(false, false)
	}
	// The batch's writes go to the snapshots once its record is synced:
	// they hold only what is synced, so a batch that fails leaves them as
	// they were. The writer adds nothing to a tree: the first read that
	// needs the batch does (snapshot.go), and a checkpoint before any read
	// did makes the adds unneeded. (Added on the writer after each sync,
	// they took 4% of the process's CPU in a profile of rein-bench
	// steps-runs --runs 64, on the one goroutine every commit waits for.)
	err = s.wal.append(s.logged+1, rec)
	if err != nil {
		var fatal errFatal
		if errors.As(err, &fatal) {
			return batch, s.haltLocked(err)
		}
		return batch, s.abandonLocked(err)
	}
	s.logged++
	// The snapshots keep the batch's writes as its record holds them: a
	// copy of the body, since the log reuses the record's buffer.
	s.addSynced(bytes.Clone(rec[walRecordHdr+walNumberLen:]))
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
	return s.checkpointLocked(false, true)
}

// checkpointLocked commits the open transaction (bbolt's two syncs) with the
// number of the last record it holds, then has the log written from its
// start (cut, with cut). A transaction that wrote nothing is rolled back:
// the file is unchanged. A commit that fails halts the store: bbolt
// promises nothing of a transaction after a failed commit (etcd's backend
// stops there too), and the records since the last checkpoint are durable
// in the log, which the next Open applies. So does a cut of the log that
// fails: an erasure is not done until the log no longer holds the run.
//
// clean says that the transaction holds only what was synced, all of which
// the published overlay holds: reads that begin once the commit is visible
// then go on with that overlay over it, rather than wait for the snapshot
// published after it (snapshot.go).
func (s *Store) checkpointLocked(cut, clean bool) error {
	if s.tx == nil {
		return nil
	}
	if s.rollbackClean(); s.tx == nil {
		return nil
	}
	if clean {
		s.ovMu.Lock()
		s.publishFreshLocked()
		if p := s.snap.Load(); p != nil && p.err == nil {
			base, above := p.parts()
			s.publishLocked(&snapshot{txid: p.txid, base: base, above: above, clean: true})
		}
		s.ovMu.Unlock()
	}
	txid := uint64(s.tx.ID())
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
		return s.haltLocked(fmt.Errorf("commit to %s: %w", s.path, diskFull(err)))
	}
	s.tx = nil
	s.applied = s.logged
	s.publishCheckpoint(txid)
	if s.afterCheckpoint != nil {
		s.afterCheckpoint()
	}
	if s.wal == nil {
		return nil // Open's recovery, before it makes the log
	}
	if err := s.wal.restart(cut); err != nil {
		return s.haltLocked(err)
	}
	return nil
}

// haltLocked stops the store taking writes, for good, after a failure that
// leaves what is on disk unknown: a sync that failed (its data may or may
// not have reached the disk, and Linux forgets the failure once reported),
// a bbolt commit that failed, records that could not be put back. Every
// request from then on, those waiting included, and every read, is refused
// with the error it returns, which wraps store.ErrUnavailable and names
// cause; Failed is closed, so that the server goes not-ready and stops.
// The open transaction is rolled back: what was acknowledged is in the log,
// and the next Open applies it.
func (s *Store) haltLocked(cause error) error {
	if s.broken == nil {
		s.broken = fmt.Errorf("%w: the store %s stopped taking writes after a failure: %v; "+
			"whether the writes in flight then were stored is known once rein is restarted, which applies every acknowledged commit its log holds",
			store.ErrUnavailable, s.path, cause)
		close(s.failed)
		s.ovMu.Lock()
		s.publishLocked(&snapshot{err: s.broken})
		s.ovMu.Unlock()
	}
	if s.tx != nil {
		_ = s.tx.Rollback()
		s.tx = nil
	}
	s.states.clear()
	return s.broken
}

// Failed is closed when the store stops taking writes after a failure
// (haltLocked); Failure then says why. A server watches it to stop.
func (s *Store) Failed() <-chan struct{} { return s.failed }

// Failure is why the store stopped taking writes, or nil while it takes
// them. It wraps store.ErrUnavailable.
func (s *Store) Failure() error {
	select {
	case <-s.failed:
	default:
		return nil
	}
	s.txMu.Lock()
	defer s.txMu.Unlock()
	return s.broken
}

// abandonLocked rolls the open transaction back, with whatever a failed
// batch left in it, and puts the records logged since the last checkpoint
// in a new one, read back from the log; it returns cause, the batch's
// failure, which stored nothing. If the records cannot be put back, the
// store halts: what the log holds is applied at the next Open.
func (s *Store) abandonLocked(cause error) error {
	if s.tx != nil {
		_ = s.tx.Rollback()
		s.tx = nil
	}
	s.states.clear()
	// The overlay holds what was synced, which is what the records put
	// back write (commitBatch adds nothing of a failed batch to it).
	if s.logged == s.applied {
		return cause
	}
	err := func() error {
		l, err := readWAL(s.wal.path, s.applied)
		if err != nil {
			return err
		}
		recs, err := pendingRecords(l.recs, s.applied)
		if err != nil {
			return err
		}
		if len(recs) == 0 || recs[len(recs)-1].number < s.logged {
			return fmt.Errorf("the log ends before record %d", s.logged)
		}
		return s.applyInNewTx("commit to "+s.path, recs[:s.logged-s.applied])
	}()
	if err != nil {
		return s.haltLocked(fmt.Errorf("%v; after it, the log's records %d to %d could not be put back in a new transaction (%v)", cause, s.applied+1, s.logged, err))
	}
	return cause
}

// finish is the writer's last work at Close: a checkpoint, after which the
// log is removed. If the checkpoint fails, or the store had halted, the log
// stays for the next Open to apply, and Close returns the error.
func (s *Store) finish() error {
	s.txMu.Lock()
	defer s.txMu.Unlock()
	err := s.broken
	if err == nil {
		err = s.checkpointLocked(false, true)
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

// applyRecords puts the writes of recs in tx again (applyWrites); a log of
// requests, from a rein before logs held results, is applied as that rein
// did, through the writer's code (walbatch.go).
func (s *Store) applyRecords(tx *bbolt.Tx, recs []walRecord) error {
	for _, rec := range recs {
		if !rec.requests {
			if err := applyWrites(tx, rec.body); err != nil {
				return fmt.Errorf("record %d: it does not apply to the store as its earlier records left it: %w", rec.number, err)
			}
			continue
		}
		reqs, err := decodeBatch(rec.body)
		if err != nil {
			return fmt.Errorf("record %d: %w", rec.number, err)
		}
		for i, r := range reqs {
			if res := s.applyRequest(&wtx{tx: tx}, r); res.err != nil {
				return fmt.Errorf("record %d, request %d (run %s): it does not apply to the store as its earlier records left it: %w", rec.number, i, r.runID, res.err)
			}
		}
	}
	return nil
}
