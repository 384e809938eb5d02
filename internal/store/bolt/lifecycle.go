package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"time"

	bbolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/store/seal"
)

// The lifecycle's buckets:
//
//	ended      end time (8 bytes, big-endian Unix nanoseconds) + run ID
//	           -> flag (1 byte: 1 archived) + tenant + 0 + parent run ID
//	deletions  sequence (8 bytes) -> a RunDeletion, sealed
//	deleted    run ID -> its sequence in deletions
var (
	bucketEnded     = []byte("ended")
	bucketDeletions = []byte("deletions")
	bucketDeleted   = []byte("deleted")
)

var _ store.Lifecycle = (*Store)(nil)

// endedKey is a run's key in the ended index.
func endedKey(st runstate.State) []byte {
	k := make([]byte, 8, 8+len(st.RunID))
	binary.BigEndian.PutUint64(k, uint64(st.UpdatedAt.UnixNano()))
	return append(k, st.RunID...)
}

func endedValue(st runstate.State, archived bool) []byte {
	v := []byte{0}
	if archived {
		v[0] = 1
	}
	v = append(append(v, st.Tenant...), 0)
	return append(v, st.DelegatedBy.GetParentRunId()...)
}

// putEnded lists a run that just ended in the ended index.
func putEnded(tx *bbolt.Tx, st runstate.State) error {
	return tx.Bucket(bucketEnded).Put(endedKey(st), endedValue(st, st.Archive != nil))
}

// backfillEnded lists in the ended index every run that ended before the
// index existed (a file from an older rein), once, as Open completes it.
func backfillEnded(tx *bbolt.Tx) error {
	idx, runs := tx.Bucket(bucketStatus), tx.Bucket(bucketRuns)
	var ids []string
	if err := idx.ForEach(func(k, _ []byte) error {
		if len(k) > 1 && runstate.Terminal(reinv1.RunStatus(k[0])) {
			ids = append(ids, string(k[1:]))
		}
		return nil
	}); err != nil {
		return err
	}
	for _, id := range ids {
		b := runs.Bucket([]byte(id))
		if b == nil {
			continue // rein check reports it
		}
		st, err := loadState(b, nil)
		if err != nil {
			continue
		}
		if err := putEnded(tx, st); err != nil {
			return err
		}
	}
	return nil
}

// Ended implements store.Lifecycle.
func (s *Store) Ended(ctx context.Context, after string, limit int) ([]store.Ended, error) {
	var out []store.Ended
	err := s.view(ctx, "the ended runs", func(tx *rtx) error {
		b := tx.Bucket(bucketEnded)
		if b == nil {
			return nil
		}
		c := b.Cursor()
		k, v := c.Seek([]byte(after))
		if k != nil && after != "" && bytes.Equal(k, []byte(after)) {
			k, v = c.Next()
		}
		for ; k != nil && len(out) < limit; k, v = c.Next() {
			if len(k) < 9 || len(v) < 1 {
				return damaged("the ended index", "key %x does not decode", k)
			}
			tenant, parent, _ := bytes.Cut(v[1:], []byte{0})
			out = append(out, store.Ended{
				Cursor:   string(k),
				RunID:    string(k[8:]),
				Tenant:   string(tenant),
				Parent:   string(parent),
				EndedAt:  time.Unix(0, int64(binary.BigEndian.Uint64(k[:8]))),
				Archived: v[0] == 1,
			})
		}
		return nil
	})
	return out, err
}

// Archive implements store.Lifecycle.
func (s *Store) Archive(ctx context.Context, runID string, version uint64, rec *reinv1.RunArchive) (runstate.State, error) {
	if rec.GetKey() == "" || rec.GetSha256() == "" {
		return runstate.State{}, fmt.Errorf("archive run %s: the archive record names no object (key %q, sha256 %q)", runID, rec.GetKey(), rec.GetSha256())
	}
	var stub runstate.State
	_, err := s.submit(ctx, &writeReq{runID: runID, op: func(tx *bbolt.Tx) writeRes {
		runs := tx.Bucket(bucketRuns)
		b := runs.Bucket([]byte(runID))
		if b == nil {
			return writeRes{err: missingRun(readTx(tx), runID)}
		}
		st, err := loadState(b, contractOf(readTx(tx), runID))
		if err != nil {
			return writeRes{err: fmt.Errorf("run %s: %w", runID, err)}
		}
		switch {
		case st.Archive != nil:
			return writeRes{err: fmt.Errorf("archive run %s: %w under %s", runID, store.ErrArchived, st.Archive.GetKey())}
		case !runstate.Terminal(st.Status):
			return writeRes{err: fmt.Errorf("archive run %s: it is %s: %w", runID, runstate.StatusName(st.Status), store.ErrLive)}
		case st.Version != version:
			return writeRes{err: fmt.Errorf("archive run %s at version %d: the run is at version %d: %w", runID, version, st.Version, store.ErrConflict)}
		}
		stub = store.Stub(st, rec)
		snap, err := seal.Seal(stub.Proto(false))
		if err != nil {
			return writeRes{err: err}
		}
		contract, err := seal.Seal(stubContract(stub))
		if err != nil {
			return writeRes{err: err}
		}
		// The run's bucket goes whole (its events, blobs and lease) and
		// comes back holding the stub's snapshot alone.
		if err := runs.DeleteBucket([]byte(runID)); err != nil {
			return writeRes{err: errTx{err}}
		}
		nb, err := runs.CreateBucket([]byte(runID))
		if err != nil {
			return writeRes{err: errTx{err}}
		}
		if err := nb.Put(keySnapshot, snap); err != nil {
			return writeRes{err: errTx{err}}
		}
		if err := tx.Bucket(bucketContracts).Put([]byte(runID), contract); err != nil {
			return writeRes{err: errTx{err}}
		}
		if err := putEnded(tx, stub); err != nil {
			return writeRes{err: errTx{err}}
		}
		s.states.drop(runID)
		return writeRes{}
	}})
	if err != nil {
		return runstate.State{}, err
	}
	return stub, nil
}

// stubContract is the contract an archived run keeps: its labels only.
func stubContract(stub runstate.State) *reinv1.TaskContract {
	if stub.Contract != nil {
		return stub.Contract
	}
	return &reinv1.TaskContract{}
}

// Delete implements store.Lifecycle.
func (s *Store) Delete(ctx context.Context, d *reinv1.RunDeletion) (*reinv1.RunDeletion, bool, error) {
	runID := d.GetRunId()
	var rec *reinv1.RunDeletion
	var deleted bool
	_, err := s.submit(ctx, &writeReq{runID: runID, op: func(tx *bbolt.Tx) writeRes {
		if prev, err := deletionOf(readTx(tx), runID); err != nil || prev != nil {
			rec = prev
			return writeRes{err: err}
		}
		runs := tx.Bucket(bucketRuns)
		b := runs.Bucket([]byte(runID))
		if b == nil {
			return writeRes{err: missingRun(readTx(tx), runID)}
		}
		st, err := loadState(b, nil)
		if err != nil {
			return writeRes{err: fmt.Errorf("run %s: %w", runID, err)}
		}
		if !runstate.Terminal(st.Status) {
			return writeRes{err: fmt.Errorf("delete run %s: it is %s: %w", runID, runstate.StatusName(st.Status), store.ErrLive)}
		}
		r := proto.Clone(d).(*reinv1.RunDeletion)
		r.Tenant, r.Status, r.Archived = st.Tenant, st.Status, st.Archive != nil
		if err := eraseRun(tx, st); err != nil {
			return writeRes{err: errTx{err}}
		}
		if err := putDeletion(tx, r); err != nil {
			return writeRes{err: errTx{err}}
		}
		s.states.drop(runID)
		rec, deleted = r, true
		return writeRes{}
	}})
	if err != nil {
		return nil, false, err
	}
	return rec, deleted, nil
}

// eraseRun removes every key of a run: its bucket (log, blobs, snapshot,
// lease), its contract, its entries in the status, request and ended
// indexes, and its webhook deliveries. Its status changes stay: they hold
// its ID, tenant and statuses, no content.
func eraseRun(tx *bbolt.Tx, st runstate.State) error {
	id := []byte(st.RunID)
	if err := tx.Bucket(bucketRuns).DeleteBucket(id); err != nil {
		return err
	}
	if err := dropRunOutbox(tx, st.Tenant, st.RunID); err != nil {
		return err
	}
	if err := tx.Bucket(bucketContracts).Delete(id); err != nil {
		return err
	}
	if err := tx.Bucket(bucketStatus).Delete(statusKey(st.Status, st.RunID)); err != nil {
		return err
	}
	if st.RequestID != "" {
		reqs := tx.Bucket(bucketRequests)
		if rk := requestKey(st.Tenant, st.RequestID); bytes.Equal(reqs.Get(rk), id) {
			if err := reqs.Delete(rk); err != nil {
				return err
			}
		}
	}
	return tx.Bucket(bucketEnded).Delete(endedKey(st))
}

func putDeletion(tx *bbolt.Tx, r *reinv1.RunDeletion) error {
	dels := tx.Bucket(bucketDeletions)
	seq, err := dels.NextSequence()
	if err != nil {
		return err
	}
	v, err := seal.Seal(r)
	if err != nil {
		return err
	}
	if err := dels.Put(seqKey(seq), v); err != nil {
		return err
	}
	return tx.Bucket(bucketDeleted).Put([]byte(r.GetRunId()), seqKey(seq))
}

// deletionOf is a deleted run's record, or nil.
func deletionOf(tx *rtx, runID string) (*reinv1.RunDeletion, error) {
	idx := tx.Bucket(bucketDeleted)
	if idx == nil {
		return nil, nil
	}
	k := idx.Get([]byte(runID))
	if k == nil {
		return nil, nil
	}
	v := tx.Bucket(bucketDeletions).Get(k)
	if v == nil {
		return nil, damaged("the deletion of run "+runID, "its record is missing")
	}
	r := &reinv1.RunDeletion{}
	if err := unseal(v, r, "the deletion of run "+runID); err != nil {
		return nil, err
	}
	return r, nil
}

// Deletion implements store.Lifecycle.
func (s *Store) Deletion(ctx context.Context, runID string) (*reinv1.RunDeletion, error) {
	var rec *reinv1.RunDeletion
	err := s.view(ctx, "the deletion of run "+runID, func(tx *rtx) (err error) {
		rec, err = deletionOf(tx, runID)
		return err
	})
	if err == nil && rec == nil {
		err = fmt.Errorf("deletion of run %q: %w", runID, store.ErrNotFound)
	}
	return rec, err
}

// Deletions implements store.Lifecycle. Its cursor is a record's sequence
// in decimal.
func (s *Store) Deletions(ctx context.Context, tenant, after string, limit int) ([]*reinv1.RunDeletion, string, error) {
	var out []*reinv1.RunDeletion
	var next string
	err := s.view(ctx, "the deletions", func(tx *rtx) error {
		b := tx.Bucket(bucketDeletions)
		if b == nil {
			return nil
		}
		c := b.Cursor()
		var k, v []byte
		if after == "" {
			k, v = c.Last()
		} else {
			seq, err := strconv.ParseUint(after, 10, 64)
			if err != nil {
				return fmt.Errorf("list deletions: page token %q: %w", after, store.ErrInvalidCursor)
			}
			if sk, _ := c.Seek(seqKey(seq)); sk == nil {
				k, v = c.Last()
			} else {
				k, v = c.Prev()
			}
		}
		var last uint64
		for ; k != nil; k, v = c.Prev() {
			r := &reinv1.RunDeletion{}
			if err := unseal(v, r, fmt.Sprintf("deletion record %x", k)); err != nil {
				return err
			}
			if tenant != "" && r.GetTenant() != tenant {
				continue
			}
			if len(out) == limit {
				next = strconv.FormatUint(last, 10)
				return nil
			}
			out = append(out, r)
			last = binary.BigEndian.Uint64(k)
		}
		return nil
	})
	return out, next, err
}

// stubOrDamaged is the error for a run bucket that lacks its log: ErrArchived
// naming the archive's key when it holds an archived run's stub, else
// damage (what).
func stubOrDamaged(b getter, runID, what string) error {
	st, err := loadState(b, nil)
	if err != nil {
		return fmt.Errorf("run %s: %w", runID, err)
	}
	if st.Archive != nil {
		return fmt.Errorf("run %s: %w under %s", runID, store.ErrArchived, st.Archive.GetKey())
	}
	return damaged("run "+runID, "%s", what)
}
