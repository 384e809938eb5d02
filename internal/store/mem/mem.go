// Package mem is an in-memory event store, for tests (the replay package's
// among them; replay itself folds its own log, replay/runlog.go): nothing
// touches the disk, and everything is lost with the process.
//
// It keeps the semantics of the bolt store (it passes the same conformance
// suite, storetest): Create is idempotent per tenant and request ID, Append
// checks the expected version and the lease epoch and validates the events by
// folding them onto the stored state (runstate.ApplyAll) before it stores
// any of them (and returns a copy of the state that fold made), Import takes
// a whole log or none of it, List pages newest first by run ID, and Changes
// records every status change, a run's creation included, under a gap-free
// cursor. Blobs
// given to Append are checked against their hashes before anything is
// stored, and stored once each, only when the append is taken.
//
// The store deep-copies (proto.Clone) every event and state it is given and
// every one it returns, and copies every blob in and out, so a caller can neither change what is stored nor see
// its results change under it.
//
// One mutex guards all the data: every call is a short critical section, and
// a write is validated completely before it changes anything, so a refused
// request leaves the store as it was.
//
// It implements store.Lifecycle as the bolt store does (lifecycle.go): a run
// is listed as ended when its status becomes terminal, by Append or Import;
// an archived run keeps its stub, and reading or appending to it is
// store.ErrArchived; a deleted run leaves its record only. A blob is kept
// while a run that brought it holds it, so that a run archived or deleted
// takes away the blobs no other run brought.
package mem

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
)

// Store is one handle on an in-memory event store. It implements
// store.Store and is safe for concurrent use. Close closes the handle, not
// the data: Reopen returns a new handle on the same data.
type Store struct {
	d *data
	// closed is guarded by d.mu, so that Close waits for the call in flight.
	closed bool
}

var _ store.Store = (*Store)(nil)

// data is what the handles of one store share.
type data struct {
	mu   sync.RWMutex
	runs map[string]*run
	// ids is every run ID, ascending: the listing order reversed (run IDs
	// sort by creation time).
	ids []string
	// requests maps tenant and request ID to the run they created.
	requests map[requestKey]string
	// changes is every status change; the change with cursor c is
	// changes[c-1].
	changes []store.Change
	// blobs maps a blob's hash to its content, a copy of the caller's.
	blobs map[string][]byte
	// blobRefs counts, for each blob, the runs that brought it and hold
	// it still (run.blobs).
	blobRefs map[string]int
	// ended is the ended index: the runs that ended, by Cursor ascending
	// (end time, then run ID).
	ended []store.Ended
	// deletions is every deletion record, oldest first; deleted maps a
	// deleted run's ID to its record's index there.
	deletions []*reinv1.RunDeletion
	deleted   map[string]int
	// schedules maps store.ScheduleKey to a schedule (schedules.go).
	schedules map[string]*reinv1.Schedule
}

type run struct {
	state  runstate.State
	events []*reinv1.Event // events[i] has sequence i+1
	epoch  uint64
	owner  string
	// blobs is the hashes of the blobs its appends or import brought.
	blobs map[string]struct{}
}

type requestKey struct{ tenant, requestID string }

// New returns an empty store.
func New() *Store {
	return &Store{d: &data{
		runs: map[string]*run{}, requests: map[requestKey]string{}, blobs: map[string][]byte{},
		blobRefs: map[string]int{}, deleted: map[string]int{},
	}}
}

// Reopen returns a new, open handle on the data of s, as opening a file store
// again after closing it does. s itself stays as it is (closed or not).
func (s *Store) Reopen() *Store {
	return &Store{d: s.d}
}

// Close closes the handle: later calls on it return store.ErrClosed. A call
// in flight finishes first.
func (s *Store) Close() error {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if s.closed {
		return fmt.Errorf("close store: %w", store.ErrClosed)
	}
	s.closed = true
	return nil
}

// Create implements store.Store.
func (s *Store) Create(ctx context.Context, started *reinv1.Event) (runstate.State, bool, error) {
	if err := ctx.Err(); err != nil {
		return runstate.State{}, false, err
	}
	ev := clone(started)
	st, err := runstate.Apply(runstate.State{}, ev)
	if err != nil {
		return runstate.State{}, false, err
	}
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if s.closed {
		return runstate.State{}, false, closedErr("write run " + st.RunID)
	}
	rk := requestKey{st.Tenant, st.RequestID}
	if st.RequestID != "" {
		if id, ok := d.requests[rk]; ok {
			return cloneState(d.runs[id].state), false, nil
		}
	}
	if _, ok := d.runs[st.RunID]; ok {
		return runstate.State{}, false, fmt.Errorf("create run %s: a run with that id exists: %w", st.RunID, store.ErrConflict)
	}
	d.runs[st.RunID] = &run{state: st, events: []*reinv1.Event{ev}}
	i, _ := slices.BinarySearch(d.ids, st.RunID)
	d.ids = slices.Insert(d.ids, i, st.RunID)
	if st.RequestID != "" {
		d.requests[rk] = st.RunID
	}
	d.recordChange(reinv1.RunStatus_RUN_STATUS_UNSPECIFIED, st)
	return cloneState(st), true, nil
}

// Import implements store.Store: the whole log is validated before the
// store is locked, and taken under one lock, or not at all.
func (s *Store) Import(ctx context.Context, events []*reinv1.Event, blobs map[string][]byte) (runstate.State, error) {
	if err := ctx.Err(); err != nil {
		return runstate.State{}, err
	}
	if len(events) == 0 {
		return runstate.State{}, fmt.Errorf("import a run: no events; a run's log starts with run_started")
	}
	runID := events[0].GetRunId()
	if err := store.CheckBlobs(blobs); err != nil {
		return runstate.State{}, fmt.Errorf("import run %s: %w", runID, err)
	}
	evs := make([]*reinv1.Event, len(events))
	for i, ev := range events {
		evs[i] = clone(ev)
	}
	st, err := runstate.ApplyAll(runstate.State{}, evs)
	if err != nil {
		return runstate.State{}, fmt.Errorf("import run %s: %w", runID, err)
	}
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if s.closed {
		return runstate.State{}, closedErr("write run " + runID)
	}
	if _, ok := d.runs[runID]; ok {
		return runstate.State{}, fmt.Errorf("import run %s: %w under that ID", runID, store.ErrExists)
	}
	if _, ok := d.deleted[runID]; ok {
		return runstate.State{}, fmt.Errorf("import run %s: %w: a run with that ID was deleted, and a deleted run's ID is not used again", runID, store.ErrExists)
	}
	rk := requestKey{st.Tenant, st.RequestID}
	if id, ok := d.requests[rk]; ok && st.RequestID != "" {
		return runstate.State{}, fmt.Errorf("import run %s: %w with its request ID %q in tenant %q: run %s",
			runID, store.ErrExists, st.RequestID, st.Tenant, id)
	}
	r := &run{state: st, events: evs}
	d.runs[runID] = r
	i, _ := slices.BinarySearch(d.ids, runID)
	d.ids = slices.Insert(d.ids, i, runID)
	if st.RequestID != "" {
		d.requests[rk] = runID
	}
	d.keepBlobsLocked(r, blobs)
	d.recordChange(reinv1.RunStatus_RUN_STATUS_UNSPECIFIED, st)
	return cloneState(st), nil
}

// Append implements store.Store.
func (s *Store) Append(ctx context.Context, runID string, expected uint64, events []*reinv1.Event, opts ...store.AppendOption) (runstate.State, error) {
	if len(events) == 0 {
		return s.Load(ctx, runID) // as the bolt store: an empty append stores nothing
	}
	if err := ctx.Err(); err != nil {
		return runstate.State{}, err
	}
	o := store.Options(opts)
	if err := store.CheckBlobs(o.Blobs); err != nil {
		return runstate.State{}, fmt.Errorf("append to run %s: %w", runID, err)
	}
	evs := make([]*reinv1.Event, len(events))
	for i, ev := range events {
		evs[i] = clone(ev)
	}
	epoch := o.Epoch
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
	if o.Acquire == "" && epoch != 0 && epoch != r.epoch {
		return runstate.State{}, fmt.Errorf("append to run %s with lease epoch %d: the run's owner is now at epoch %d: %w",
			runID, epoch, r.epoch, store.ErrFenced)
	}
	if r.state.Archive != nil {
		return runstate.State{}, fmt.Errorf("append to run %s: %w: an archived run takes no events", runID, store.ErrArchived)
	}
	if r.state.Version != expected {
		return runstate.State{}, fmt.Errorf("append to run %s at version %d: the run is at version %d: %w; reload the run and retry",
			runID, expected, r.state.Version, store.ErrConflict)
	}
	next, err := runstate.ApplyAll(r.state, evs)
	if err != nil {
		return runstate.State{}, fmt.Errorf("append to run %s: %w", runID, err)
	}
	prev := r.state.Status
	d.keepBlobsLocked(r, o.Blobs)
	r.events = append(r.events, evs...)
	r.state = next
	if o.Acquire != "" {
		r.epoch++
		r.owner = o.Acquire
		if o.Acquired != nil {
			*o.Acquired = r.epoch
		}
	}
	if prev != next.Status {
		d.recordChange(prev, next)
	}
	return cloneState(next), nil
}

// recordChange appends a status change of the run now in state st, and
// lists the run in the ended index when the change ended it. d.mu must be
// held for writing.
func (d *data) recordChange(prev reinv1.RunStatus, st runstate.State) {
	if runstate.Terminal(st.Status) && !runstate.Terminal(prev) {
		d.putEndedLocked(st)
	}
	cursor := uint64(len(d.changes)) + 1
	d.changes = append(d.changes, store.Change{
		Cursor: cursor,
		Tenant: st.Tenant,
		Change: &reinv1.RunChange{
			Cursor: cursor, RunId: st.RunID, Previous: prev, Status: st.Status, Version: st.Version,
			Reason: st.StatusReason, ChangedAt: timestamppb.New(st.UpdatedAt),
		},
	})
}

// Acquire implements store.Store.
func (s *Store) Acquire(ctx context.Context, runID, owner string) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if s.closed {
		return 0, closedErr("write run " + runID)
	}
	r, ok := d.runs[runID]
	if !ok {
		return 0, notFound(runID)
	}
	r.epoch++
	r.owner = owner
	return r.epoch, nil
}

// Load implements store.Store.
func (s *Store) Load(ctx context.Context, runID string) (runstate.State, error) {
	if err := ctx.Err(); err != nil {
		return runstate.State{}, err
	}
	d := s.d
	d.mu.RLock()
	defer d.mu.RUnlock()
	if s.closed {
		return runstate.State{}, closedErr("read store")
	}
	r, ok := d.runs[runID]
	if !ok {
		return runstate.State{}, notFound(runID)
	}
	return cloneState(r.state), nil
}

// Events implements store.Store.
func (s *Store) Events(ctx context.Context, runID string, after uint64, limit int) ([]*reinv1.Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d := s.d
	d.mu.RLock()
	defer d.mu.RUnlock()
	if s.closed {
		return nil, closedErr("read store")
	}
	r, ok := d.runs[runID]
	if !ok {
		return nil, notFound(runID)
	}
	if r.state.Archive != nil {
		return nil, archivedErr(runID, r.state.Archive)
	}
	var out []*reinv1.Event
	for i := after; i < uint64(len(r.events)) && len(out) < limit; i++ {
		out = append(out, clone(r.events[i]))
	}
	return out, nil
}

// List implements store.Store. Runs come newest first (run IDs sort by
// creation time); statuses, labels and tenant are checked on each run.
func (s *Store) List(ctx context.Context, f store.Filter) (store.Page, error) {
	if f.Limit <= 0 {
		return store.Page{}, fmt.Errorf("list runs: limit must be positive, got %d", f.Limit)
	}
	if err := ctx.Err(); err != nil {
		return store.Page{}, err
	}
	d := s.d
	d.mu.RLock()
	defer d.mu.RUnlock()
	if s.closed {
		return store.Page{}, closedErr("read store")
	}
	// Start below f.After: ids[:end] are the IDs less than it.
	end := len(d.ids)
	if f.After != "" {
		end, _ = slices.BinarySearch(d.ids, f.After)
	}
	var page store.Page
	for i := end - 1; i >= 0; i-- {
		st := d.runs[d.ids[i]].state
		if !f.Matches(st) {
			continue
		}
		if len(page.Runs) == f.Limit {
			// One more match exists: the page is full and not the last.
			page.Next = page.Runs[len(page.Runs)-1].RunID
			break
		}
		page.Runs = append(page.Runs, cloneState(st))
	}
	return page, nil
}

// Changes implements store.Store.
func (s *Store) Changes(ctx context.Context, after uint64, limit int) ([]store.Change, uint64, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	d := s.d
	d.mu.RLock()
	defer d.mu.RUnlock()
	if s.closed {
		return nil, 0, closedErr("read store")
	}
	head := uint64(len(d.changes))
	var out []store.Change
	for i := after; i < head && len(out) < limit; i++ {
		c := d.changes[i]
		c.Change = clone(c.Change)
		out = append(out, c)
	}
	return out, head, nil
}

// Blobs implements store.Store. Blobs are kept once for every run, so a
// blob another run brought is found too.
func (s *Store) Blobs(ctx context.Context, runID string, hashes []string) (map[string][]byte, error) {
	if err := store.CheckHashes(hashes); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d := s.d
	d.mu.RLock()
	defer d.mu.RUnlock()
	if s.closed {
		return nil, closedErr("read store")
	}
	r, ok := d.runs[runID]
	if !ok {
		return nil, notFound(runID)
	}
	if r.state.Archive != nil {
		return nil, archivedErr(runID, r.state.Archive)
	}
	out := make(map[string][]byte, len(hashes))
	for _, h := range hashes {
		content, ok := d.blobs[h]
		if !ok {
			return nil, fmt.Errorf("blob %s of run %s: %w", h, runID, store.ErrNoBlob)
		}
		out[h] = append(make([]byte, 0, len(content)), content...)
	}
	return out, nil
}

// clone deep-copies a message; a nil one stays nil.
func clone[M proto.Message](m M) M {
	return proto.Clone(m).(M)
}

// cloneState copies st with its own copies of the messages it points to.
func cloneState(st runstate.State) runstate.State {
	st.Contract = clone(st.Contract)
	st.ApprovedWrite = clone(st.ApprovedWrite)
	st.Pending = clone(st.Pending)
	st.Result = clone(st.Result)
	st.Archive = clone(st.Archive)
	return st
}

func notFound(runID string) error {
	return fmt.Errorf("run %q: %w", runID, store.ErrNotFound)
}

func closedErr(what string) error {
	return fmt.Errorf("%s: %w", what, store.ErrClosed)
}
