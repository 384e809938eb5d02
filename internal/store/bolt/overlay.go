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
// The writer keeps each write of a batch as its transaction makes it (wtx,
// as it records it in the log's record) and, once the record is synced,
// hands the batch's writes to the snapshots (commitBatch); the first read
// of a snapshot adds them to a copy of the overlay the last read made
// (snapshot.go). The tree is copy-on-write, so a copy costs nothing and
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
	// ovDropped is not kept: a write that drops the nested bucket key,
	// with every write under it, as it waits in a wtx's pend.
	ovDropped = 5
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

// ovApply adds writes, in order, to ov.
func ovApply(ov *overlay, writes []ovEntry) {
	for i := range writes {
		e := &writes[i]
		switch e.kind {
		case ovDropped:
			ovDrop(ov, e.bucket, e.key)
		default:
			ov.Set(e)
		}
	}
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
