package bolt

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	bbolt "go.etcd.io/bbolt"

	"github.com/reinhq/rein/internal/store"
)

// Reads never go through the writer's transaction, nor wait for it: a read
// is a bbolt read transaction of the last checkpoint with the overlay of
// every commit synced since over it (overlay.go, rtx.go), with the
// checkpoint's transaction ID (a snapshot). A read takes the published
// snapshot, begins its read transaction and checks that it is of that
// snapshot's checkpoint: so a read sees every acknowledged commit and
// nothing that is not yet durable, and a checkpoint changes the read
// transaction and the overlay at once.
//
// The writer adds each batch's writes to its overlay once they are synced
// and marks it newer than the published snapshot; the first read after
// that publishes a copy (fresh), which is free, where a copy at every sync
// would have the next batch's adds copy each node of the tree they touch
// though no read took it: a store that takes appends and no reads (a
// run's steps, which the engine keeps in memory) copies nothing. A read
// waits then only for ovMu, which the writer holds while it adds a
// batch's writes, never across a sync.
//
// At most GOMAXPROCS-1 reads (one, on fewer than three cores) run at once,
// the others waiting for a turn (reads): a crowd of reads that each take
// a core for as long as they run (a listing decodes every run's state)
// would otherwise leave the writer, whose every batch must be scheduled
// again after its sync, waiting behind all of them for a core.
//
// Each read begins its own read transaction and ends it, as bbolt's View
// does, rather than share a long one: bbolt's commit waits for every read
// transaction to end before it remaps a growing file, so a read
// transaction held across a checkpoint would stop it (the checkpoint
// waits only for the reads in flight, which wait for nothing of the
// writer's).
//
// The checkpoint's commit makes its transaction visible to reads that
// begin after bbolt writes its meta page, before that page is synced and
// the checkpoint's snapshot is published. A read that begins then sees the
// next transaction ID: when the checkpoint holds only what the overlay
// does (clean: a checkpoint between batches) the overlay over it reads the
// same, and the read goes on; when it holds more (a lifecycle change, a
// batch too large for the log), the read waits for the snapshot the
// checkpoint publishes once its commit is durable.
type snapshot struct {
	// txid is the checkpoint's transaction ID, which a read transaction
	// of it has.
	txid uint64
	ov   *overlay // nil for none
	// clean says that the checkpoint being committed holds nothing the
	// overlay does not.
	clean bool
	// err, when set, refuses every read: the store halted.
	err error
	// next is closed when a newer snapshot is published.
	next chan struct{}
}

// publishLocked makes p the snapshot reads take; the caller holds ovMu.
func (s *Store) publishLocked(p *snapshot) {
	p.next = make(chan struct{})
	if old := s.snap.Swap(p); old != nil {
		close(old.next)
	}
}

// addSynced adds a batch's writes, synced, to ovw, for the next read to
// publish (fresh).
func (s *Store) addSynced(writes []*ovEntry) {
	s.ovMu.Lock()
	defer s.ovMu.Unlock()
	ovApply(s.ovw, writes)
	s.ovStale.Store(true)
}

// fresh is the snapshot a read takes: the one published, or, when commits
// were synced since, a copy of ovw published now.
func (s *Store) fresh() *snapshot {
	if s.ovStale.Load() {
		s.ovMu.Lock()
		s.publishFreshLocked()
		s.ovMu.Unlock()
	}
	return s.snap.Load()
}

// publishFreshLocked publishes a copy of ovw when it holds commits the
// snapshot published lacks, unless the store halted; the caller holds
// ovMu.
func (s *Store) publishFreshLocked() {
	if !s.ovStale.Load() {
		return
	}
	s.ovStale.Store(false)
	if p := s.snap.Load(); p != nil && p.err != nil {
		return
	}
	s.publishLocked(&snapshot{txid: s.ckTxid, ov: s.ovw.Copy()})
}

// publishCheckpoint publishes the checkpoint txid, with no overlay, and
// starts the writer's anew.
func (s *Store) publishCheckpoint(txid uint64) {
	s.ovMu.Lock()
	defer s.ovMu.Unlock()
	s.ckTxid = txid
	s.ovw = newOverlay()
	s.ovStale.Store(false)
	s.publishLocked(&snapshot{txid: txid})
}

// publishFile publishes the file as it is, for the reads of a store just
// opened or just scrubbed; db must not be s.db yet when a read may be in
// flight.
func (s *Store) publishFile(db *bbolt.DB) error {
	tx, err := db.Begin(false)
	if err != nil {
		return err
	}
	id := uint64(tx.ID())
	_ = tx.Rollback()
	s.publishCheckpoint(id)
	return nil
}

// readTurns is how many reads run at once (view).
func readTurns() int { return max(1, runtime.GOMAXPROCS(0)-1) }

// errSnapshotAhead is a read transaction begun on a checkpoint newer than
// the snapshot it took: the read begins again.
var errSnapshotAhead = errors.New("the read's transaction is newer than its snapshot")

// view runs fn on what the store holds now (an rtx), guarded. what names
// what is read ("run R"), for the error a damaged page gives. A read that
// waits (for its turn, or for a checkpoint's snapshot) stops waiting when
// ctx ends, with ctx's error.
func (s *Store) view(ctx context.Context, what string, fn func(tx *rtx) error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return fmt.Errorf("read store %s: %w", s.path, store.ErrClosed)
	}
	s.dbMu.RLock()
	defer s.dbMu.RUnlock()
	for {
		select {
		case s.reads <- struct{}{}:
		case <-ctx.Done():
			return fmt.Errorf("read %s: waiting for a turn to read: %w", what, ctx.Err())
		}
		p := s.fresh()
		if p.err != nil {
			// The file lacks what the log holds, and the overlay that held
			// it may be gone: a read now could go back in time.
			<-s.reads
			return fmt.Errorf("read %s: %w", what, p.err)
		}
		var wait chan struct{}
		err := guard(what, func() error {
			tx, err := s.db.Begin(false)
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback() }()
			id := uint64(tx.ID())
			for id > p.txid && !(p.clean && id == p.txid+1) {
				// A checkpoint committed after p was taken: its snapshot
				// may be out already.
				q := s.snap.Load()
				if q == p {
					wait = p.next
					return errSnapshotAhead
				}
				if p = q; p.err != nil {
					return fmt.Errorf("read %s: %w", what, p.err)
				}
			}
			if id < p.txid {
				return errSnapshotAhead // begun before the snapshot it took
			}
			return fn(&rtx{tx: tx, ov: p.ov})
		})
		<-s.reads
		if !errors.Is(err, errSnapshotAhead) {
			return err
		}
		if wait != nil {
			select {
			case <-wait:
			case <-ctx.Done():
				return fmt.Errorf("read %s: waiting for a checkpoint's snapshot: %w", what, ctx.Err())
			}
		}
	}
}
