package bolt

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

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
// The writer adds nothing to a tree and keeps nothing of a write: once a
// batch is synced it hands a copy of its record's body (the batch's writes
// as the log holds them, writes.go) to the list of batches synced since
// the last snapshot published (addSynced), and the first read after that
// publishes a snapshot of the overlay it read last with those batches
// above it (fresh). The first read of that snapshot decodes them and adds
// them to a copy of that overlay (snapshot.overlay), once, for every read
// that shares it: so the writer's path costs a copy and a slice append a
// batch, a store that takes appends and no reads (a run's steps, which the
// engine keeps in memory) builds no tree at all, and what a checkpoint
// makes part of the file before any read asked for it is never decoded. A
// read waits then only for ovMu, which the writer holds to append to that
// list, never across a sync; and, on a snapshot no read took yet, for the
// adds of the read that takes it first.
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
	// base is an overlay of writes synced since the checkpoint (nil for
	// none), and above holds the record bodies of the batches synced after
	// those, oldest first: the snapshot's overlay is base with above added
	// (overlay). Neither is ever changed.
	base   *overlay
	above  [][]byte
	making sync.Mutex              // held by the read making ov
	ov     atomic.Pointer[overlay] // base with above added, once a read made it
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

// overlay is what p reads over its checkpoint: base with the batches above
// it added, by the first read that asks, on a copy (copy-on-write: it
// copies only the nodes the adds change), while the reads that ask
// meanwhile wait. Nil for none. A read whose adds fail (a record that does
// not decode, or a panic, which guard turns into its error) leaves the
// overlay to the next read to make.
func (p *snapshot) overlay() (*overlay, error) {
	if len(p.above) == 0 {
		return p.base, nil
	}
	if ov := p.ov.Load(); ov != nil {
		return ov, nil
	}
	p.making.Lock()
	defer p.making.Unlock()
	if ov := p.ov.Load(); ov != nil {
		return ov, nil
	}
	ov := newOverlay()
	if p.base != nil {
		ov = p.base.Copy()
	}
	for i, body := range p.above {
		if err := ovApply(ov, body); err != nil {
			return nil, fmt.Errorf("batch %d of %d synced since the last read: %w", i+1, len(p.above), err)
		}
	}
	p.ov.Store(ov)
	return ov, nil
}

// parts is base and above for a snapshot of what p holds and more: p's
// overlay as one tree when a read made it, or p's own parts.
func (p *snapshot) parts() (*overlay, [][]byte) {
	if ov := p.ov.Load(); ov != nil {
		return ov, nil
	}
	return p.base, p.above
}

// addSynced hands a synced batch's record body to the next snapshot
// (fresh), which keeps it: the caller must not change it.
func (s *Store) addSynced(body []byte) {
	s.ovMu.Lock()
	defer s.ovMu.Unlock()
	if len(body) > 0 {
		s.ovNew = append(s.ovNew, body)
	}
	s.ovStale.Store(true)
}

// fresh is the snapshot a read takes: the one published, or, when batches
// were synced since, one that holds them, published now.
func (s *Store) fresh() *snapshot {
	if s.ovStale.Load() {
		s.ovMu.Lock()
		s.publishFreshLocked()
		s.ovMu.Unlock()
	}
	return s.snap.Load()
}

// publishFreshLocked publishes a snapshot with the batches synced since the
// one published, when there are any, unless the store halted; the caller
// holds ovMu.
func (s *Store) publishFreshLocked() {
	if !s.ovStale.Load() {
		return
	}
	s.ovStale.Store(false)
	p := s.snap.Load()
	if p != nil && p.err != nil {
		return
	}
	q := &snapshot{txid: s.ckTxid}
	if p != nil {
		base, above := p.parts()
		q.base, q.above = base, append(above[:len(above):len(above)], s.ovNew...)
	}
	s.ovNew = nil
	s.publishLocked(q)
}

// publishCheckpoint publishes the checkpoint txid, with no overlay: the
// batches synced before it are in it.
func (s *Store) publishCheckpoint(txid uint64) {
	s.ovMu.Lock()
	defer s.ovMu.Unlock()
	s.ckTxid = txid
	s.ovNew = nil
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
			ov, err := p.overlay()
			if err != nil {
				return err
			}
			return fn(&rtx{tx: tx, ov: ov})
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
