package mem

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
)

// The lifecycle is kept as the bolt store keeps it: the ended index lists
// each run that ended under its end time (8 bytes, big-endian Unix
// nanoseconds) and run ID, which is its Cursor; the deletion records are
// numbered from 1 in the order they were stored, and a page of them is
// cursored by a record's number in decimal.

var _ store.Lifecycle = (*Store)(nil)

// endedCursor is a run's key in the ended index.
func endedCursor(st runstate.State) string {
	k := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(st.RunID)), uint64(st.UpdatedAt.UnixNano()))
	return string(append(k, st.RunID...))
}

// endedIndexLocked is where a run's entry is, or would be, in the ended
// index, and whether it is there. d.mu must be held.
func (d *data) endedIndexLocked(st runstate.State) (int, bool) {
	return slices.BinarySearchFunc(d.ended, endedCursor(st), func(e store.Ended, c string) int {
		return strings.Compare(e.Cursor, c)
	})
}

// putEndedLocked lists the run now in state st in the ended index, or marks
// it archived there. d.mu must be held for writing.
func (d *data) putEndedLocked(st runstate.State) {
	e := store.Ended{
		Cursor:   endedCursor(st),
		RunID:    st.RunID,
		Tenant:   st.Tenant,
		Parent:   st.DelegatedBy.GetParentRunId(),
		EndedAt:  st.UpdatedAt,
		Archived: st.Archive != nil,
	}
	i, ok := d.endedIndexLocked(st)
	if ok {
		d.ended[i] = e
		return
	}
	d.ended = slices.Insert(d.ended, i, e)
}

// keepBlobsLocked stores the blobs an append to r (or its import) brought,
// once each, and counts r among the runs that hold each. d.mu must be held
// for writing.
func (d *data) keepBlobsLocked(r *run, blobs map[string][]byte) {
	for hash, content := range blobs {
		if _, ok := d.blobs[hash]; !ok {
			d.blobs[hash] = slices.Clone(content)
		}
		if _, ok := r.blobs[hash]; ok {
			continue
		}
		if r.blobs == nil {
			r.blobs = map[string]struct{}{}
		}
		r.blobs[hash] = struct{}{}
		d.blobRefs[hash]++
	}
}

// releaseBlobsLocked lets go of the blobs r brought: a blob no other run
// holds is erased. d.mu must be held for writing.
func (d *data) releaseBlobsLocked(r *run) {
	for hash := range r.blobs {
		if d.blobRefs[hash]--; d.blobRefs[hash] <= 0 {
			delete(d.blobRefs, hash)
			delete(d.blobs, hash)
		}
	}
	r.blobs = nil
}

// archivedErr is the error for reading or writing an archived run.
func archivedErr(runID string, rec *reinv1.RunArchive) error {
	return fmt.Errorf("run %s: %w under %s", runID, store.ErrArchived, rec.GetKey())
}

// Ended implements store.Lifecycle.
func (s *Store) Ended(ctx context.Context, after string, limit int) ([]store.Ended, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d := s.d
	d.mu.RLock()
	defer d.mu.RUnlock()
	if s.closed {
		return nil, closedErr("read store")
	}
	i, found := slices.BinarySearchFunc(d.ended, after, func(e store.Ended, c string) int {
		return strings.Compare(e.Cursor, c)
	})
	if found {
		i++
	}
	var out []store.Ended
	for ; i < len(d.ended) && len(out) < limit; i++ {
		out = append(out, d.ended[i])
	}
	return out, nil
}

// Archive implements store.Lifecycle. The run's log and the blobs only it
// brought go; its stub stays in the runs, the ids and the requests.
func (s *Store) Archive(ctx context.Context, runID string, version uint64, rec *reinv1.RunArchive) (runstate.State, error) {
	if err := ctx.Err(); err != nil {
		return runstate.State{}, err
	}
	if rec.GetKey() == "" || rec.GetSha256() == "" {
		return runstate.State{}, fmt.Errorf("archive run %s: the archive record names no object (key %q, sha256 %q)", runID, rec.GetKey(), rec.GetSha256())
	}
	rec = clone(rec)
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if s.closed {
		return runstate.State{}, closedErr("write run " + runID)
	}
	r, ok := d.runs[runID]
	if !ok {
		return runstate.State{}, notFound(runID)
	}
	st := r.state
	switch {
	case st.Archive != nil:
		return runstate.State{}, fmt.Errorf("archive run %s: %w under %s", runID, store.ErrArchived, st.Archive.GetKey())
	case !runstate.Terminal(st.Status):
		return runstate.State{}, fmt.Errorf("archive run %s: it is %s: %w", runID, runstate.StatusName(st.Status), store.ErrLive)
	case st.Version != version:
		return runstate.State{}, fmt.Errorf("archive run %s at version %d: the run is at version %d: %w", runID, version, st.Version, store.ErrConflict)
	}
	r.state = store.Stub(st, rec)
	r.events = nil
	d.releaseBlobsLocked(r)
	d.putEndedLocked(r.state)
	return cloneState(r.state), nil
}

// Delete implements store.Lifecycle. The run's status changes stay: they
// hold its ID, tenant and statuses, no content.
func (s *Store) Delete(ctx context.Context, del *reinv1.RunDeletion) (*reinv1.RunDeletion, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	runID := del.GetRunId()
	rec := clone(del)
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if s.closed {
		return nil, false, closedErr("write run " + runID)
	}
	if i, ok := d.deleted[runID]; ok {
		return clone(d.deletions[i]), false, nil
	}
	r, ok := d.runs[runID]
	if !ok {
		return nil, false, notFound(runID)
	}
	st := r.state
	if !runstate.Terminal(st.Status) {
		return nil, false, fmt.Errorf("delete run %s: it is %s: %w", runID, runstate.StatusName(st.Status), store.ErrLive)
	}
	rec.Tenant, rec.Status, rec.Archived = st.Tenant, st.Status, st.Archive != nil
	d.eraseLocked(r)
	d.deleted[runID] = len(d.deletions)
	d.deletions = append(d.deletions, rec)
	return clone(rec), true, nil
}

// eraseLocked removes every trace of r but its status changes: its log,
// state, blobs (those no other run holds), place in the ids, request key and
// ended entry. d.mu must be held for writing.
func (d *data) eraseLocked(r *run) {
	st := r.state
	delete(d.runs, st.RunID)
	if i, ok := slices.BinarySearch(d.ids, st.RunID); ok {
		d.ids = slices.Delete(d.ids, i, i+1)
	}
	if rk := (requestKey{st.Tenant, st.RequestID}); st.RequestID != "" && d.requests[rk] == st.RunID {
		delete(d.requests, rk)
	}
	if i, ok := d.endedIndexLocked(st); ok {
		d.ended = slices.Delete(d.ended, i, i+1)
	}
	d.releaseBlobsLocked(r)
}

// Deletion implements store.Lifecycle.
func (s *Store) Deletion(ctx context.Context, runID string) (*reinv1.RunDeletion, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d := s.d
	d.mu.RLock()
	defer d.mu.RUnlock()
	if s.closed {
		return nil, closedErr("read store")
	}
	i, ok := d.deleted[runID]
	if !ok {
		return nil, fmt.Errorf("deletion of run %q: %w", runID, store.ErrNotFound)
	}
	return clone(d.deletions[i]), nil
}

// Deletions implements store.Lifecycle.
func (s *Store) Deletions(ctx context.Context, tenant, after string, limit int) ([]*reinv1.RunDeletion, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	d := s.d
	d.mu.RLock()
	defer d.mu.RUnlock()
	if s.closed {
		return nil, "", closedErr("read store")
	}
	// Records 1..end come before the cursor; record n is deletions[n-1].
	end := uint64(len(d.deletions))
	if after != "" {
		n, err := strconv.ParseUint(after, 10, 64)
		if err != nil {
			return nil, "", fmt.Errorf("list deletions: page token %q: %w", after, store.ErrInvalidCursor)
		}
		end = min(end, max(n, 1)-1)
	}
	var out []*reinv1.RunDeletion
	var last uint64
	for n := end; n >= 1; n-- {
		r := d.deletions[n-1]
		if tenant != "" && r.GetTenant() != tenant {
			continue
		}
		if len(out) == limit {
			return out, strconv.FormatUint(last, 10), nil
		}
		out = append(out, clone(r))
		last = n
	}
	return out, "", nil
}
