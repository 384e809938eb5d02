package bolt

// Tests of a snapshot's overlay as the first read makes it from the record
// bodies of the batches synced since the last read.

import (
	"bytes"
	"encoding/binary"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tidwall/btree"
)

// TestSnapshotOverlayMadeAgainAfterAFailure: a read whose adds to a
// snapshot's overlay fail (a panic, which guard turns into the read's
// error) leaves no overlay made, so the next read makes it whole rather
// than read the checkpoint alone. The twin is the first read, which fails.
func TestSnapshotOverlayMadeAgainAfterAFailure(t *testing.T) {
	var failing atomic.Bool
	base := btree.NewBTreeGOptions(func(a, b *ovEntry) bool {
		if failing.Load() {
			panic("an add failed")
		}
		return ovLess(a, b)
	}, btree.Options{NoLocks: true})
	base.Set(&ovEntry{bucket: ovPath("", []byte("b")), key: []byte("k1"), value: []byte("v1"), kind: ovPut})
	p := &snapshot{base: base, above: [][]byte{putRecord("b", "k2", "v2")}}

	failing.Store(true)
	err := guard("the first read", func() error { _, err := p.overlay(); return err })
	if err == nil || p.ov.Load() != nil {
		t.Fatalf("a read whose adds panicked: %v, overlay made %v; want its error, none made", err, p.ov.Load() != nil)
	}
	failing.Store(false)
	ov, err := p.overlay()
	if err != nil || ov == nil || ov.Len() != 2 {
		t.Fatalf("the next read's overlay: %v; want the base's entry and the batch's", err)
	}
	if _, ok := ov.Get(&ovEntry{bucket: ovPath("", []byte("b")), key: []byte("k2")}); !ok {
		t.Fatal("the next read's overlay lacks the batch's write")
	}
}

// TestSnapshotOfARecordThatDoesNotDecode: a batch whose record body does
// not decode (cut short, or of a write kind rein does not know) fails the
// read that makes the overlay with an error naming the batch, and leaves
// no overlay made; its twin, the whole record, makes one.
func TestSnapshotOfARecordThatDoesNotDecode(t *testing.T) {
	whole := putRecord("b", "k", "value")
	for name, body := range map[string][]byte{
		"cut short":    whole[:len(whole)-2],
		"unknown kind": append(bytes.Clone(whole), 9|writeSamePath),
	} {
		p := &snapshot{above: [][]byte{whole, body}}
		ov, err := p.overlay()
		if err == nil || ov != nil || p.ov.Load() != nil || !strings.Contains(err.Error(), "batch 2 of 2") {
			t.Errorf("%s: overlay %v, %v; want an error naming batch 2 of 2, none made", name, ov != nil, err)
		}
	}
	p := &snapshot{above: [][]byte{whole}}
	if ov, err := p.overlay(); err != nil || ov == nil || ov.Len() != 1 {
		t.Fatalf("the whole record: %v; want an overlay of its one write", err)
	}
}

// putRecord is a record's body of one write: a put of key and value in the
// top bucket named bucket.
func putRecord(bucket, key, value string) []byte {
	b := binary.AppendUvarint([]byte{writePut}, 1)
	b = appendBytes(b, []byte(bucket))
	return appendBytes(appendBytes(b, []byte(key)), []byte(value))
}
