//go:build reinbench

package bolt

// What rein-bench reads of the store beside its API (with ceiling.go):
// compiled only into the bench binary (go build -tags reinbench
// ./cmd/rein-bench) and the tests built with the same tag, never into rein.

import (
	"context"
	"fmt"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// Commits is the number of write transactions so far: with group commit,
// fewer than the appends.
func (s *Store) Commits() uint64 { return s.commits.Load() }

// ScanEvents calls fn with each stored event of a run after a sequence, in
// order, decoding into one reused Event. fn must not keep ev.
func (s *Store) ScanEvents(runID string, after uint64, fn func(ev *reinv1.Event) error) error {
	return s.view(context.Background(), fmt.Sprintf("run %s events from %d", runID, after+1), func(tx *rtx) error {
		b := tx.runBucket(runID)
		if b == nil {
			return missingRun(tx, runID)
		}
		eb := b.Bucket(keyEvents)
		if eb == nil {
			return stubOrDamaged(b, runID, "its events bucket is missing")
		}
		c := eb.Cursor()
		ev := &reinv1.Event{}
		want := after + 1
		for k, v := c.Seek(seqKey(want)); k != nil; k, v = c.Next() {
			if isBlobKey(k) {
				continue
			}
			ev.Reset()
			if err := decodeEvent(runID, want, k, v, ev); err != nil {
				return err
			}
			if err := fn(ev); err != nil {
				return err
			}
			want++
		}
		return nil
	})
}
