package bolt

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	bbolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/failpoint"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/store/seal"
)

// writeReq is one Create, Import or Append waiting for the writer. An Import
// is a create whose events are the whole log and created the state after
// them.
type writeReq struct {
	create   bool
	acquire  bool
	owner    string
	epoch    uint64
	runID    string
	expected uint64
	events   []*reinv1.Event
	encoded  [][]byte          // events, marshalled by the caller's goroutine
	blobs    map[string][]byte // keyed by their hash, checked by the caller's goroutine
	folded   *folded           // the events folded by the caller's goroutine, or nil
	created  *runstate.State   // for create: the state after its events
	// op, when set, is the whole request: a change of a run's lifecycle
	// (lifecycle.go), applied in the writer's transaction like the rest.
	op func(tx *bbolt.Tx) writeRes
	// write, when set, is the whole request: a change outside the runs
	// (the webhook outbox, outbox.go), written through w and logged with
	// the batch's appends.
	write func(w *wtx) writeRes
	done  chan writeRes
}

// writeRes is a request's result. state is set for a create and an
// append: the state the request stored, as the cache holds it (never
// changed once put), so that a result copied through a channel stays
// small.
type writeRes struct {
	state   *runstate.State
	created bool
	epoch   uint64
	err     error
}

// errTx marks a failure of the transaction itself (a Put failed, the disk is
// full): every request in the batch fails with it.
type errTx struct{ err error }

func (e errTx) Error() string { return e.err.Error() }

// writer is the only goroutine that writes. It takes every request waiting at
// that moment (up to maxBatch), puts them in the open transaction and answers
// each once the batch's record in the log is synced (commitBatch). While one
// batch syncs, the next gathers in the channel, so the batch size follows
// the load with no timer; requests that queue while a batch is applied join
// it too. It also checkpoints: checkpointEvery after the first record since
// the last, before a scrub, and at the close.
func (s *Store) writer() {
	defer close(s.done)
	batch := make([]*writeReq, 0, maxBatch)
	results := make([]writeRes, maxBatch)
	due := time.NewTimer(checkpointEvery)
	due.Stop()
	armed := false
	for {
		var r *writeReq
		select {
		case done := <-s.scrubs:
			err := s.checkpoint()
			if err == nil {
				err = s.rewrite()
			}
			done <- err
			continue
		case <-due.C:
			// A failed checkpoint halts the store (checkpointLocked):
			// its records stay in the log for the next Open.
			armed = false
			_ = s.checkpoint()
			continue
		case next, ok := <-s.reqs:
			if !ok {
				due.Stop()
				s.finished = s.finish()
				return
			}
			r = next
		}
		batch = s.gather(append(batch[:0], r))
		if s.beforeCommit != nil {
			s.beforeCommit(len(batch))
		}
		s.commits.Add(1)
		failpoint.Inject(failpoint.StoreBeforeCommit)
		var err error
		batch, err = s.commitBatch(batch, results)
		failpoint.Inject(failpoint.StoreAfterCommit)
		if !armed && s.logged > s.applied {
			due.Reset(checkpointEvery)
			armed = true
		}
		for i, r := range batch {
			res := results[i]
			switch {
			case errors.Is(err, store.ErrUnavailable):
				res = writeRes{err: fmt.Errorf("write run %s: %w", r.runID, err)} // halted: it says what is known
			case err != nil:
				res = writeRes{err: fmt.Errorf("write run %s to %s: commit failed, nothing was stored: %w", r.runID, s.path, err)}
			}
			r.done <- res
			results[i] = writeRes{}
		}
	}
}

// gather appends to batch the requests queued at this moment, up to
// maxBatch, without waiting.
func (s *Store) gather(batch []*writeReq) []*writeReq {
	for len(batch) < maxBatch {
		select {
		case r, ok := <-s.reqs:
			if !ok {
				return batch
			}
			batch = append(batch, r)
		default:
			return batch
		}
	}
	return batch
}

// applyRequest validates r against the state in w and, only if all of it
// is valid, writes it, through w, which records each write for the log. A
// validation error is returned in the result; a write error is an errTx
// that aborts the whole transaction.
func (s *Store) applyRequest(w *wtx, r *writeReq) writeRes {
	if r.op != nil {
		// A lifecycle change: its batch is checkpointed, not logged.
		return r.op(w.tx)
	}
	if r.write != nil {
		return r.write(w)
	}
	if r.create {
		res := s.createRun(w, r)
		if res.err == nil && res.created {
			s.states.put(r.runID, res.state)
		}
		return res
	}
	b := w.Bucket(bucketRuns).Bucket([]byte(r.runID))
	if b == nil {
		return writeRes{err: notFound(r.runID)}
	}
	epoch, _ := decodeLease(b.Get(keyLease))
	if r.acquire {
		epoch++
		if err := b.Put(keyLease, encodeLease(epoch, r.owner)); err != nil {
			return writeRes{err: errTx{err}}
		}
		return writeRes{epoch: epoch}
	}
	if r.owner == "" && r.epoch != 0 && r.epoch != epoch {
		return writeRes{err: fmt.Errorf("append to run %s with lease epoch %d: the run's owner is now at epoch %d: %w",
			r.runID, r.epoch, epoch, store.ErrFenced)}
	}
	st := s.states.get(r.runID)
	if st == nil {
		// With its contract: the fold does not need it, but the state an
		// append returns holds it, and the cache keeps it from here on.
		loaded, err := loadState(b.b, contractOf(readTx(w.tx), r.runID))
		if err != nil {
			return writeRes{err: fmt.Errorf("run %s: %w", r.runID, err)}
		}
		st = &loaded
	}
	if st.Archive != nil {
		return writeRes{err: fmt.Errorf("append to run %s: %w: an archived run takes no events", r.runID, store.ErrArchived)}
	}
	if st.Version != r.expected {
		return writeRes{err: fmt.Errorf("append to run %s at version %d: the run is at version %d: %w; reload the run and retry",
			r.runID, r.expected, st.Version, store.ErrConflict)}
	}
	// The store folds the events onto the state as stored, whoever
	// appends: what the fold rejects never reaches the log, and the state
	// it makes is the one Append returns (the engine folds nothing of its
	// own). Append's caller folded them onto the cached state (foldAhead),
	// off this one goroutine that every run waits on; when that state is
	// still the run's, as this transaction sees it (an earlier request of
	// this batch may have moved it), its fold is this one. Otherwise they
	// are folded here.
	var next *runstate.State
	var snap []byte
	if f := r.folded; f != nil && f.base == st {
		next, snap = &f.next, f.snapshot
	} else {
		folded, err := runstate.ApplyAll(*st, r.events)
		if err != nil {
			return writeRes{err: fmt.Errorf("append to run %s: %w", r.runID, err)}
		}
		next = &folded
	}
	deliveries, err := s.outboxOf(w.tx, st, next, r.events)
	if err != nil {
		return writeRes{err: fmt.Errorf("append to run %s: %w", r.runID, err)}
	}
	if err := putEvents(b, r); err != nil {
		return writeRes{err: errTx{err}}
	}
	if err := putSnapshot(w, b, st.Status, *next, snap); err != nil {
		return writeRes{err: errTx{err}}
	}
	if err := putBlobs(w, b, r.expected+1, r.blobs); err != nil {
		return writeRes{err: errTx{err}}
	}
	if err := putOutbox(w, deliveries); err != nil {
		return writeRes{err: errTx{err}}
	}
	if r.owner != "" {
		// The append takes the lease with it (store.WithAcquire).
		epoch++
		if err := b.Put(keyLease, encodeLease(epoch, r.owner)); err != nil {
			return writeRes{err: errTx{err}}
		}
	}
	s.states.put(r.runID, next)
	return writeRes{state: next, epoch: epoch}
}

func (s *Store) createRun(w *wtx, r *writeReq) writeRes {
	st := *r.created
	tx := w.tx
	reqs := w.Bucket(bucketRequests)
	rk := requestKey(st.Tenant, st.RequestID)
	if st.RequestID != "" {
		if existing := reqs.Get(rk); existing != nil {
			b := runBucket(tx, string(existing))
			if b == nil {
				return writeRes{err: fmt.Errorf("request %q names run %s, which is missing", st.RequestID, existing)}
			}
			prev, err := loadState(b, contractOf(readTx(tx), string(existing)))
			if err != nil {
				return writeRes{err: err}
			}
			return writeRes{state: &prev}
		}
	}
	runs := w.Bucket(bucketRuns)
	if runs.Bucket([]byte(r.runID)) != nil {
		return writeRes{err: fmt.Errorf("create run %s: a run with that id exists: %w", r.runID, store.ErrConflict)}
	}
	if tx.Bucket(bucketDeleted).Get([]byte(r.runID)) != nil {
		return writeRes{err: fmt.Errorf("create run %s: %w: a run with that ID was deleted, and a deleted run's ID is not used again", r.runID, store.ErrExists)}
	}
	contract, err := seal.Seal(st.Contract)
	if err != nil {
		return writeRes{err: fmt.Errorf("create run %s: encode contract: %w", r.runID, err)}
	}
	deliveries, err := s.outboxOf(tx, &runstate.State{}, &st, r.events)
	if err != nil {
		return writeRes{err: fmt.Errorf("create run %s: %w", r.runID, err)}
	}
	b, err := runs.CreateBucket([]byte(r.runID))
	if err != nil {
		return writeRes{err: errTx{err}}
	}
	if _, err := b.CreateBucket(keyEvents); err != nil {
		return writeRes{err: errTx{err}}
	}
	if err := w.Bucket(bucketContracts).Put([]byte(r.runID), contract); err != nil {
		return writeRes{err: errTx{err}}
	}
	if err := putEvents(b, r); err != nil {
		return writeRes{err: errTx{err}}
	}
	if err := putSnapshot(w, b, reinv1.RunStatus_RUN_STATUS_UNSPECIFIED, st, nil); err != nil {
		return writeRes{err: errTx{err}}
	}
	if err := putBlobs(w, b, 1, r.blobs); err != nil { // an Import's
		return writeRes{err: errTx{err}}
	}
	if err := putOutbox(w, deliveries); err != nil {
		return writeRes{err: errTx{err}}
	}
	if st.RequestID != "" {
		if err := reqs.Put(rk, []byte(r.runID)); err != nil {
			return writeRes{err: errTx{err}}
		}
	}
	return writeRes{state: &st, created: true}
}

// eventsFillPercent is how full bbolt fills an events bucket's pages:
// sequences only grow, so it can fill pages instead of splitting them.
const eventsFillPercent = 0.95

func putEvents(b *wbucket, r *writeReq) error {
	eb := b.Bucket(keyEvents)
	eb.SetFillPercent(eventsFillPercent)
	for i, ev := range r.events {
		if err := eb.Put(seqKey(ev.GetSequence()), r.encoded[i]); err != nil {
			return err
		}
	}
	return nil
}

// putSnapshot writes the run's state (snap, its sealed snapshot, or nil to
// encode it here) and moves it in the status index when its status changed.
func putSnapshot(w *wtx, b *wbucket, prev reinv1.RunStatus, next runstate.State, snap []byte) error {
	if snap == nil {
		var err error
		if snap, err = seal.Seal(next.Proto(false)); err != nil {
			return err
		}
	}
	if err := b.Put(keySnapshot, snap); err != nil {
		return err
	}
	if prev == next.Status {
		return nil
	}
	if runstate.Terminal(next.Status) && !runstate.Terminal(prev) {
		if err := w.Bucket(bucketEnded).Put(endedKey(next), endedValue(next, next.Archive != nil)); err != nil {
			return err
		}
	}
	idx := w.Bucket(bucketStatus)
	if prev != reinv1.RunStatus_RUN_STATUS_UNSPECIFIED {
		if err := idx.Delete(statusKey(prev, next.RunID)); err != nil {
			return err
		}
	}
	if err := idx.Put(statusKey(next.Status, next.RunID), nil); err != nil {
		return err
	}
	changes := w.Bucket(bucketChanges)
	cursor, err := changes.NextSequence()
	if err != nil {
		return err
	}
	ch, err := proto.Marshal(&reinv1.RunChange{
		Cursor: cursor, RunId: next.RunID, Previous: prev, Status: next.Status, Version: next.Version,
		Reason: next.StatusReason, ChangedAt: timestamppb.New(next.UpdatedAt),
	})
	if err != nil {
		return err
	}
	v := make([]byte, 0, len(next.Tenant)+1+len(ch))
	v = append(append(append(v, next.Tenant...), 0), ch...)
	return changes.Put(seqKey(cursor), v)
}

// A lease is the epoch (8 bytes, big-endian) and the owner's name.
func encodeLease(epoch uint64, owner string) []byte {
	return append(seqKey(epoch), owner...)
}

func decodeLease(v []byte) (uint64, string) {
	if len(v) < 8 {
		return 0, ""
	}
	return binary.BigEndian.Uint64(v[:8]), string(v[8:])
}
