package bolt

import (
	"encoding/binary"
	"fmt"

	bbolt "go.etcd.io/bbolt"
)

// A log record holds what its commit wrote, not what was asked: every
// bucket made, key put or deleted and sequence set, in order, by bucket
// path from the file's root. Applying a record is putting those bytes
// again (applyWrites), with no fold, no cache and no dependence on the
// build that wrote it, as etcd's backend and every physical redo log do.
// Each write of an append's transaction goes through wtx, which does it
// and records it, so a bucket added later (an outbox, say) is logged with
// no code of its own here.
//
//	write  byte     kind (writePut … writeFill), with writeSamePath set
//	                when its path is the previous write's
//	       path     (unless writeSamePath) uvarint how many names, then
//	                each name as bytes
//	       put      key as bytes, value as bytes
//	       delete   key as bytes
//	       bucket   name as bytes (made if missing)
//	       drop     name as bytes (a bucket deleted)
//	       sequence uvarint the bucket's sequence
//	       fill     byte the bucket's fill percent (bbolt keeps none: it is
//	                how full a commit packs the bucket's pages)
//
// where bytes is a uvarint length, then that many bytes.
const (
	writePut      = 1
	writeDelete   = 2
	writeBucket   = 3
	writeDrop     = 4
	writeSequence = 5
	writeFill     = 6
	writeSamePath = 0x80
)

// wtx is the writer's transaction as a commit writes it: each write is done
// in tx and, unless rec is nil (a record being applied again), appended to
// rec. The record is also what the snapshots read a synced batch's writes
// from (overlay.go): the writer keeps nothing else of them.
type wtx struct {
	tx   *bbolt.Tx
	rec  []byte
	path [][]byte // the path of the last write recorded
}

// wbucket is a bucket of a wtx, named by its path from the root.
type wbucket struct {
	w    *wtx
	b    *bbolt.Bucket
	path [][]byte
}

// Bucket is the top bucket name, or nil.
func (w *wtx) Bucket(name []byte) *wbucket {
	b := w.tx.Bucket(name)
	if b == nil {
		return nil
	}
	return &wbucket{w: w, b: b, path: [][]byte{name}}
}

// Bucket is the nested bucket name, or nil.
func (b *wbucket) Bucket(name []byte) *wbucket {
	nb := b.b.Bucket(name)
	if nb == nil {
		return nil
	}
	return &wbucket{w: b.w, b: nb, path: append(b.path[:len(b.path):len(b.path)], name)}
}

// Get is bbolt's Get: nil for a missing key.
func (b *wbucket) Get(key []byte) []byte { return b.b.Get(key) }

// Put puts key and value, as bbolt's Put (which keeps both slices until the
// commit).
func (b *wbucket) Put(key, value []byte) error {
	if err := b.b.Put(key, value); err != nil {
		return err
	}
	b.record(writePut, key, value)
	return nil
}

// Delete deletes key.
func (b *wbucket) Delete(key []byte) error {
	if err := b.b.Delete(key); err != nil {
		return err
	}
	b.record(writeDelete, key, nil)
	return nil
}

// CreateBucket makes the nested bucket name, which must not exist.
func (b *wbucket) CreateBucket(name []byte) (*wbucket, error) {
	nb, err := b.b.CreateBucket(name)
	if err != nil {
		return nil, err
	}
	b.record(writeBucket, name, nil)
	return &wbucket{w: b.w, b: nb, path: append(b.path[:len(b.path):len(b.path)], name)}, nil
}

// CreateBucketIfNotExists is the nested bucket name, made if missing.
func (b *wbucket) CreateBucketIfNotExists(name []byte) (*wbucket, error) {
	if nb := b.Bucket(name); nb != nil {
		return nb, nil
	}
	return b.CreateBucket(name)
}

// DeleteBucket deletes the nested bucket name and all it holds.
func (b *wbucket) DeleteBucket(name []byte) error {
	if err := b.b.DeleteBucket(name); err != nil {
		return err
	}
	b.record(writeDrop, name, nil)
	return nil
}

// NextSequence is bbolt's NextSequence, recorded as the sequence it set.
func (b *wbucket) NextSequence() (uint64, error) {
	n, err := b.b.NextSequence()
	if err != nil {
		return 0, err
	}
	if b.w.rec != nil {
		b.w.rec = binary.AppendUvarint(b.recordPath(writeSequence), n)
	}
	return n, nil
}

// SetFillPercent sets how full the commit packs the bucket's pages.
func (b *wbucket) SetFillPercent(f float64) {
	b.b.FillPercent = f
	if b.w.rec != nil {
		b.w.rec = append(b.recordPath(writeFill), byte(f*100))
	}
}

// record appends a write of kind with its one or two byte strings.
func (b *wbucket) record(kind byte, first, second []byte) {
	if b.w.rec == nil {
		return
	}
	r := appendBytes(b.recordPath(kind), first)
	if kind == writePut {
		r = appendBytes(r, second)
	}
	b.w.rec = r
}

// recordPath appends kind and, unless it is the last write's, the bucket's
// path.
func (b *wbucket) recordPath(kind byte) []byte {
	w := b.w
	if samePath(w.path, b.path) {
		return append(w.rec, kind|writeSamePath)
	}
	w.path = b.path
	r := binary.AppendUvarint(append(w.rec, kind), uint64(len(b.path)))
	for _, name := range b.path {
		r = appendBytes(r, name)
	}
	return r
}

func samePath(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if string(a[i]) != string(b[i]) {
			return false
		}
	}
	return true
}

func appendBytes(b, v []byte) []byte {
	return append(binary.AppendUvarint(b, uint64(len(v))), v...)
}

// recWrite is one write of a record, as walkWrites decodes it: its kind
// (writePut … writeFill, without writeSamePath), the path of its bucket,
// its one or two byte strings (a put's key and value; the key or name of a
// delete, a bucket made or dropped) or its number (a sequence, a fill
// percent). Its byte strings are the record's own bytes.
type recWrite struct {
	kind          byte
	path          [][]byte
	samePath      bool // path is the previous write's
	first, second []byte
	n             uint64
}

// walkWrites calls fn with each write of a record's body, in order; path is
// reused from one write to the next. A body that does not decode, or a
// write of a kind this rein does not know, is an error naming it.
func walkWrites(body []byte, fn func(i int, w *recWrite) error) error {
	d := batchDecoder{b: body}
	var w recWrite
	for i := 0; len(d.b) > 0 && d.err == nil; i++ {
		kind := d.byte()
		w.samePath = kind&writeSamePath != 0
		if !w.samePath {
			w.path = w.path[:0]
			for range d.count() {
				w.path = append(w.path, d.bytes())
			}
		} else if i == 0 {
			return fmt.Errorf("its first write names no bucket")
		}
		w.kind = kind &^ writeSamePath
		w.first, w.second, w.n = nil, nil, 0
		switch w.kind {
		case writePut:
			w.first, w.second = d.bytes(), d.bytes()
		case writeDelete, writeBucket, writeDrop:
			w.first = d.bytes()
		case writeSequence:
			w.n = d.uvarint()
		case writeFill:
			w.n = uint64(d.byte())
		default:
			if d.err == nil {
				return fmt.Errorf("write %d is of kind %d, which this rein does not know (a newer rein's log?)", i, w.kind)
			}
		}
		if d.err != nil {
			break
		}
		if err := fn(i, &w); err != nil {
			return err
		}
	}
	if d.err != nil {
		return fmt.Errorf("its writes do not decode: %w", d.err)
	}
	return nil
}

// applyWrites puts a record's writes in tx again. A write whose bucket is
// not there, or that bbolt refuses, is an error naming it: the record does
// not apply to the file as the records before it left it.
func applyWrites(tx *bbolt.Tx, body []byte) error {
	return walkWrites(body, func(i int, w *recWrite) error {
		b, err := bucketAt(tx, w.path)
		if err != nil {
			return fmt.Errorf("write %d: %w", i, err)
		}
		switch w.kind {
		case writePut:
			err = b.Put(w.first, w.second)
		case writeDelete:
			err = b.Delete(w.first)
		case writeBucket:
			_, err = b.CreateBucketIfNotExists(w.first)
		case writeDrop:
			err = b.DeleteBucket(w.first)
		case writeSequence:
			err = b.SetSequence(w.n)
		case writeFill:
			b.FillPercent = float64(w.n) / 100
		}
		if err != nil {
			return fmt.Errorf("write %d (kind %d) in bucket %q: %w", i, w.kind, w.path, err)
		}
		return nil
	})
}

// bucketAt is the bucket at path from tx's root.
func bucketAt(tx *bbolt.Tx, path [][]byte) (*bbolt.Bucket, error) {
	if len(path) == 0 {
		return nil, fmt.Errorf("it names no bucket")
	}
	b := tx.Bucket(path[0])
	for i := 1; b != nil && i < len(path); i++ {
		b = b.Bucket(path[i])
	}
	if b == nil {
		return nil, fmt.Errorf("bucket %q is not in the store", path)
	}
	return b, nil
}
