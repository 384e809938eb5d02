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
	bolterrors "go.etcd.io/bbolt/errors"
	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
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
	// Blobs are content-addressed: keyed by their SHA-256 in hex, written
	// once, never rewritten.
	bucketBlobs = []byte("blobs")
	keyFormat   = []byte("format")
	keySnapshot = []byte("snapshot")
	keyLease    = []byte("lease")
	keyEvents   = []byte("events")
	formatV1    = []byte("rein-store-1")
)

// maxBatch bounds how many requests share one commit.
const maxBatch = 1024

// maxCachedStates bounds the writer's cache of run states.
const maxCachedStates = 16384

// Store is the bbolt event store. It implements store.Store.
type Store struct {
	db   *bbolt.DB
	path string

	reqs chan *writeReq
	// mu guards closed; the writer goroutine is the only one that writes.
	mu     sync.RWMutex
	closed bool
	done   chan struct{}

	// commits counts write transactions, for tests and benchmarks.
	commits atomic.Uint64
	// beforeCommit, when set by a test, runs before each write transaction.
	beforeCommit func(batch int)
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
}

// Open opens or creates the store at path. A file that is not a rein store,
// is truncated, or is not bbolt at all is refused with an error that names
// the path, and is left byte-for-byte unchanged.
func Open(path string, opts Options) (*Store, error) {
	if opts.LockTimeout == 0 {
		opts.LockTimeout = 100 * time.Millisecond
	}
	if err := check(path, opts.LockTimeout); err != nil {
		return nil, err
	}
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: opts.LockTimeout, NoSync: opts.NoSync})
	if err != nil {
		return nil, openError(path, err)
	}
	if err := db.Update(func(tx *bbolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		if meta.Get(keyFormat) == nil {
			if err := meta.Put(keyFormat, formatV1); err != nil {
				return err
			}
		}
		// A file from an older rein lacks the later buckets (blobs): they
		// are made here.
		for _, b := range [][]byte{bucketRuns, bucketContracts, bucketRequests, bucketStatus, bucketChanges, bucketBlobs} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("initialise store %s: %w", path, err)
	}
	s := &Store{db: db, path: path, reqs: make(chan *writeReq, maxBatch), done: make(chan struct{})}
	go s.writer()
	return s, nil
}

// check refuses a file that exists but is not a healthy rein store. It opens
// the file read-only, so a refused file is never written to.
func check(path string, timeout time.Duration) error {
	info, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open store %s: %w", path, err)
	}
	if info.IsDir() {
		return fmt.Errorf("open store %s: it is a directory; pass the path of a database file", path)
	}
	if info.Size() == 0 {
		return fmt.Errorf("open store %s: the file is empty; it is not a rein store (remove it to start a new store)", path)
	}
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: timeout})
	if err != nil {
		return openError(path, err)
	}
	defer db.Close()
	return db.View(func(tx *bbolt.Tx) error {
		if want := tx.Size(); want > info.Size() {
			return fmt.Errorf("open store %s: the file is truncated (%d bytes, its header says %d); restore it from a backup", path, info.Size(), want)
		}
		meta := tx.Bucket(bucketMeta)
		if meta == nil || !bytes.Equal(meta.Get(keyFormat), formatV1) {
			empty := true
			_ = tx.ForEach(func([]byte, *bbolt.Bucket) error { empty = false; return nil })
			if empty {
				return nil
			}
			return fmt.Errorf("open store %s: the file is a bbolt database but not a rein store; pass another --db path", path)
		}
		return nil
	})
}

func openError(path string, err error) error {
	switch {
	case errors.Is(err, bolterrors.ErrTimeout):
		return fmt.Errorf("open store %s: the file is locked by another process (is another rein using it?); stop it or pass another --db path", path)
	case errors.Is(err, os.ErrPermission):
		return fmt.Errorf("open store %s: %w; check the file's owner and mode", path, err)
	}
	return fmt.Errorf("open store %s: the file is not a valid rein store (%v); it was left unchanged, restore it from a backup or pass another --db path", path, err)
}

// Commits is the number of write transactions so far: with group commit,
// fewer than the appends.
func (s *Store) Commits() uint64 { return s.commits.Load() }

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
	return s.db.Close()
}

// Create implements store.Store.
func (s *Store) Create(ctx context.Context, started *reinv1.Event) (runstate.State, bool, error) {
	st, err := runstate.Apply(runstate.State{}, started)
	if err != nil {
		return runstate.State{}, false, err
	}
	data, err := proto.Marshal(started)
	if err != nil {
		return runstate.State{}, false, err
	}
	res, err := s.submit(ctx, &writeReq{create: true, runID: started.GetRunId(), events: []*reinv1.Event{started}, encoded: [][]byte{data}, created: st})
	if err != nil {
		return runstate.State{}, false, err
	}
	return res.state, res.created, nil
}

// Append implements store.Store.
func (s *Store) Append(ctx context.Context, runID string, expected uint64, events []*reinv1.Event, opts ...store.AppendOption) error {
	if len(events) == 0 {
		return nil
	}
	o := store.Options(opts)
	// Hashed here, in the caller's goroutine, as the events are encoded: the
	// writer only puts.
	if err := store.CheckBlobs(o.Blobs); err != nil {
		return fmt.Errorf("append to run %s: %w", runID, err)
	}
	encoded := make([][]byte, len(events))
	for i, ev := range events {
		data, err := proto.Marshal(ev)
		if err != nil {
			return fmt.Errorf("append to run %s: encode event %d: %w", runID, ev.GetSequence(), err)
		}
		encoded[i] = data
	}
	res, err := s.submit(ctx, &writeReq{runID: runID, expected: expected, events: events, encoded: encoded, epoch: o.Epoch, blobs: o.Blobs, owner: o.Acquire})
	if err == nil && o.Acquire != "" && o.Acquired != nil {
		*o.Acquired = res.epoch
	}
	return err
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
		if encoded[i], err = proto.Marshal(ev); err != nil {
			return runstate.State{}, fmt.Errorf("import run %s: encode event %d: %w", runID, ev.GetSequence(), err)
		}
	}
	res, err := s.submit(ctx, &writeReq{create: true, runID: runID, events: events, encoded: encoded, created: st, blobs: blobs})
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
	return res.state, nil
}

// Acquire implements store.Store.
func (s *Store) Acquire(ctx context.Context, runID, owner string) (uint64, error) {
	res, err := s.submit(ctx, &writeReq{acquire: true, runID: runID, owner: owner})
	return res.epoch, err
}

func (s *Store) submit(ctx context.Context, r *writeReq) (writeRes, error) {
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
	err := s.view(func(tx *bbolt.Tx) error {
		b := runBucket(tx, runID)
		if b == nil {
			return notFound(runID)
		}
		var err error
		st, err = loadState(b, contractOf(tx, runID))
		return err
	})
	return st, err
}

// Events implements store.Store.
func (s *Store) Events(ctx context.Context, runID string, after uint64, limit int) ([]*reinv1.Event, error) {
	var out []*reinv1.Event
	err := s.view(func(tx *bbolt.Tx) error {
		b := runBucket(tx, runID)
		if b == nil {
			return notFound(runID)
		}
		c := b.Bucket(keyEvents).Cursor()
		for k, v := c.Seek(seqKey(after + 1)); k != nil && len(out) < limit; k, v = c.Next() {
			ev := &reinv1.Event{}
			if err := proto.Unmarshal(v, ev); err != nil {
				return fmt.Errorf("run %s: decode event %d: %w", runID, binary.BigEndian.Uint64(k), err)
			}
			out = append(out, ev)
		}
		return nil
	})
	return out, err
}

// Changes implements store.Store.
func (s *Store) Changes(ctx context.Context, after uint64, limit int) ([]store.Change, uint64, error) {
	var out []store.Change
	var head uint64
	err := s.view(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketChanges)
		head = b.Sequence()
		c := b.Cursor()
		for k, v := c.Seek(seqKey(after + 1)); k != nil && len(out) < limit; k, v = c.Next() {
			tenant, data, ok := bytes.Cut(v, []byte{0})
			ch := &reinv1.RunChange{}
			if !ok || proto.Unmarshal(data, ch) != nil {
				return fmt.Errorf("decode status change %d", binary.BigEndian.Uint64(k))
			}
			out = append(out, store.Change{Cursor: ch.GetCursor(), Tenant: string(tenant), Change: ch})
		}
		return nil
	})
	return out, head, err
}

// Blob implements store.Store.
func (s *Store) Blob(ctx context.Context, hash string) ([]byte, error) {
	if err := store.CheckHash(hash); err != nil {
		return nil, err
	}
	var out []byte
	err := s.view(func(tx *bbolt.Tx) error {
		k, v := tx.Bucket(bucketBlobs).Cursor().Seek([]byte(hash))
		if !bytes.Equal(k, []byte(hash)) {
			return fmt.Errorf("blob %s: %w", hash, store.ErrNoBlob)
		}
		out = append(make([]byte, 0, len(v)), v...) // v is the file's, valid only in tx
		return nil
	})
	return out, err
}

// ScanEvents calls fn with each stored event of a run after a sequence, in
// order, decoding into one reused Event. fn must not keep ev.
func (s *Store) ScanEvents(runID string, after uint64, fn func(ev *reinv1.Event) error) error {
	return s.view(func(tx *bbolt.Tx) error {
		b := runBucket(tx, runID)
		if b == nil {
			return notFound(runID)
		}
		c := b.Bucket(keyEvents).Cursor()
		ev := &reinv1.Event{}
		for k, v := c.Seek(seqKey(after + 1)); k != nil; k, v = c.Next() {
			ev.Reset()
			if err := proto.Unmarshal(v, ev); err != nil {
				return fmt.Errorf("run %s: decode event %d: %w", runID, binary.BigEndian.Uint64(k), err)
			}
			if err := fn(ev); err != nil {
				return err
			}
		}
		return nil
	})
}

func (s *Store) view(fn func(tx *bbolt.Tx) error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return fmt.Errorf("read store %s: %w", s.path, store.ErrClosed)
	}
	return s.db.View(fn)
}

func runBucket(tx *bbolt.Tx, runID string) *bbolt.Bucket {
	return tx.Bucket(bucketRuns).Bucket([]byte(runID))
}

// contractOf is the stored contract of a run, for loadState.
func contractOf(tx *bbolt.Tx, runID string) []byte {
	return tx.Bucket(bucketContracts).Get([]byte(runID))
}

// loadState decodes a run's snapshot, and its contract when contractBytes
// is not nil.
func loadState(b *bbolt.Bucket, contractBytes []byte) (runstate.State, error) {
	run := &reinv1.Run{}
	if err := proto.Unmarshal(b.Get(keySnapshot), run); err != nil {
		return runstate.State{}, fmt.Errorf("decode snapshot: %w", err)
	}
	var contract *reinv1.TaskContract
	if contractBytes != nil {
		contract = &reinv1.TaskContract{}
		if err := proto.Unmarshal(contractBytes, contract); err != nil {
			return runstate.State{}, fmt.Errorf("decode contract: %w", err)
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
