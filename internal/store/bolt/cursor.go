package bolt

import (
	"bytes"

	bbolt "go.etcd.io/bbolt"
)

// prev moves c, which is on the key cur, to the key before it, as
// Cursor.Prev does, stepping over the empty leaves that deletes leave in a
// write transaction until it commits: bbolt's Prev stops on one as if it
// were before the first key (its First, Last, Next and Seek step over
// them). Reads go through the writer's open transaction (checkpoint.go), so
// without this a listing newest first could end early.
func prev(c *bbolt.Cursor, cur []byte) ([]byte, []byte) {
	k, v := c.Prev()
	if k != nil || !c.Bucket().Writable() {
		return k, v
	}
	if first, _ := c.First(); first == nil || bytes.Compare(first, cur) >= 0 {
		return nil, nil // cur is the first key
	}
	// A key is below cur: each Prev from cur moves back at least one
	// leaf, empty or not, until it reaches it.
	c.Seek(cur)
	for {
		if k, v = c.Prev(); k != nil {
			return k, v
		}
	}
}
