package bolt

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
)

// List implements store.Store. Runs come newest first (run IDs sort by
// creation time). With a status filter it walks the status index, one cursor
// per status merged by run ID; otherwise it walks the runs bucket. Labels and
// tenant are checked on each candidate.
func (s *Store) List(ctx context.Context, f store.Filter) (store.Page, error) {
	if f.Limit <= 0 {
		return store.Page{}, fmt.Errorf("list runs: limit must be positive, got %d", f.Limit)
	}
	var page store.Page
	err := s.view(ctx, "the runs", func(tx *rtx) error {
		runs := tx.Bucket(bucketRuns)
		if runs == nil {
			return nil // a file from before any run, opened read-only
		}
		next := descending(tx, f)
		for id := next(); id != nil; id = next() {
			if err := ctx.Err(); err != nil {
				return err
			}
			b := runs.Bucket(id)
			if b == nil {
				page.Damaged = append(page.Damaged, damaged("run "+string(id), "the status index lists it, but its bucket is missing"))
				continue
			}
			st, err := loadState(b, contractOf(tx, string(id)))
			if errors.Is(err, store.ErrDataLoss) {
				page.Damaged = append(page.Damaged, fmt.Errorf("run %s: %w", id, err))
				continue
			}
			if err != nil {
				return fmt.Errorf("list runs: run %s: %w", id, err)
			}
			if !f.Matches(st) {
				continue
			}
			if len(page.Runs) == f.Limit {
				// One more match exists: the page is full and not the last.
				page.Next = page.Runs[len(page.Runs)-1].RunID
				return nil
			}
			page.Runs = append(page.Runs, st)
		}
		return nil
	})
	return page, err
}

// descending returns an iterator over candidate run IDs, greatest first, all
// less than f.After when it is set. The IDs it returns are copies.
func descending(tx *rtx, f store.Filter) func() []byte {
	after := []byte(f.After)
	if len(f.Statuses) == 0 {
		c := tx.Bucket(bucketRuns).Cursor()
		k := seekBelow(c, after, nil)
		return func() []byte {
			if k == nil {
				return nil
			}
			id := bytes.Clone(k)
			k, _ = c.Prev()
			return id
		}
	}
	type head struct {
		c  *rcursor
		p  byte
		id []byte // the current key without its status byte; nil when done
	}
	idx := tx.Bucket(bucketStatus)
	seen := map[reinv1.RunStatus]bool{}
	var heads []*head
	for _, st := range f.Statuses {
		if seen[st] {
			continue
		}
		seen[st] = true
		h := &head{c: idx.Cursor(), p: byte(st)}
		if k := seekBelow(h.c, after, []byte{h.p}); k != nil {
			h.id = k[1:]
		}
		heads = append(heads, h)
	}
	return func() []byte {
		var best *head
		for _, h := range heads {
			if h.id != nil && (best == nil || bytes.Compare(h.id, best.id) > 0) {
				best = h
			}
		}
		if best == nil {
			return nil
		}
		id := bytes.Clone(best.id)
		if k, _ := best.c.Prev(); k != nil && k[0] == best.p {
			best.id = k[1:]
		} else {
			best.id = nil
		}
		return id
	}
}

// seekBelow positions c on the greatest key that starts with prefix and, when
// after is set, is less than prefix+after. It returns that key or nil.
func seekBelow(c *rcursor, after, prefix []byte) []byte {
	var k []byte
	if len(after) == 0 && len(prefix) == 0 {
		k, _ = c.Last()
	} else {
		target := append(bytes.Clone(prefix), after...)
		if len(after) == 0 {
			target = []byte{prefix[0] + 1} // the first key of the next prefix
		}
		if k, _ = c.Seek(target); k == nil {
			k, _ = c.Last()
		} else {
			k, _ = c.Prev()
		}
	}
	if k == nil || !bytes.HasPrefix(k, prefix) {
		return nil
	}
	return k
}
