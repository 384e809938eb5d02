package bolt

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	bbolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// Compaction (rein compact): the store rewritten, offline, into a copy with
// no free pages, which replaces it only once it is known to hold the same.
//
// The order, and what each step keeps true:
//
//  1. The file is opened read-only first and its header and free list read,
//     as Open does, so that a file that is not a healthy rein store is never
//     opened read-write. Then it is opened read-write, which is what takes
//     bbolt's exclusive lock: a rein serve (or any rein that writes, or
//     reads) holding it makes Compact fail at once with ErrInUse, and once
//     Compact holds it, no process can open the file until it is replaced.
//  2. Under that lock, the whole file is checked as Check does; any problem
//     refuses it (DamagedError), unchanged.
//  3. bbolt.Compact writes the copy beside the file (FILE.compact-*, mode
//     0600, given the file's owner), every page filled; it is fsynced.
//  4. A copy that is not smaller than the file is removed and the file left
//     as it is. Otherwise the copy is opened read-only (a shared lock that it
//     holds until the directory is synced, so that no process writes to it
//     before its name is durable), checked by Check, and compared with the
//     file: the same runs, each ending at the same sequence, and the same
//     digest of every bucket, key, value and bucket sequence.
//  5. It is renamed over the file, and the directory fsynced.
//
// Until the rename, the file is not written; any failure removes the copy.
// A crash leaves the file as it was and, at worst, a FILE.compact-* beside
// it, which can be removed.

// ErrInUse is Compact's error for a file another process holds (a running
// rein serve, or any rein command on it).
var ErrInUse = errors.New("in use by another process")

// DamagedError is Compact's error for a file that is damaged or is not a
// rein store: it was not compacted, and was left unchanged.
type DamagedError struct {
	Path string
	// Problems are what was found; Check lists the same.
	Problems []Problem
}

func (e *DamagedError) Error() string {
	var first string
	if len(e.Problems) > 0 {
		first = ": " + e.Problems[0].String()
		if n := len(e.Problems) - 1; n > 0 {
			first += fmt.Sprintf(" (and %d more)", n)
		}
	}
	return fmt.Sprintf("%s is damaged or not a rein store, so it was not compacted and was left unchanged%s; "+
		"`rein check --db %s` lists every problem", e.Path, first, e.Path)
}

// CompactOptions tune Compact.
type CompactOptions struct {
	// LockTimeout is how long Compact waits for another process to release
	// the file. Zero means 100ms.
	LockTimeout time.Duration
	// TxMaxSize is how many bytes of keys and values the copy takes in one
	// transaction (bbolt.Compact's txMaxSize). Zero means 16 MiB.
	TxMaxSize int64
}

// defaultCompactTxSize is CompactOptions.TxMaxSize's default: it bounds the
// memory the copy's transaction holds.
const defaultCompactTxSize = 16 << 20

// CompactResult is what Compact did.
type CompactResult struct {
	// Path is the file compacted (a symbolic link's target).
	Path string
	// Before is the file's size in bytes before; After the compacted copy's.
	Before, After int64
	// Replaced is whether the copy replaced the file: it does not when it
	// would not be smaller, and the file is left as it was.
	Replaced bool
	// Runs and Events are what the store holds, the same in the copy.
	Runs   int
	Events uint64
	// Took is how long it took.
	Took time.Duration
}

// Compact rewrites the store at path into a compacted copy, verifies it,
// and replaces the file with it, holding the file's lock throughout (the
// steps are at the top of compact.go). A file that does not exist is an
// error wrapping os.ErrNotExist; one another process holds, ErrInUse; one
// that is damaged or not a rein store, a *DamagedError. Whatever fails
// before the copy replaced the file leaves the file unchanged and removes
// the copy.
func Compact(path string, opts CompactOptions) (CompactResult, error) {
	return compact(path, opts, nil)
}

// compact is Compact; afterCopy, when not nil, runs on the copy's path once
// it is written and synced, before it is verified (the tests damage it).
func compact(path string, opts CompactOptions, afterCopy func(copyPath string) error) (CompactResult, error) {
	start := time.Now()
	var res CompactResult
	if opts.LockTimeout == 0 {
		opts.LockTimeout = defaultLockTimeout
	}
	if opts.TxMaxSize == 0 {
		opts.TxMaxSize = defaultCompactTxSize
	}
	path, info, err := compactTarget(path)
	if err != nil {
		return res, err
	}
	res.Path, res.Before = path, info.Size()

	// 1. Read-only first, then the exclusive lock.
	if err := precheck(path, info, opts.LockTimeout); err != nil {
		return res, err
	}
	var src *bbolt.DB
	err = guard("open store "+path, func() (err error) {
		src, err = bbolt.Open(path, 0o600, &bbolt.Options{Timeout: opts.LockTimeout})
		return err
	})
	if err != nil {
		return res, compactOpenError(path, err)
	}
	defer src.Close()
	if now, err := os.Stat(path); err != nil || !os.SameFile(info, now) {
		return res, fmt.Errorf("compact %s: the file was replaced as it was opened; it was left as it is: run rein compact again", path)
	}

	// 2. Checked whole, under the lock.
	if problems := checkOpen(src, path, info.Size()); len(problems) > 0 {
		return res, &DamagedError{Path: path, Problems: problems}
	}
	var want contents
	if err := guard("the store", func() (err error) { want, err = readContents(src); return err }); err != nil {
		return res, &DamagedError{Path: path, Problems: []Problem{{Text: err.Error()}}}
	}
	res.Runs, res.Events = len(want.lastSeq), want.events

	// 3. The copy.
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".compact-*")
	if err != nil {
		return res, compactFailed(path, "create the copy in "+dir, err)
	}
	copyPath := tmp.Name()
	replaced := false
	defer func() {
		if !replaced {
			_ = os.Remove(copyPath)
		}
	}()
	if err := tmp.Close(); err != nil {
		return res, compactFailed(path, "create the copy "+copyPath, err)
	}
	if err := chownLike(copyPath, info); err != nil {
		return res, compactFailed(path, "give the copy "+copyPath+" the file's owner", err)
	}
	if err := writeCopy(copyPath, src, opts); err != nil {
		return res, compactFailed(path, "write the copy "+copyPath, err)
	}
	if afterCopy != nil {
		if err := afterCopy(copyPath); err != nil {
			return res, compactFailed(path, "write the copy "+copyPath, err)
		}
	}
	copyInfo, err := os.Stat(copyPath)
	if err != nil {
		return res, compactFailed(path, "write the copy "+copyPath, err)
	}
	res.After = copyInfo.Size()

	// 4. Nothing to gain, or verified.
	if res.After >= res.Before {
		res.Took = time.Since(start)
		return res, nil
	}
	held, err := verifyCopy(copyPath, want, opts.LockTimeout)
	if err != nil {
		return res, fmt.Errorf("compact %s: the compacted copy failed verification: %w; %s was left unchanged and the copy removed. "+
			"This is a bug: please report it, with the output of `rein check --db %s`", path, err, path, path)
	}
	defer held.Close()

	// 5. The swap.
	if now, err := os.Stat(path); err != nil || !os.SameFile(info, now) {
		return res, fmt.Errorf("compact %s: the file was replaced while it was compacted; it was left as it is now: run rein compact again", path)
	}
	if err := os.Rename(copyPath, path); err != nil {
		return res, compactFailed(path, "rename the copy "+copyPath+" over it", err)
	}
	replaced = true
	res.Replaced = true
	if err := syncDir(dir); err != nil {
		return res, fmt.Errorf("compact %s: the file was replaced by its verified compacted copy, but syncing its directory %s failed (%w): "+
			"run sync before relying on it, as a crash now could bring back the file from before", path, dir, err)
	}
	res.Took = time.Since(start)
	return res, nil
}

// compactTarget resolves path (a symbolic link to its target, so that the
// copy is made beside the file and does not replace the link) and stats it.
func compactTarget(path string) (string, os.FileInfo, error) {
	resolved, err := filepath.EvalSymlinks(path)
	if errors.Is(err, os.ErrNotExist) {
		return path, nil, fmt.Errorf("compact %s: %w", path, os.ErrNotExist)
	}
	if err != nil {
		return path, nil, fmt.Errorf("compact %s: %w", path, err)
	}
	info, err := os.Stat(resolved)
	switch {
	case err != nil:
		return resolved, nil, fmt.Errorf("compact %s: %w", resolved, err)
	case info.IsDir():
		return resolved, nil, fmt.Errorf("compact %s: it is a directory; pass the path of a database file", resolved)
	case !info.Mode().IsRegular():
		return resolved, nil, &DamagedError{Path: resolved, Problems: []Problem{{Text: "it is not a regular file"}}}
	case info.Size() == 0:
		return resolved, nil, &DamagedError{Path: resolved, Problems: []Problem{{Text: "the file is empty"}}}
	}
	return resolved, info, nil
}

// precheck opens the file read-only, with its free list, and refuses one
// that is not a rein store, as Open's check does.
func precheck(path string, info os.FileInfo, timeout time.Duration) error {
	var db *bbolt.DB
	err := guard("open store "+path, func() (err error) {
		db, err = bbolt.Open(path, 0o400, &bbolt.Options{ReadOnly: true, Timeout: timeout, PreLoadFreelist: true})
		return err
	})
	if err != nil {
		return compactOpenError(path, err)
	}
	defer db.Close()
	if err := guard("the file's header", func() error {
		return db.View(func(tx *bbolt.Tx) error { return checkFormat(tx, path, info.Size()) })
	}); err != nil {
		return &DamagedError{Path: path, Problems: []Problem{{Text: err.Error()}}}
	}
	return nil
}

// compactOpenError is the error for a bbolt open of the file that failed.
func compactOpenError(path string, err error) error {
	if errors.Is(err, bolterrors.ErrTimeout) {
		return fmt.Errorf("%s is %w (a running rein serve?); stop it first", path, ErrInUse)
	}
	if errors.Is(err, os.ErrPermission) || errors.Is(err, syscall.EROFS) {
		return fmt.Errorf("compact %s: %w: the file cannot be written (check its owner and mode); it was left unchanged", path, err)
	}
	return &DamagedError{Path: path, Problems: []Problem{{Text: fmt.Sprintf("the file cannot be opened: %v", err)}}}
}

// compactFailed is the error for a step of writing the copy that failed.
func compactFailed(path, what string, err error) error {
	hint := ""
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, os.ErrPermission) || errors.Is(err, syscall.EROFS) {
		hint = fmt.Sprintf("; the copy needs room for the store's data (at most %s's size) and a directory rein can write to", filepath.Base(path))
	}
	return fmt.Errorf("compact %s: %s: %w; %s was left unchanged and the copy removed%s", path, what, err, path, hint)
}

// checkOpen is Check on a file Compact holds open (Check opens the file
// itself, which the lock Compact holds would refuse): rein's structure, then,
// if no page faulted, bbolt's page check.
func checkOpen(db *bbolt.DB, path string, size int64) []Problem {
	c := &checker{}
	if err := guard("the file's header", func() error {
		return db.View(func(tx *bbolt.Tx) error { return checkFormat(tx, path, size) })
	}); err != nil {
		c.add("", 0, "%v", err)
		return c.problems
	}
	if err := guard("the store", func() error { return db.View(c.rein) }); err != nil {
		c.add("", 0, "%v", err)
		c.faulted = true
	}
	if c.faulted {
		return c.problems
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
	return c.problems
}

// writeCopy compacts src into the empty file at copyPath with bbolt's own
// compaction, in src's page size, and fsyncs it. Its commits are not
// synced one by one: the one fsync at the end makes all of it durable.
func writeCopy(copyPath string, src *bbolt.DB, opts CompactOptions) error {
	dst, err := bbolt.Open(copyPath, 0o600, &bbolt.Options{Timeout: opts.LockTimeout, NoSync: true, NoGrowSync: true, PageSize: src.Info().PageSize})
	if err != nil {
		return err
	}
	if err := guard("the store", func() error { return bbolt.Compact(dst, src, opts.TxMaxSize) }); err != nil {
		_ = dst.Close()
		return err
	}
	if err := dst.Sync(); err != nil {
		_ = dst.Close()
		return fmt.Errorf("fsync: %w", err)
	}
	return dst.Close()
}

// verifyCopy checks the copy at copyPath with Check and compares it with
// want, what the file holds. It returns the copy open read-only, its shared
// lock held, for the caller to close once the copy is in place.
func verifyCopy(copyPath string, want contents, timeout time.Duration) (*bbolt.DB, error) {
	var db *bbolt.DB
	err := guard("open the copy", func() (err error) {
		db, err = bbolt.Open(copyPath, 0o400, &bbolt.Options{ReadOnly: true, Timeout: timeout})
		return err
	})
	if err != nil {
		return nil, err
	}
	problems, err := Check(copyPath, Options{LockTimeout: timeout})
	if err == nil && len(problems) > 0 {
		err = fmt.Errorf("rein check finds %d problems in it, the first: %s", len(problems), problems[0])
	}
	var got contents
	if err == nil {
		err = guard("the copy", func() (err error) { got, err = readContents(db); return err })
	}
	if err == nil {
		err = want.compare(got)
	}
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return db, nil
}

// contents is what compaction must keep: every run, with the sequence of
// its last event, and a digest of every bucket (its path and sequence), key
// and value, in the order bbolt keeps them.
type contents struct {
	lastSeq map[string]uint64
	events  uint64
	digest  []byte
}

// readContents reads the contents of db.
func readContents(db *bbolt.DB) (contents, error) {
	c := contents{lastSeq: map[string]uint64{}}
	h := sha256.New()
	err := db.View(func(tx *bbolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bbolt.Bucket) error {
			return c.walk(h, [][]byte{name}, b)
		})
	})
	c.digest = h.Sum(nil)
	return c, err
}

// walk adds bucket b, at path, and everything in it, to c.
func (c *contents) walk(h hash.Hash, path [][]byte, b *bbolt.Bucket) error {
	digestField(h, 'B', path...)
	digestField(h, 'S', binary.BigEndian.AppendUint64(nil, b.Sequence()))
	// runs/<id> is a run; runs/<id>/events/<uint64> its events.
	run := ""
	switch {
	case len(path) == 2 && bytes.Equal(path[0], bucketRuns):
		c.lastSeq[string(path[1])] = 0
	case len(path) == 3 && bytes.Equal(path[0], bucketRuns) && bytes.Equal(path[2], keyEvents):
		run = string(path[1])
	}
	cur := b.Cursor()
	for k, v := cur.First(); k != nil; k, v = cur.Next() {
		if v == nil {
			if err := c.walk(h, append(slices.Clip(path), k), b.Bucket(k)); err != nil {
				return err
			}
			continue
		}
		digestField(h, 'K', k, v)
		if run != "" && len(k) == 8 {
			c.lastSeq[run] = binary.BigEndian.Uint64(k)
			c.events++
		}
	}
	return nil
}

// digestField writes a tag and each of parts, length first, to h.
func digestField(h hash.Hash, tag byte, parts ...[]byte) {
	_, _ = h.Write([]byte{tag})
	for _, p := range parts {
		_, _ = h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(p))))
		_, _ = h.Write(p)
	}
}

// compare says how got, the copy's contents, differs from c, the file's.
func (c contents) compare(got contents) error {
	ids := make([]string, 0, len(c.lastSeq))
	for id := range c.lastSeq {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		seq, ok := got.lastSeq[id]
		switch {
		case !ok:
			return fmt.Errorf("run %s is missing from it", id)
		case seq != c.lastSeq[id]:
			return fmt.Errorf("run %s ends at sequence %d in it, at %d in the file", id, seq, c.lastSeq[id])
		}
	}
	if len(got.lastSeq) != len(c.lastSeq) {
		return fmt.Errorf("it holds %d runs, the file %d", len(got.lastSeq), len(c.lastSeq))
	}
	if !bytes.Equal(got.digest, c.digest) {
		return errors.New("its buckets, keys and values differ from the file's")
	}
	return nil
}
