package bolt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	bbolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
)

// Problem is one thing Check found wrong with a store file.
type Problem struct {
	// RunID is the run it is about, "" when it is about no one run.
	RunID string `json:"run_id,omitempty"`
	// Sequence is the event it is about, 0 when none.
	Sequence uint64 `json:"sequence,omitempty"`
	Text     string `json:"problem"`
	// Note marks what is worth knowing but lost nothing (a log a crash
	// left without its header, which the next open makes anew): not a
	// problem the file has.
	Note bool `json:"note,omitempty"`
}

func (p Problem) String() string {
	switch {
	case p.Note:
		return "note: " + p.Text
	case p.Sequence != 0:
		return fmt.Sprintf("run %s event %d: %s", p.RunID, p.Sequence, p.Text)
	case p.RunID != "":
		return fmt.Sprintf("run %s: %s", p.RunID, p.Text)
	}
	return p.Text
}

// Check reads the whole store at path, read-only (it never writes a byte),
// and returns every problem it finds:
//
//   - bbolt's own consistency check (bbolt.Tx.Check: every page reachable
//     once and of the right type, keys in order, the free list consistent);
//   - rein's: every event, snapshot and contract's seal (checksum) and
//     decoding; every run's events stored under their sequences, 1, 2, 3, …
//     with no gap, folding (runstate.Apply) to the run's snapshot; every run
//     with its contract and in the status index under its status; every
//     entry of the status index and of the request index naming a run; every
//     status change decoding; every blob hashing to its key.
//
// A page that cannot be read is a problem too, and then bbolt's check is not
// run: it runs on a goroutine of its own, where a fault could not be
// contained. Check returns an error only when it could not look at the file
// at all (no file, or another process holds it).
func Check(path string, opts Options) ([]Problem, error) {
	if opts.LockTimeout == 0 {
		opts.LockTimeout = defaultLockTimeout
	}
	info, err := statStore(path)
	if err != nil {
		return nil, err
	}
	if info == nil {
		return nil, fmt.Errorf("check store %s: %w", path, os.ErrNotExist)
	}
	c := &checker{}
	// First with the free list read (guarded), which a plain read-only open
	// skips and bbolt's check would read unguarded.
	db, err := openForCheck(path, opts, true)
	if errors.Is(err, store.ErrDataLoss) {
		c.add("", 0, "the free list cannot be read: %v", err)
		c.faulted = true
		db, err = openForCheck(path, opts, false)
	}
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			return nil, openError(path, err)
		}
		c.add("", 0, "the file cannot be opened: %v", err)
		return c.problems, nil
	}
	defer db.Close()
	if err := guard("the file's header", func() error {
		return db.View(func(tx *bbolt.Tx) error { return checkFormat(tx, path, info.Size()) })
	}); err != nil {
		c.add("", 0, "%v", err)
		return c.problems, nil
	}
	if copied := c.wal(path, db); copied != "" {
		// The rest reads the store as the next open leaves it: the file
		// with its log's records applied.
		defer os.Remove(copied)
		cp, err := openForCheck(copied, opts, false)
		if err != nil {
			c.add("", 0, "the file with its log applied cannot be opened: %v", err)
			return c.problems, nil
		}
		defer cp.Close()
		db = cp
	}
	if err := guard("the store", func() error { return db.View(c.rein) }); err != nil {
		c.add("", 0, "%v", err)
		c.faulted = true
	}
	if c.faulted {
		c.add("", 0, "bbolt's page check was not run: the file has pages that cannot be read (above), and that check would fault on them")
		return c.problems, nil
	}
	if err := guard("bbolt's page check", func() error {
		return db.View(func(tx *bbolt.Tx) error {
			for err := range tx.Check() {
				c.add("", 0, "bbolt: %v", err)
			}
			return nil
		})
	}); err != nil {
		c.add("", 0, "%v", err)
	}
	return c.problems, nil
}

func openForCheck(path string, opts Options, freelist bool) (*bbolt.DB, error) {
	var db *bbolt.DB
	err := guard("open store "+path, func() (err error) {
		db, err = bbolt.Open(path, 0o400, &bbolt.Options{ReadOnly: true, Timeout: opts.LockTimeout, PreLoadFreelist: freelist})
		return err
	})
	return db, err
}

type checker struct {
	problems []Problem
	// faulted is set when a page could not be read.
	faulted bool
}

// wal is Check's look at the store's log: a damaged log kept aside, a log
// that is another store's or does not follow on from the file, a damaged
// record, and each record that does not apply, applied to a private copy of
// the file by the code Open applies them with. It returns the copy ("" for
// none: no record the file lacks, or they did not apply).
func (c *checker) wal(path string, db *bbolt.DB) string {
	if err := refuseBroken(path); err != nil {
		c.add("", 0, "%v", err)
	}
	if l, err := readWAL(WALPath(path), 0); err == nil && l.torn {
		c.problems = append(c.problems, Problem{Note: true, Text: fmt.Sprintf("the store's log %s has no whole header (a crash as it was made): it holds no record, and the next open makes it anew", WALPath(path))})
	}
	recs, damage, err := pendingOf(path, db)
	if err != nil {
		c.add("", 0, "%v", err)
		return ""
	}
	if damage != nil {
		c.add("", 0, "%v", damage)
	}
	if len(recs) == 0 {
		return ""
	}
	copied, err := applyToCopy(path, recs)
	if err != nil {
		c.add("", 0, "%v", err)
		return ""
	}
	return copied
}

func (c *checker) add(runID string, seq uint64, format string, args ...any) {
	c.problems = append(c.problems, Problem{RunID: runID, Sequence: seq, Text: fmt.Sprintf(format, args...)})
}

// guarded runs fn; a page that cannot be read is a problem about what.
func (c *checker) guarded(runID, what string, fn func() error) {
	err := guard(what, fn)
	if err == nil {
		return
	}
	var pf *pageFault
	if errors.As(err, &pf) {
		c.faulted = true
	}
	c.add(runID, 0, "%v", err)
}

// rein checks rein's structure in tx.
func (c *checker) rein(tx *bbolt.Tx) error {
	runs := tx.Bucket(bucketRuns)
	if runs != nil {
		var ids [][]byte
		c.guarded("", "the runs bucket", func() error {
			return runs.ForEach(func(k, _ []byte) error { ids = append(ids, bytes.Clone(k)); return nil })
		})
		for _, id := range ids {
			c.guarded(string(id), "run "+string(id), func() error { c.run(tx, runs, string(id)); return nil })
		}
	}
	c.index(tx, bucketStatus, "the status index", func(k, _ []byte) (string, error) {
		if len(k) < 2 {
			return "", fmt.Errorf("key %x is not a status and a run ID", k)
		}
		return string(k[1:]), nil
	})
	c.index(tx, bucketRequests, "the request index", func(_, v []byte) (string, error) { return string(v), nil })
	c.index(tx, bucketContracts, "the contracts", func(k, v []byte) (string, error) {
		return string(k), unseal(v, &reinv1.TaskContract{}, "the contract of run "+string(k))
	})
	c.each(tx, bucketChanges, "the status changes", func(k, v []byte) {
		_, data, ok := bytes.Cut(v, []byte{0})
		if !ok || len(k) != 8 || proto.Unmarshal(data, &reinv1.RunChange{}) != nil {
			c.add("", 0, "status change %x does not decode", k)
		}
	})
	c.each(tx, bucketBlobs, "the blobs", func(k, v []byte) {
		if got := store.BlobHash(v); got != string(k) {
			c.add("", 0, "blob %s: %v", k, damaged("blob "+string(k), "its content's SHA-256 is %s", got))
		}
	})
	return nil
}

// each calls fn with every key and value of a top bucket, guarded.
func (c *checker) each(tx *bbolt.Tx, name []byte, what string, fn func(k, v []byte)) {
	b := tx.Bucket(name)
	if b == nil {
		return
	}
	c.guarded("", what, func() error {
		return b.ForEach(func(k, v []byte) error { fn(k, v); return nil })
	})
}

// index checks that every entry of a top bucket names a stored run.
func (c *checker) index(tx *bbolt.Tx, name []byte, what string, runOf func(k, v []byte) (string, error)) {
	c.each(tx, name, what, func(k, v []byte) {
		id, err := runOf(k, v)
		if err != nil {
			c.add("", 0, "%s: %v", what, err)
			return
		}
		if runBucket(tx, id) == nil {
			c.add(id, 0, "%s names it (key %x), but the run is not stored", what, k)
		}
	})
}

// run checks one run: its snapshot and contract, every event, the fold.
func (c *checker) run(tx *bbolt.Tx, runs *bbolt.Bucket, runID string) {
	b := runs.Bucket([]byte(runID))
	if b == nil {
		c.add(runID, 0, "the runs bucket holds a value, not a bucket, under its ID")
		return
	}
	contract := contractOf(readTx(tx), runID)
	if contract == nil {
		c.add(runID, 0, "its contract is missing")
	}
	snap, snapErr := loadState(b, contract)
	if snapErr != nil {
		c.add(runID, 0, "%v", snapErr)
	}
	if snapErr == nil && snap.Archive != nil {
		// An archived run's stub: its log is in the archive.
		if idx := tx.Bucket(bucketStatus); idx == nil || !hasKey(idx, statusKey(snap.Status, runID)) {
			c.add(runID, 0, "the status index does not list it under its status, %s", runstate.StatusName(snap.Status))
		}
		return
	}
	c.checkLargeBlobs(b, runID)
	eb := b.Bucket(keyEvents)
	if eb == nil {
		c.add(runID, 0, "its events bucket is missing")
		return
	}
	var st runstate.State
	folds := true
	want := uint64(1)
	ev := &reinv1.Event{}
	cur := eb.Cursor()
	for k, v := cur.First(); k != nil; k, v = cur.Next() {
		if isBlobKey(k) {
			c.checkBlob(runID, k, v)
			continue
		}
		ev.Reset()
		if err := decodeEvent(runID, want, k, v, ev); err != nil {
			c.add(runID, want, "%v", err)
			folds = false
			if len(k) == 8 {
				// A gap: go on from the event stored next, so that its
				// own problems are reported too.
				if seq := binary.BigEndian.Uint64(k); seq > want {
					want = seq
					if err := decodeEvent(runID, want, k, v, ev); err != nil {
						c.add(runID, want, "%v", err)
					}
				}
			}
			want++
			continue
		}
		want++
		if !folds {
			continue
		}
		next, err := runstate.Apply(st, ev)
		if err != nil {
			c.add(runID, ev.GetSequence(), "it does not fold onto the events before it: %v", err)
			folds = false
			continue
		}
		st = next
	}
	if snapErr != nil {
		return
	}
	if folds && !proto.Equal(st.Proto(false), snap.Proto(false)) {
		c.add(runID, 0, "its snapshot (version %d, %s) is not the fold of its %d events (version %d, %s)",
			snap.Version, runstate.StatusName(snap.Status), want-1, st.Version, runstate.StatusName(st.Status))
	}
	if idx := tx.Bucket(bucketStatus); idx == nil || !hasKey(idx, statusKey(snap.Status, runID)) {
		c.add(runID, 0, "the status index does not list it under its status, %s", runstate.StatusName(snap.Status))
	}
}

// hasKey reports whether b holds key (Get cannot tell an empty value from
// a missing one).
func hasKey(b *bbolt.Bucket, key []byte) bool {
	k, _ := b.Cursor().Seek(key)
	return bytes.Equal(k, key)
}
