package bolt

import (
	"bytes"

	bbolt "go.etcd.io/bbolt"
)

// rtx is what a read sees: a bbolt transaction of the last checkpoint with
// the overlay of what was committed since over it (ov, nil for none). Its
// buckets and cursors have bbolt's methods and answers (a nested bucket's
// value is nil; Get of a missing key is nil), and what they return is valid
// while the read transaction is. The writer reads its own transaction
// through an rtx with no overlay (readTx).
type rtx struct {
	tx *bbolt.Tx
	ov *overlay
	// probe is find's key, kept to spare an allocation a lookup: an rtx
	// is one goroutine's.
	probe ovEntry
}

// readTx reads tx as it is, with no overlay.
func readTx(tx *bbolt.Tx) *rtx { return &rtx{tx: tx} }

// find is the overlay's write of key in the bucket at path, or nil.
func (t *rtx) find(path string, key []byte) *ovEntry {
	if t.ov == nil {
		return nil
	}
	t.probe.bucket, t.probe.key = path, key
	e, ok := t.ov.Get(&t.probe)
	t.probe.key = nil
	if !ok {
		return nil
	}
	return e
}

// path is the path of name under parent, when there is an overlay to look
// it up in.
func (t *rtx) path(parent string, name []byte) string {
	if t.ov == nil {
		return ""
	}
	return ovPath(parent, name)
}

// Bucket is the top bucket name, or nil.
func (t *rtx) Bucket(name []byte) *rbucket {
	if e := t.find("", name); e != nil {
		if e.kind != ovBucket {
			return nil
		}
		return &rbucket{t: t, path: ovPath("", name)}
	}
	base := t.tx.Bucket(name)
	if base == nil {
		return nil
	}
	return &rbucket{t: t, base: base, path: t.path("", name)}
}

// rbucket is a bucket of an rtx: the checkpoint's (base, nil when it has
// none or the overlay made the bucket anew) under the overlay's writes to
// the bucket at path.
type rbucket struct {
	t    *rtx
	base *bbolt.Bucket
	path string
}

// Bucket is the nested bucket name, or nil.
func (b *rbucket) Bucket(name []byte) *rbucket {
	if e := b.t.find(b.path, name); e != nil {
		if e.kind != ovBucket {
			return nil
		}
		return &rbucket{t: b.t, path: ovPath(b.path, name)}
	}
	if b.base == nil {
		return nil
	}
	nb := b.base.Bucket(name)
	if nb == nil {
		return nil
	}
	return &rbucket{t: b.t, base: nb, path: b.t.path(b.path, name)}
}

// Get is the value of key, nil when it is missing or a nested bucket.
func (b *rbucket) Get(key []byte) []byte {
	if e := b.t.find(b.path, key); e != nil {
		return e.read()
	}
	if b.base == nil {
		return nil
	}
	return b.base.Get(key)
}

// Sequence is the bucket's sequence.
func (b *rbucket) Sequence() uint64 {
	if e := b.t.find(b.path, nil); e != nil {
		return e.seq
	}
	if b.base == nil {
		return 0
	}
	return b.base.Sequence()
}

// ForEach calls fn with each key and value in order, as bbolt's does.
func (b *rbucket) ForEach(fn func(k, v []byte) error) error {
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if err := fn(k, v); err != nil {
			return err
		}
	}
	return nil
}

// Cursor is a cursor over the bucket's keys as the read sees them.
func (b *rbucket) Cursor() *rcursor {
	c := &rcursor{b: b}
	if b.base != nil {
		c.c = b.base.Cursor()
	}
	c.merge = b.t.ov != nil && b.hasWrites()
	return c
}

// hasWrites says whether the overlay holds a write to one of the bucket's
// keys.
func (b *rbucket) hasWrites() bool {
	found := false
	b.t.ov.Ascend(&ovEntry{bucket: b.path}, func(e *ovEntry) bool {
		found = e.bucket == b.path && e.key != nil
		return e.bucket == b.path && e.key == nil
	})
	return found
}

// rcursor is a cursor over an rbucket: the checkpoint's cursor (c) merged
// with the overlay's writes to the bucket, which come before the
// checkpoint's value of the same key, a delete hiding it. It moves as
// bbolt's Cursor does (First, Last, Seek, Next, Prev, in any order), and
// is one goroutine's.
type rcursor struct {
	b *rbucket
	c *bbolt.Cursor // nil when the checkpoint has no such bucket
	// merge is false when the overlay holds nothing of the bucket: the
	// cursor is then c's.
	merge bool
	// bk, bv are where c stands: in forward order the first key of the
	// checkpoint at or after cur, else the last at or before it; nil
	// when it is past the end.
	bk, bv []byte
	cur    []byte // the key the cursor is on; nil when off either end
	fwd    bool
	// oe caches the overlay's next write in the cursor's direction when
	// oeOK: nil when there is none.
	oe   *ovEntry
	oeOK bool
}

func (c *rcursor) base(k, v []byte) { c.bk, c.bv = k, v }

// First moves to the first key.
func (c *rcursor) First() ([]byte, []byte) {
	if !c.merge {
		return c.direct(func(bc *bbolt.Cursor) ([]byte, []byte) { return bc.First() })
	}
	c.fwd, c.oeOK = true, false
	if c.c != nil {
		c.base(c.c.First())
	}
	return c.forward(nil, true)
}

// Last moves to the last key.
func (c *rcursor) Last() ([]byte, []byte) {
	if !c.merge {
		return c.direct(func(bc *bbolt.Cursor) ([]byte, []byte) { return bc.Last() })
	}
	c.fwd, c.oeOK = false, false
	if c.c != nil {
		c.base(c.c.Last())
	}
	return c.backward(nil, true)
}

// Seek moves to the first key at or after seek.
func (c *rcursor) Seek(seek []byte) ([]byte, []byte) {
	if !c.merge {
		return c.direct(func(bc *bbolt.Cursor) ([]byte, []byte) { return bc.Seek(seek) })
	}
	c.fwd, c.oeOK = true, false
	if c.c != nil {
		c.base(c.c.Seek(seek))
	}
	return c.forward(seek, true)
}

// Next moves to the next key; nil once past the last.
func (c *rcursor) Next() ([]byte, []byte) {
	if !c.merge {
		return c.direct(func(bc *bbolt.Cursor) ([]byte, []byte) { return bc.Next() })
	}
	if c.cur == nil {
		return nil, nil
	}
	if !c.fwd {
		c.fwd, c.oeOK = true, false
		if c.c != nil {
			c.base(c.c.Seek(c.cur))
		}
	}
	if c.bk != nil && bytes.Equal(c.bk, c.cur) {
		c.base(c.c.Next())
	}
	return c.forward(c.cur, false)
}

// Prev moves to the key before; nil once before the first.
func (c *rcursor) Prev() ([]byte, []byte) {
	if !c.merge {
		return c.direct(func(bc *bbolt.Cursor) ([]byte, []byte) { return bc.Prev() })
	}
	if c.cur == nil {
		return nil, nil
	}
	if c.fwd {
		c.fwd, c.oeOK = false, false
		if c.c != nil {
			if k, v := c.c.Seek(c.cur); k == nil {
				c.base(c.c.Last())
			} else if bytes.Equal(k, c.cur) {
				c.base(k, v)
			} else {
				c.base(c.c.Prev())
			}
		}
	}
	if c.bk != nil && bytes.Equal(c.bk, c.cur) {
		c.base(c.c.Prev())
	}
	return c.backward(c.cur, false)
}

// direct is a move of the checkpoint's cursor alone.
func (c *rcursor) direct(move func(*bbolt.Cursor) ([]byte, []byte)) ([]byte, []byte) {
	if c.c == nil {
		return nil, nil
	}
	return move(c.c)
}

// forward is the first key after from (at or after, with at; from nil
// with at: the first), with c.bk the checkpoint's first key there.
func (c *rcursor) forward(from []byte, at bool) ([]byte, []byte) {
	for {
		e := c.overlayAfter(from, at)
		if e == nil && c.bk == nil {
			c.cur = nil
			return nil, nil
		}
		if e == nil || (c.bk != nil && bytes.Compare(c.bk, e.key) < 0) {
			c.cur = c.bk
			return c.bk, c.bv
		}
		if e.kind != ovDelete {
			c.cur = e.key
			return e.key, e.read()
		}
		// A delete hides the checkpoint's key, if it has it.
		if c.bk != nil && bytes.Equal(c.bk, e.key) {
			c.base(c.c.Next())
		}
		from, at = e.key, false
	}
}

// backward is forward's mirror: the last key before from (at or before,
// with at; from nil with at: the last).
func (c *rcursor) backward(from []byte, at bool) ([]byte, []byte) {
	for {
		e := c.overlayBefore(from, at)
		if e == nil && c.bk == nil {
			c.cur = nil
			return nil, nil
		}
		if e == nil || (c.bk != nil && bytes.Compare(c.bk, e.key) > 0) {
			c.cur = c.bk
			return c.bk, c.bv
		}
		if e.kind != ovDelete {
			c.cur = e.key
			return e.key, e.read()
		}
		if c.bk != nil && bytes.Equal(c.bk, e.key) {
			c.base(c.c.Prev())
		}
		from, at = e.key, false
	}
}

// overlayAfter is the overlay's first write to a key of the bucket after
// from (at or after, with at), or nil. Moving forward, the one found last
// stays the answer until the cursor passes it.
func (c *rcursor) overlayAfter(from []byte, at bool) *ovEntry {
	if c.oeOK && (c.oe == nil || bytes.Compare(c.oe.key, from) > 0 || at && bytes.Equal(c.oe.key, from)) {
		return c.oe
	}
	path := c.b.path
	var found *ovEntry
	c.b.t.ov.Ascend(&ovEntry{bucket: path, key: from}, func(e *ovEntry) bool {
		if e.bucket != path {
			return false
		}
		if e.key == nil || !at && bytes.Equal(e.key, from) {
			return true
		}
		found = e
		return false
	})
	c.oe, c.oeOK = found, true
	return found
}

// overlayBefore is overlayAfter's mirror; from nil with at is after every
// key.
func (c *rcursor) overlayBefore(from []byte, at bool) *ovEntry {
	last := from == nil && at
	if c.oeOK && (c.oe == nil || last || bytes.Compare(c.oe.key, from) < 0 || at && bytes.Equal(c.oe.key, from)) {
		return c.oe
	}
	path := c.b.path
	pivot := &ovEntry{bucket: path, key: from}
	if last {
		pivot = &ovEntry{bucket: path + "\x00"}
	}
	var found *ovEntry
	c.b.t.ov.Descend(pivot, func(e *ovEntry) bool {
		if e.bucket != path {
			return e.bucket > path // the pivot itself, past the bucket
		}
		if e.key == nil {
			return false // the bucket's sequence, before its keys
		}
		if !last && !at && bytes.Equal(e.key, from) {
			return true
		}
		found = e
		return false
	})
	c.oe, c.oeOK = found, true
	return found
}

// getter is a bucket to Get from: an rbucket, or the writer's bbolt bucket.
type getter interface{ Get(key []byte) []byte }
