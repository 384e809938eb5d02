package bolt

import (
	"bytes"
	"encoding/binary"
	"strings"

	"github.com/tidwall/btree"
)

// An overlay is what the store's commits since the last checkpoint wrote,
// key by key: each key's last write (a put, a delete, a bucket made) and
// each bucket's last sequence, ordered by bucket, then key. Reads put it
// over a bbolt read transaction of the last checkpoint (rtx, snapshot.go),
// as etcd's backend puts its txReadBuffer over its read transaction.
//
// Once a batch's record is synced the writer hands a copy of its body, the
// batch's writes as the log holds them (writes.go), to the snapshots
// (commitBatch); the first read of a snapshot decodes them and adds them to
// a copy of the overlay the last read made (snapshot.go). The tree is copy-on-write, so a copy costs nothing and
// the adds to it copy only the nodes they change. An overlay a snapshot
// holds is never changed; readers share it with no lock.
type overlay = btree.BTreeG[*ovEntry]

// ovEntry is one key's last write, in the bucket whose path is bucket
// (ovPath).
type ovEntry struct {
	bucket string
	// key is nil for the bucket's sequence (bbolt keys are never empty).
	key   []byte
	value []byte
	kind  byte
	seq   uint64
}

// The kinds of ovEntry.
const (
	ovPut    = 1
	ovDelete = 2 // the key, or the nested bucket, is gone
	// ovBucket is a nested bucket made since the checkpoint: nothing under
	// it is in the checkpoint (it was not there, or was dropped first).
	ovBucket = 3
	ovSeq    = 4
)

func ovLess(a, b *ovEntry) bool {
	if c := strings.Compare(a.bucket, b.bucket); c != 0 {
		return c < 0
	}
	return bytes.Compare(a.key, b.key) < 0
}

func newOverlay() *overlay {
	return btree.NewBTreeGOptions(ovLess, btree.Options{NoLocks: true})
}

// ovPath is the path of the bucket name nested in the bucket at parent
// ("" is the root): each name as a uvarint length, then its bytes. The
// paths under a bucket all start with its own, and no name's length is
// zero, so parent+"\x00" sorts after every key of parent and before its
// nested buckets.
func ovPath(parent string, name []byte) string {
	var n [binary.MaxVarintLen64]byte
	l := binary.PutUvarint(n[:], uint64(len(name)))
	var b strings.Builder
	b.Grow(len(parent) + l + len(name))
	b.WriteString(parent)
	b.Write(n[:l])
	b.Write(name)
	return b.String()
}

// read is what a read of e gives: a put's value (never nil, as a read
// transaction's is not), or nil for a nested bucket.
func (e *ovEntry) read() []byte {
	if e.kind != ovPut {
		return nil
	}
	if e.value == nil {
		return []byte{}
	}
	return e.value
}

// ovApply adds the writes of a record's body, in order, to ov. The entries
// hold the body's bytes, which must not change from here on.
func ovApply(ov *overlay, body []byte) error {
	var bucket string
	return walkWrites(body, func(_ int, w *recWrite) error {
		if !w.samePath {
			bucket = ""
			for _, name := range w.path {
				bucket = ovPath(bucket, name)
			}
		}
		switch w.kind {
		case writePut:
			ov.Set(&ovEntry{bucket: bucket, key: w.first, value: w.second, kind: ovPut})
		case writeDelete:
			ov.Set(&ovEntry{bucket: bucket, key: w.first, kind: ovDelete})
		case writeBucket:
			ov.Set(&ovEntry{bucket: bucket, key: w.first, kind: ovBucket})
		case writeDrop:
			ovDrop(ov, bucket, w.first)
		case writeSequence:
			ov.Set(&ovEntry{bucket: bucket, kind: ovSeq, seq: w.n})
		}
		return nil
	})
}

// ovDrop records in ov that the bucket name nested in bucket is dropped,
// with every write under it.
func ovDrop(ov *overlay, bucket string, name []byte) {
	if ov == nil {
		return
	}
	path := ovPath(bucket, name)
	var gone []*ovEntry
	ov.Ascend(&ovEntry{bucket: path}, func(e *ovEntry) bool {
		if !strings.HasPrefix(e.bucket, path) {
			return false
		}
		gone = append(gone, e)
		return true
	})
	for _, e := range gone {
		ov.Delete(e)
	}
	ov.Set(&ovEntry{bucket: bucket, key: name, kind: ovDelete})
}
