package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	bbolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/store/seal"
	"github.com/reinhq/rein/internal/storeformat"
)

var (
	bucketMeta     = []byte("meta")
	bucketRuns     = []byte("runs")
	bucketRequests = []byte("requests")
	bucketStatus   = []byte("status")
	bucketChanges  = []byte("changes")
	// Contracts live apart from the runs bucket: a run's snapshot is
	// rewritten on every append, and a contract beside it (a model script
	// can be large) would be rewritten with it.
	bucketContracts = []byte("contracts")
	// Blobs were kept once for every run, keyed by their SHA-256 in hex,
	// before they were kept with their run (blobs.go); files from then are
	// still read.
	bucketBlobs = []byte("blobs")
	keyFormat   = []byte("format")
	keySnapshot = []byte("snapshot")
	keyLease    = []byte("lease")
	keyEvents   = []byte("events")
	keyBlobs    = []byte("blobs")
	formatV1    = []byte("rein-store-1")
	// formatV2 files may hold blobs in a run's events bucket (blobs.go),
	// which a rein that knows only formatV1 would read as damage.
	formatV2 = []byte("rein-store-2")
	// formatV3 files may hold blobs under short keys (blobs.go), which a
	// rein that knows formatV2 at most would read as events: a file is
	// marked so by the first commit that puts a blob.
	formatV3 = []byte("rein-store-3")
	// formatV4 files are in store format 7 or later (format.go): their log
	// records what each commit wrote, and they may hold webhooks and tool
	// digests, which a rein that knows formatV3 at most would not read.
	formatV4 = []byte("rein-store-4")
)

// maxBatch bounds how many requests share one commit.
const maxBatch = 1024

// maxCachedStates bounds the cache of run states (states).
const maxCachedStates = 16384

// Store is the bbolt event store. It implements store.Store.
type Store struct {
	// db is swapped by a scrub (scrub.go), under dbMu: reads hold it
	// shared; the writer, which scrubs, needs it for neither.
	db       *bbolt.DB
	dbMu     sync.RWMutex
	path     string
	readOnly bool
	noSync   bool
	scrubs   chan chan error

	reqs   chan *writeReq
	states states
	// outbox makes the webhook deliveries of each append (outbox.go);
	// subs is the writer's cache of the subscriptions it matches.
	outbox store.Outbox
	subs   subCache

	// The open write transaction and the log (checkpoint.go), the
	// writer's, under txMu (which no read takes).
	txMu sync.Mutex
	tx   *bbolt.Tx
	// ovNew holds the record body of each batch synced since the last
	// snapshot published, oldest first, and ckTxid is the last
	// checkpoint's transaction ID (snapshot.go). ovMu guards both and the
	// snapshots published; ovStale says that batches were synced since the
	// snapshot published.
	ovMu    sync.Mutex
	ovNew   [][]byte
	ckTxid  uint64
	ovStale atomic.Bool
	// snap is what reads read (snapshot.go), taken with no lock.
	snap atomic.Pointer[snapshot]
	// reads holds a token for each read running (readTurns).
	reads   chan struct{}
	wal     *walFile
	storeID []byte
	applied uint64 // the last log record the file holds
	logged  uint64 // the last log record written
	// broken, once set, refuses every write and read: the store halted
	// (haltLocked) after a failure that left what is on disk unknown.
	broken error
	// failed is closed when broken is set (Failed).
	failed chan struct{}
	// finished is the writer's last checkpoint's error, for Close.
	finished error
	// copied is a read-only store's private copy of its file, with its
	// log applied (recover.go), removed at Close; "" for none.
	copied string

	// mu guards closed; the writer goroutine is the only one that writes.
	mu     sync.RWMutex
	closed bool
	done   chan struct{}

	// commits counts write transactions, for tests and benchmarks.
	commits atomic.Uint64
	// beforeCommit, when set by a test, runs before each write transaction.
	beforeCommit func(batch int)
	// afterCheckpoint, when set by a test, runs after a checkpoint's commit,
	// before the log is written from its start again.
	afterCheckpoint func()
}

var _ store.Store = (*Store)(nil)

// Options tune Open.
type Options struct {
	// LockTimeout is how long Open waits for another process to release the
	// file. Zero means 100ms.
	LockTimeout time.Duration
	// NoSync skips fsync. Only benchmarks that measure the cost of
	// durability set it.
	NoSync bool
	// ReadOnly opens an existing file without writing a byte to it (bbolt
	// read-only: a shared lock, so read-only stores of one file open side
	// by side, and the file and its directory may be read-only). Every
	// write is refused with store.ErrReadOnly.
	ReadOnly bool
	// Formats are the store formats the build reads and writes
	// (format.go); zero means storeformat.This(). Tests give another to
	// play an older or newer build.
	Formats storeformat.Build
	// Outbox, when set, makes the webhook deliveries each create and
	// append puts in the outbox, in its transaction (outbox.go).
	Outbox store.Outbox
}

// Path is the file the store is in.
func (s *Store) Path() string { return s.path }

// Close waits for appends in flight, then closes the file.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return fmt.Errorf("close store %s: %w", s.path, store.ErrClosed)
	}
	s.closed = true
	close(s.reqs)
	s.mu.Unlock()
	<-s.done
	err := s.db.Close()
	if s.copied != "" {
		_ = os.Remove(s.copied)
	}
	if s.finished != nil {
		return fmt.Errorf("close store %s: %w; its log keeps what the file lacks, and the next open applies it", s.path, s.finished)
	}
	return err
}

// Create implements store.Store.
func (s *Store) Create(ctx context.Context, started *reinv1.Event) (runstate.State, bool, error) {
	st, err := runstate.Apply(runstate.State{}, started)
	if err != nil {
		return runstate.State{}, false, err
	}
	data, err := seal.Seal(started)
	if err != nil {
		return runstate.State{}, false, err
	}
	res, err := s.submit(ctx, &writeReq{create: true, runID: started.GetRunId(), events: []*reinv1.Event{started}, encoded: [][]byte{data}, created: &st})
	if err != nil {
		return runstate.State{}, false, err
	}
	return *res.state, res.created, nil
}

// Append implements store.Store.
func (s *Store) Append(ctx context.Context, runID string, expected uint64, events []*reinv1.Event, opts ...store.AppendOption) (runstate.State, error) {
	if len(events) == 0 {
		return s.Load(ctx, runID)
	}
	o := store.Options(opts)
	// Hashed here, in the caller's goroutine, as the events are encoded: the
	// writer only puts. The engine hashed these blobs as it made them; they
	// are hashed again because it is the store's guarantee that a blob is
	// stored only under the SHA-256 of its content, whoever calls (rein
	// bench steps' profile puts the second hash at ~1% of a step's CPU).
	if err := store.CheckBlobs(o.Blobs); err != nil {
		return runstate.State{}, fmt.Errorf("append to run %s: %w", runID, err)
	}
	encoded := make([][]byte, len(events))
	for i, ev := range events {
		data, err := seal.Seal(ev)
		if err != nil {
			return runstate.State{}, fmt.Errorf("append to run %s: encode event %d: %w", runID, ev.GetSequence(), err)
		}
		encoded[i] = data
	}
	res, err := s.submit(ctx, &writeReq{runID: runID, expected: expected, events: events, encoded: encoded, epoch: o.Epoch, blobs: o.Blobs, owner: o.Acquire,
		folded: s.foldAhead(runID, expected, events)})
	if err != nil {
		return runstate.State{}, err
	}
	if o.Acquire != "" && o.Acquired != nil {
		*o.Acquired = res.epoch
	}
	return *res.state, nil
}

// Import implements store.Store. It is one create request carrying every
// event and the blobs, so that the writer stores all of it in one
// transaction; the events are folded and encoded here, in the caller's
// goroutine, as Append's are.
func (s *Store) Import(ctx context.Context, events []*reinv1.Event, blobs map[string][]byte) (runstate.State, error) {
	if len(events) == 0 {
		return runstate.State{}, errors.New("import a run: no events; a run's log starts with run_started")
	}
	runID := events[0].GetRunId()
	if err := store.CheckBlobs(blobs); err != nil {
		return runstate.State{}, fmt.Errorf("import run %s: %w", runID, err)
	}
	st, err := runstate.ApplyAll(runstate.State{}, events)
	if err != nil {
		return runstate.State{}, fmt.Errorf("import run %s: %w", runID, err)
	}
	encoded := make([][]byte, len(events))
	for i, ev := range events {
		if encoded[i], err = seal.Seal(ev); err != nil {
			return runstate.State{}, fmt.Errorf("import run %s: encode event %d: %w", runID, ev.GetSequence(), err)
		}
	}
	res, err := s.submit(ctx, &writeReq{create: true, runID: runID, events: events, encoded: encoded, created: &st, blobs: blobs})
	switch {
	case errors.Is(err, store.ErrConflict):
		return runstate.State{}, fmt.Errorf("import run %s: %w under that ID", runID, store.ErrExists)
	case err != nil:
		return runstate.State{}, err
	case !res.created && res.state.RunID == runID:
		return runstate.State{}, fmt.Errorf("import run %s: %w under that ID", runID, store.ErrExists)
	case !res.created:
		return runstate.State{}, fmt.Errorf("import run %s: %w with its request ID %q in tenant %q: run %s",
			runID, store.ErrExists, st.RequestID, st.Tenant, res.state.RunID)
	}
	return *res.state, nil
}

// Acquire implements store.Store.
func (s *Store) Acquire(ctx context.Context, runID, owner string) (uint64, error) {
	res, err := s.submit(ctx, &writeReq{acquire: true, runID: runID, owner: owner})
	return res.epoch, err
}

func (s *Store) submit(ctx context.Context, r *writeReq) (writeRes, error) {
	if s.readOnly {
		return writeRes{}, fmt.Errorf("write run %s to %s: %w", r.runID, s.path, store.ErrReadOnly)
	}
	r.done = make(chan writeRes, 1)
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return writeRes{}, fmt.Errorf("write run %s: %w", r.runID, store.ErrClosed)
	}
	select {
	case s.reqs <- r:
	case <-ctx.Done():
		s.mu.RUnlock()
		return writeRes{}, ctx.Err()
	}
	s.mu.RUnlock()
	// Once queued, the request is committed or refused whatever ctx does:
	// the caller must learn which, so it waits.
	res := <-r.done
	return res, res.err
}

// Load implements store.Store.
func (s *Store) Load(ctx context.Context, runID string) (runstate.State, error) {
	var st runstate.State
	err := s.view(ctx, "run "+runID, func(tx *rtx) error {
		b := tx.runBucket(runID)
		if b == nil {
			return missingRun(tx, runID)
		}
		var err error
		if st, err = loadState(b, contractOf(tx, runID)); err != nil {
			return fmt.Errorf("run %s: %w", runID, err)
		}
		if st.RunID != runID {
			return damaged("run "+runID, "its snapshot is run %q's", st.RunID)
		}
		return nil
	})
	return st, err
}

// Events implements store.Store.
func (s *Store) Events(ctx context.Context, runID string, after uint64, limit int) ([]*reinv1.Event, error) {
	var out []*reinv1.Event
	err := s.view(ctx, fmt.Sprintf("run %s events from %d", runID, after+1), func(tx *rtx) error {
		b := tx.runBucket(runID)
		if b == nil {
			return missingRun(tx, runID)
		}
		eb := b.Bucket(keyEvents)
		if eb == nil {
			return stubOrDamaged(b, runID, "its events bucket is missing")
		}
		c := eb.Cursor()
		want := after + 1
		for k, v := c.Seek(seqKey(want)); k != nil && len(out) < limit; k, v = c.Next() {
			if isBlobKey(k) {
				continue
			}
			ev := &reinv1.Event{}
			if err := decodeEvent(runID, want, k, v, ev); err != nil {
				return err
			}
			out = append(out, ev)
			want++
		}
		return nil
	})
	return out, err
}

// decodeEvent decodes the stored event under key k, which must be the next
// in the run's log (want), into ev, checking its seal and that it is the
// event its key says.
func decodeEvent(runID string, want uint64, k, v []byte, ev *reinv1.Event) error {
	if len(k) != 8 {
		return damaged(eventName(runID, want), "the next key in the run's log is %d bytes, not a sequence (%x)", len(k), k)
	}
	seq := binary.BigEndian.Uint64(k)
	if seq != want {
		return damaged(eventName(runID, want), "it is missing: the next stored event is %d", seq)
	}
	if problem := unsealed(v, ev); problem != "" {
		return damaged(eventName(runID, seq), "%s", problem)
	}
	if ev.GetSequence() != seq || ev.GetRunId() != runID {
		return damaged(eventName(runID, seq), "the stored value is run %q event %d", ev.GetRunId(), ev.GetSequence())
	}
	return nil
}

// Changes implements store.Store.
func (s *Store) Changes(ctx context.Context, after uint64, limit int) ([]store.Change, uint64, error) {
	var out []store.Change
	var head uint64
	err := s.view(ctx, "the status changes", func(tx *rtx) error {
		b := tx.Bucket(bucketChanges)
		if b == nil {
			return nil
		}
		head = b.Sequence()
		c := b.Cursor()
		for k, v := c.Seek(seqKey(after + 1)); k != nil && len(out) < limit; k, v = c.Next() {
			tenant, data, ok := bytes.Cut(v, []byte{0})
			ch := &reinv1.RunChange{}
			if !ok || proto.Unmarshal(data, ch) != nil {
				return damaged(fmt.Sprintf("status change %d", binary.BigEndian.Uint64(k)), "it does not decode")
			}
			out = append(out, store.Change{Cursor: ch.GetCursor(), Tenant: string(tenant), Change: ch})
		}
		return nil
	})
	return out, head, err
}

// runBucket is the run's bucket, or nil. A file from before a bucket
// existed (opened read-only, so not completed by Open) reads as empty.
func runBucket(tx *bbolt.Tx, runID string) *bbolt.Bucket {
	runs := tx.Bucket(bucketRuns)
	if runs == nil {
		return nil
	}
	return runs.Bucket([]byte(runID))
}

// runBucket is the run's bucket as the read sees it, or nil (runBucket).
func (tx *rtx) runBucket(runID string) *rbucket {
	runs := tx.Bucket(bucketRuns)
	if runs == nil {
		return nil
	}
	return runs.Bucket([]byte(runID))
}

// missingRun is the error for a run whose bucket is not there: not found,
// unless the store still holds its contract or lists it in the status index,
// which means the page that held its key was damaged.
func missingRun(tx *rtx, runID string) error {
	if contractOf(tx, runID) != nil {
		return damaged("run "+runID, "its contract is stored but its log and snapshot are not where they belong (a damaged page of the runs bucket)")
	}
	return notFound(runID)
}

// contractOf is the stored contract of a run, for loadState.
func contractOf(tx *rtx, runID string) []byte {
	contracts := tx.Bucket(bucketContracts)
	if contracts == nil {
		return nil
	}
	return contracts.Get([]byte(runID))
}

// loadState decodes a run's snapshot, and its contract when contractBytes
// is not nil, checking their seals.
func loadState(b getter, contractBytes []byte) (runstate.State, error) {
	snap := b.Get(keySnapshot)
	if snap == nil {
		return runstate.State{}, damaged("snapshot", "it is missing")
	}
	run := &reinv1.Run{}
	if err := unseal(snap, run, "snapshot"); err != nil {
		return runstate.State{}, err
	}
	var contract *reinv1.TaskContract
	if contractBytes != nil {
		contract = &reinv1.TaskContract{}
		if err := unseal(contractBytes, contract, "contract"); err != nil {
			return runstate.State{}, err
		}
	}
	return runstate.FromProto(run, contract), nil
}

func notFound(runID string) error {
	return fmt.Errorf("run %q: %w", runID, store.ErrNotFound)
}

func seqKey(seq uint64) []byte {
	k := make([]byte, 8)
	binary.BigEndian.PutUint64(k, seq)
	return k
}

func statusKey(status reinv1.RunStatus, runID string) []byte {
	k := make([]byte, 0, 1+len(runID))
	k = append(k, byte(status))
	return append(k, runID...)
}

func requestKey(tenant, requestID string) []byte {
	k := make([]byte, 0, len(tenant)+1+len(requestID))
	k = append(k, tenant...)
	k = append(k, 0)
	return append(k, requestID...)
}
