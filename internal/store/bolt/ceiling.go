//go:build reinbench

package bolt

import (
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	bbolt "go.etcd.io/bbolt"
)

// Ceiling is the raw bbolt work this package's appends and scans come down
// to, in the same layout (runs/<run id>/events/<uint64 BE>), with none of
// the store's logic: no validation, no snapshot, no status index, no blobs.
// rein-bench compares the store against it; it is reached from there only.
// It implements bench.Ceiling.
type Ceiling struct{}

// CreateLog creates a fresh bbolt file at path with an empty events bucket
// for each of runIDs and opens it, with the options the store opens its file
// with. put writes data[i] as sequence seqs[i] of run runIDs[runs[i]] in
// one fsync'd Update; concurrent puts share an Update (group commit: the
// first put waiting commits every put queued behind it, in its own
// goroutine, so a put alone costs one Update and no hand-off).
func (Ceiling) CreateLog(path string, runIDs []string) (put func(runs []int, seqs []uint64, data [][]byte) error, closeLog func() error, err error) {
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: 100 * time.Millisecond})
	if err != nil {
		return nil, nil, openError(path, err)
	}
	if err := db.Update(func(tx *bbolt.Tx) error {
		runs, err := tx.CreateBucketIfNotExists(bucketRuns)
		if err != nil {
			return err
		}
		for _, id := range runIDs {
			run, err := runs.CreateBucket([]byte(id))
			if err != nil {
				return fmt.Errorf("create run %s: %w", id, err)
			}
			if _, err := run.CreateBucket(keyEvents); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		_ = db.Close()
		return nil, nil, err
	}
	l := &ceilingLog{db: db, ids: make([][]byte, len(runIDs))}
	for i, id := range runIDs {
		l.ids[i] = []byte(id)
	}
	return l.put, db.Close, nil
}

// Scan opens the store at path read-only and calls fn with each stored
// event of runID, in order, straight from bbolt's cursor: its protobuf
// encoding, the store's seal skipped unchecked (checking it is the store's
// work, not the raw scan's).
func (Ceiling) Scan(path, runID string, fn func(seq uint64, data []byte) error) error {
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return openError(path, err)
	}
	defer db.Close()
	return db.View(func(tx *bbolt.Tx) error {
		b := runBucket(tx, runID)
		if b == nil {
			return notFound(runID)
		}
		c := b.Bucket(keyEvents).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if isBlobKey(k) { // the store's blobs, kept with the events
				continue
			}
			if len(v) >= sealLen && v[0] == sealMarker {
				v = v[sealLen:]
			}
			if err := fn(binary.BigEndian.Uint64(k), v); err != nil {
				return err
			}
		}
		return nil
	})
}

// ceilingLog groups concurrent puts into Updates. The put at the head of
// the queue is the leader: it takes every put queued at that moment,
// commits them, answers them, and hands the lead to the next put queued.
type ceilingLog struct {
	db  *bbolt.DB
	ids [][]byte

	mu    sync.Mutex
	queue []*ceilingPut // guarded by mu; queue[0] leads
}

type ceilingPut struct {
	runs []int
	seqs []uint64
	data [][]byte
	// wake gets nil when the put is the leader, or its commit's result.
	wake chan ceilingWake
}

type ceilingWake struct {
	done bool
	err  error
}

func (l *ceilingLog) put(runs []int, seqs []uint64, data [][]byte) error {
	p := &ceilingPut{runs: runs, seqs: seqs, data: data, wake: make(chan ceilingWake, 1)}
	l.mu.Lock()
	l.queue = append(l.queue, p)
	lead := len(l.queue) == 1
	l.mu.Unlock()
	if !lead {
		if w := <-p.wake; w.done {
			return w.err
		}
	}
	l.mu.Lock()
	batch := l.queue
	l.mu.Unlock()
	err := l.db.Update(func(tx *bbolt.Tx) error {
		runBuckets := tx.Bucket(bucketRuns)
		for _, q := range batch {
			for i, run := range q.runs {
				b := runBuckets.Bucket(l.ids[run]).Bucket(keyEvents)
				b.FillPercent = eventsFillPercent
				if err := b.Put(seqKey(q.seqs[i]), q.data[i]); err != nil {
					return err
				}
			}
		}
		return nil
	})
	l.mu.Lock()
	l.queue = l.queue[len(batch):]
	if len(l.queue) > 0 {
		l.queue[0].wake <- ceilingWake{} // the next leader
	} else {
		l.queue = nil
	}
	l.mu.Unlock()
	for _, q := range batch[1:] {
		q.wake <- ceilingWake{done: true, err: err}
	}
	return err
}
