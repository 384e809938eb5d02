package etcd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
)

// listBatch is how many candidate runs List reads per round trip (two keys
// each, within etcd's default --max-txn-ops).
const listBatch = 64

// List implements store.Store. Runs come newest first (run IDs sort by
// creation time): it reads candidate IDs newest first, from the listing
// index or, with a status filter, from the status index (one range per
// status, merged), a batch at a time, then their snapshots and contracts;
// tenant and labels are checked on each.
func (s *Store) List(ctx context.Context, f store.Filter) (store.Page, error) {
	if f.Limit <= 0 {
		return store.Page{}, fmt.Errorf("list runs: limit must be positive, got %d", f.Limit)
	}
	if err := s.enter("read store"); err != nil {
		return store.Page{}, err
	}
	defer s.mu.RUnlock()
	var page store.Page
	below := f.After
	// The first batch is the page and the one run past it, which is all it
	// takes unless the filter passes runs over; then whole batches.
	batch := min(listBatch, f.Limit+1)
	for {
		ids, more, bad, err := s.candidates(ctx, f.Statuses, below, batch)
		batch = listBatch
		if err != nil {
			return store.Page{}, err
		}
		page.Damaged = append(page.Damaged, bad...)
		for start := 0; start < len(ids); start += listBatch {
			part := ids[start:min(start+listBatch, len(ids))]
			ops := make([]clientv3.Op, 0, 2*len(part))
			for _, id := range part {
				ops = append(ops, clientv3.OpGet(s.keys.run(id)), clientv3.OpGet(s.keys.contract(id)))
			}
			resp, err := s.read(ctx, "list runs", ops...)
			if err != nil {
				return store.Page{}, err
			}
			for i, id := range part {
				st, err := decodeState(id, kvOf(resp, 2*i), kvOf(resp, 2*i+1))
				switch {
				case errors.Is(err, store.ErrNotFound):
					page.Damaged = append(page.Damaged, damaged("run "+id, "the listing index names it, but its snapshot is missing"))
					continue
				case errors.Is(err, store.ErrDataLoss):
					page.Damaged = append(page.Damaged, fmt.Errorf("run %s: %w", id, err))
					continue
				case err != nil:
					return store.Page{}, fmt.Errorf("list runs: run %s: %w", id, err)
				}
				if !f.Matches(st) {
					continue
				}
				if len(page.Runs) == f.Limit {
					// One more match exists: the page is full and not the last.
					page.Next = page.Runs[len(page.Runs)-1].RunID
					return page, nil
				}
				page.Runs = append(page.Runs, st)
			}
		}
		if !more || len(ids) == 0 {
			return page, nil
		}
		below = ids[len(ids)-1]
	}
}

// candidates returns run IDs less than below (all when it is empty),
// greatest first: up to n from each index range it reads (they are
// keyed by invert, so that etcd reads them in that order), and more when a
// range may hold others after them. An index key that holds no run ID is
// damage, returned apart.
func (s *Store) candidates(ctx context.Context, statuses []reinv1.RunStatus, below string, n int) (ids []string, more bool, bad []error, err error) {
	var prefixes []string
	if len(statuses) == 0 {
		prefixes = []string{s.keys.listing()}
	}
	for _, st := range statuses {
		if p := s.keys.statuses(st); !slices.Contains(prefixes, p) {
			prefixes = append(prefixes, p)
		}
	}
	ops := make([]clientv3.Op, len(prefixes))
	for i, p := range prefixes {
		start := p
		if below != "" {
			start = p + invert(below) + "\x00" // the first key after below's
		}
		ops[i] = clientv3.OpGet(start, clientv3.WithRange(clientv3.GetPrefixRangeEnd(p)), clientv3.WithKeysOnly(), clientv3.WithLimit(int64(n)))
	}
	resp, err := s.read(ctx, "list runs", ops...)
	if err != nil {
		return nil, false, nil, err
	}
	// Merged, every ID is safe to take down to the greatest of the last IDs
	// of the ranges that were cut at the batch: below it, one of them may
	// hold IDs not read yet.
	var floor string
	for i, p := range prefixes {
		r := resp.Responses[i].GetResponseRange()
		last := ""
		for _, kv := range r.GetKvs() {
			id, ok := uninvert(strings.TrimPrefix(string(kv.Key), p))
			if !ok {
				bad = append(bad, damaged(fmt.Sprintf("listing index key %q", kv.Key), "it holds no run ID"))
				continue
			}
			ids = append(ids, id)
			last = id
		}
		if r.GetMore() {
			more = true
			floor = max(floor, last)
		}
	}
	slices.Sort(ids)
	slices.Reverse(ids)
	ids = slices.Compact(ids)
	if more {
		cut := len(ids)
		for cut > 0 && ids[cut-1] < floor {
			cut--
		}
		ids = ids[:cut]
	}
	return ids, more, bad, nil
}
