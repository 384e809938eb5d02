package etcd

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/store/seal"
)

// errRunExists marks a create whose run ID is stored already.
var errRunExists = errors.New("a run with that id exists")

// Create implements store.Store. Concurrent Creates of one tenant's request
// ID race on the request key's compare (CreateRevision = 0): one run is
// created, and the others return it.
func (s *Store) Create(ctx context.Context, started *reinv1.Event) (runstate.State, bool, error) {
	st, err := runstate.Apply(runstate.State{}, started)
	if err != nil {
		return runstate.State{}, false, err
	}
	what := "create run " + st.RunID
	if err := checkRunID(st.RunID); err != nil {
		return runstate.State{}, false, fmt.Errorf("%s: %w", what, err)
	}
	data, err := seal.Seal(started)
	if err != nil {
		return runstate.State{}, false, fmt.Errorf("%s: encode its first event: %w", what, err)
	}
	if err := s.enter("write run " + st.RunID); err != nil {
		return runstate.State{}, false, err
	}
	defer s.mu.RUnlock()
	got, created, err := s.create(ctx, what, st, []*reinv1.Event{started}, [][]byte{data}, nil)
	if errors.Is(err, errRunExists) {
		return runstate.State{}, false, fmt.Errorf("%s: %w: %w", what, errRunExists, store.ErrConflict)
	}
	return got, created, err
}

// Import implements store.Store: the whole log, its snapshot and its blobs
// in one Txn, or nothing.
func (s *Store) Import(ctx context.Context, events []*reinv1.Event, blobs map[string][]byte) (runstate.State, error) {
	if len(events) == 0 {
		return runstate.State{}, errors.New("import a run: no events; a run's log starts with run_started")
	}
	runID := events[0].GetRunId()
	what := "import run " + runID
	if err := checkRunID(runID); err != nil {
		return runstate.State{}, fmt.Errorf("%s: %w", what, err)
	}
	if err := store.CheckBlobs(blobs); err != nil {
		return runstate.State{}, fmt.Errorf("%s: %w", what, err)
	}
	if err := s.checkBlobSizes(what, blobs); err != nil {
		return runstate.State{}, err
	}
	st, err := runstate.ApplyAll(runstate.State{}, events)
	if err != nil {
		return runstate.State{}, fmt.Errorf("%s: %w", what, err)
	}
	encoded, err := sealEvents(what, events)
	if err != nil {
		return runstate.State{}, err
	}
	if err := s.enter("write run " + runID); err != nil {
		return runstate.State{}, err
	}
	defer s.mu.RUnlock()
	missing, err := s.missingBlobs(ctx, what, runID, blobs)
	if err != nil {
		return runstate.State{}, err
	}
	prev, created, err := s.create(ctx, what, st, events, encoded, missing)
	switch {
	case errors.Is(err, errRunExists):
		return runstate.State{}, fmt.Errorf("%s: %w under that ID", what, store.ErrExists)
	case err != nil:
		return runstate.State{}, err
	case !created:
		return runstate.State{}, fmt.Errorf("%s: %w with its request ID %q in tenant %q: run %s",
			what, store.ErrExists, st.RequestID, st.Tenant, prev.RunID)
	}
	return st, nil
}

// create stores a new run in state st with its events (encoded), its
// blobs and the webhook deliveries they cause (outbox.go). A
// request ID the tenant used already returns that run's state and created
// false; a run ID stored already is errRunExists; the ID of a run deleted
// (P deleted/<run id>, lifecycle.go) is ErrExists: a deleted run's ID is
// not used again, so that its record names one run. The deletion record is
// a compare of the Txn, not a read before it, so a Delete racing the
// create is ordered by etcd.
func (s *Store) create(ctx context.Context, what string, st runstate.State, events []*reinv1.Event, encoded [][]byte, blobs map[string][]byte) (runstate.State, bool, error) {
	contract, err := seal.Seal(st.Contract)
	if err != nil {
		return runstate.State{}, false, fmt.Errorf("%s: encode its contract: %w", what, err)
	}
	snap, err := seal.Seal(st.Proto(false))
	if err != nil {
		return runstate.State{}, false, fmt.Errorf("%s: encode its snapshot: %w", what, err)
	}
	rk := s.keys.request(st.Tenant, st.RequestID)
	s.changesMu.Lock()
	defer s.changesMu.Unlock()
	for range maxAttempts {
		head, err := s.headLocked(ctx)
		if err != nil {
			return runstate.State{}, false, err
		}
		t := &txn{}
		t.cmp(absent(s.keys.run(st.RunID)))
		t.orElse(rk)                   // 0
		t.orElse(s.keys.run(st.RunID)) // 1
		if st.RequestID != "" {
			t.cmp(absent(rk))
			t.put(rk, []byte(st.RunID))
		}
		t.put(s.keys.contract(st.RunID), contract)
		t.put(s.keys.newest(st.RunID), nil)
		for i, data := range encoded {
			t.put(s.keys.event(st.RunID, uint64(i+1)), data)
		}
		t.put(s.keys.run(st.RunID), snap)
		if !runstate.Terminal(st.Status) {
			t.put(s.keys.unowned(st.RunID), nil) // owner.go
		}
		if err := s.putChange(t, reinv1.RunStatus_RUN_STATUS_UNSPECIFIED, st, head); err != nil { // 2
			return runstate.State{}, false, fmt.Errorf("%s: %w", what, err)
		}
		t.cmp(absent(s.keys.deleted(st.RunID)))
		t.orElse(s.keys.deleted(st.RunID)) // 3
		putBlobs(t, s.keys, st.RunID, blobs)
		hooks, err := s.putOutbox(ctx, t, &runstate.State{}, &st, events)
		if err != nil {
			return runstate.State{}, false, fmt.Errorf("%s: %w", what, err)
		}
		hooksAt := -1
		if hooks {
			hooksAt = s.hooksElse(t, st.Tenant) // 4
		}
		resp, err := s.commit(ctx, what, t)
		if err != nil {
			s.head = cursorAt{}
			return runstate.State{}, false, err
		}
		if resp.Succeeded {
			s.head = cursorAt{known: true, cursor: head.cursor + 1, rev: resp.Header.Revision}
			s.remember(st.RunID, runAt{st: st, snapRev: resp.Header.Revision})
			return st, true, nil
		}
		if kv := kvOf(resp, 0); st.RequestID != "" && kv != nil {
			prev, err := s.load(ctx, string(kv.Value))
			if err != nil {
				return runstate.State{}, false, fmt.Errorf("%s: request %q names run %s: %w", what, st.RequestID, kv.Value, err)
			}
			return prev, false, nil
		}
		if kvOf(resp, 1) != nil {
			return runstate.State{}, false, errRunExists
		}
		if kvOf(resp, 3) != nil {
			return runstate.State{}, false, fmt.Errorf("%s: %w: a run with that ID was deleted, and a deleted run's ID is not used again", what, store.ErrExists)
		}
		if hooksAt >= 0 {
			s.hooks.seen(st.Tenant, kvOf(resp, hooksAt))
		}
		// Only the change cursor or the tenant's webhooks moved (another
		// server's change): again.
		if s.head, err = decodeHead(kvOf(resp, 2)); err != nil {
			return runstate.State{}, false, err
		}
	}
	return runstate.State{}, false, contention(what)
}

// Append implements store.Store.
func (s *Store) Append(ctx context.Context, runID string, expected uint64, events []*reinv1.Event, opts ...store.AppendOption) (runstate.State, error) {
	if len(events) == 0 {
		return s.Load(ctx, runID)
	}
	o := store.Options(opts)
	what := "append to run " + runID
	if err := store.CheckBlobs(o.Blobs); err != nil {
		return runstate.State{}, fmt.Errorf("%s: %w", what, err)
	}
	if err := s.checkBlobSizes(what, o.Blobs); err != nil {
		return runstate.State{}, err
	}
	encoded, err := sealEvents(what, events)
	if err != nil {
		return runstate.State{}, err
	}
	if err := s.enter("write run " + runID); err != nil {
		return runstate.State{}, err
	}
	defer s.mu.RUnlock()
	if err := ctx.Err(); err != nil {
		return runstate.State{}, err
	}
	blobs, err := s.missingBlobs(ctx, what, runID, o.Blobs)
	if err != nil {
		return runstate.State{}, err
	}
	// The state Append returns holds the run's contract: a run cached
	// without it is read, contract and all.
	cur, ok := s.cached(runID)
	fresh := !ok || cur.st.Contract == nil // read from etcd for this call, not taken from the cache
	if fresh {
		if cur, err = s.readRun(ctx, runID); err != nil {
			return runstate.State{}, err
		}
	}
	for range maxAttempts {
		// Checked on the cached run first; a refusal is only given on what
		// etcd holds now.
		fenced := o.Acquire == "" && o.Epoch != 0 && o.Epoch != cur.epoch
		// A run cached as ended may have been archived by another server
		// since: read again before the fold refuses it.
		if (fenced || cur.st.Version != expected || runstate.Terminal(cur.st.Status)) && !fresh {
			if cur, err = s.readRun(ctx, runID); err != nil {
				return runstate.State{}, err
			}
			fresh = true
			continue
		}
		if cur.st.Archive != nil {
			return runstate.State{}, fmt.Errorf("%s: %w: an archived run takes no events", what, store.ErrArchived)
		}
		if fenced {
			return runstate.State{}, fmt.Errorf("%s with lease epoch %d: the run's owner is now at epoch %d: %w", what, o.Epoch, cur.epoch, store.ErrFenced)
		}
		if cur.st.Version != expected {
			return runstate.State{}, fmt.Errorf("%s at version %d: the run is at version %d: %w; reload the run and retry", what, expected, cur.st.Version, store.ErrConflict)
		}
		next, err := runstate.ApplyAll(cur.st, events)
		if err != nil {
			return runstate.State{}, fmt.Errorf("%s: %w", what, err)
		}
		if err := s.mayOwn(what, cur, next.Status, o); err != nil {
			if !fresh {
				if cur, err = s.readRun(ctx, runID); err != nil {
					return runstate.State{}, err
				}
				fresh = true
				continue
			}
			return runstate.State{}, err
		}
		done, err := s.appendOnce(ctx, what, &cur, next, events, encoded, blobs, o)
		if err != nil {
			s.forget(runID)
			return runstate.State{}, err
		}
		if done {
			return next, nil
		}
		fresh = true
	}
	return runstate.State{}, contention(what)
}

// appendOnce sends one Txn of an append validated on *cur: its events
// (encoded), blobs and webhook deliveries (outbox.go). It reports done
// when the append was stored; otherwise *cur is what etcd holds now.
func (s *Store) appendOnce(ctx context.Context, what string, cur *runAt, next runstate.State, events []*reinv1.Event, encoded [][]byte, blobs map[string][]byte, o store.AppendOptions) (bool, error) {
	runID := next.RunID
	snap, err := seal.Seal(next.Proto(false))
	if err != nil {
		return false, fmt.Errorf("%s: encode its snapshot: %w", what, err)
	}
	t := &txn{}
	t.cmp(modIs(s.keys.run(runID), cur.snapRev))
	if o.Epoch != 0 || o.Acquire != "" {
		t.cmp(modIs(s.keys.lease(runID), cur.leaseRev))
	}
	s.fenceOwner(t, runID, *cur, next.Status, o)
	s.indexOwner(t, runID, *cur, next.Status, o)
	first := cur.st.Version + 1
	for i, data := range encoded {
		t.put(s.keys.event(runID, first+uint64(i)), data)
	}
	t.put(s.keys.run(runID), snap)
	epoch, owner := cur.epoch, cur.owner
	if o.Acquire != "" {
		epoch, owner = epoch+1, o.Acquire
		t.put(s.keys.lease(runID), encodeLease(epoch, owner))
	}
	putBlobs(t, s.keys, runID, blobs)
	hooks, err := s.putOutbox(ctx, t, &cur.st, &next, events)
	if err != nil {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	changed := next.Status != cur.st.Status
	stored := func(rev int64) {
		leaseRev, own := cur.leaseRev, cur.own
		if o.Acquire != "" {
			leaseRev = rev
			if o.Acquired != nil {
				*o.Acquired = epoch
			}
			if lease := s.replicaLease.Load(); lease != 0 {
				own = ownerAt{name: o.Acquire, lease: lease, rev: rev}
			}
		}
		if runstate.Terminal(next.Status) {
			own = ownerAt{}
		}
		s.remember(runID, runAt{st: next, snapRev: rev, epoch: epoch, owner: owner, leaseRev: leaseRev, own: own})
	}
	if err := s.fits(what, t); err != nil {
		return false, err
	}
	if !changed {
		b := s.batch(ctx, what, runID, t)
		if b.err != nil {
			return false, b.err
		}
		if b.stored {
			stored(b.rev)
			return true, nil
		}
		// Not stored with others: alone, where a failed compare tells why.
	}
	// Read when a compare fails (a batch has no Else: built only now).
	t.orElse(s.keys.run(runID))   // 0
	t.orElse(s.keys.lease(runID)) // 1
	t.orElse(s.keys.owner(runID)) // 2
	var head cursorAt
	if changed {
		s.changesMu.Lock()
		defer s.changesMu.Unlock()
		if head, err = s.headLocked(ctx); err != nil {
			return false, err
		}
		if err := s.putChange(t, cur.st.Status, next, head); err != nil { // 3
			return false, fmt.Errorf("%s: %w", what, err)
		}
	}
	hooksAt := -1
	if hooks {
		hooksAt = s.hooksElse(t, next.Tenant)
	}
	resp, err := s.commit(ctx, what, t)
	if err != nil {
		if changed {
			s.head = cursorAt{}
		}
		return false, err
	}
	if resp.Succeeded {
		rev := resp.Header.Revision
		if changed {
			s.head = cursorAt{known: true, cursor: head.cursor + 1, rev: rev}
		}
		stored(rev)
		return true, nil
	}
	if changed {
		if s.head, err = decodeHead(kvOf(resp, 3)); err != nil {
			return false, err
		}
	}
	if hooksAt >= 0 {
		s.hooks.seen(next.Tenant, kvOf(resp, hooksAt))
	}
	now, err := s.decodeRun(ctx, runID, kvOf(resp, 0), kvOf(resp, 1), kvOf(resp, 2), nil)
	if err != nil {
		return false, err
	}
	now.st.Contract = cur.st.Contract // a run's contract never changes
	s.remember(runID, now)
	*cur = now
	return false, nil
}

// Acquire implements store.Store.
func (s *Store) Acquire(ctx context.Context, runID, owner string) (uint64, error) {
	what := "acquire run " + runID
	if err := s.enter("write run " + runID); err != nil {
		return 0, err
	}
	defer s.mu.RUnlock()
	cur, ok := s.cached(runID)
	if !ok {
		var err error
		if cur, err = s.readRun(ctx, runID); err != nil {
			return 0, err
		}
	}
	o := store.AppendOptions{Acquire: owner}
	fresh := !ok
	for range maxAttempts {
		if err := s.mayTake(what, cur, o); err != nil {
			if fresh {
				return 0, err
			}
			if cur, err = s.readRun(ctx, runID); err != nil {
				return 0, err
			}
			fresh = true
			continue
		}
		t := &txn{}
		t.cmp(present(s.keys.run(runID)))
		t.cmp(modIs(s.keys.lease(runID), cur.leaseRev))
		t.orElse(s.keys.run(runID))
		t.orElse(s.keys.lease(runID))
		t.orElse(s.keys.owner(runID))
		epoch := cur.epoch + 1
		t.put(s.keys.lease(runID), encodeLease(epoch, owner))
		s.fenceOwner(t, runID, cur, cur.st.Status, o)
		s.indexOwner(t, runID, cur, cur.st.Status, o)
		resp, err := s.commit(ctx, what, t)
		if err != nil {
			s.forget(runID)
			return 0, err
		}
		if resp.Succeeded {
			cur.epoch, cur.owner, cur.leaseRev = epoch, owner, resp.Header.Revision
			if lease := s.replicaLease.Load(); lease != 0 && !runstate.Terminal(cur.st.Status) {
				cur.own = ownerAt{name: owner, lease: lease, rev: resp.Header.Revision}
			}
			s.remember(runID, cur)
			return epoch, nil
		}
		fresh = true
		if cur, err = s.decodeRun(ctx, runID, kvOf(resp, 0), kvOf(resp, 1), kvOf(resp, 2), nil); err != nil {
			s.forget(runID)
			return 0, err
		}
		s.remember(runID, cur)
	}
	return 0, contention(what)
}

// headLocked is the change cursor, read from etcd unless this Store knows
// it. s.changesMu must be held.
func (s *Store) headLocked(ctx context.Context) (cursorAt, error) {
	if s.head.known {
		return s.head, nil
	}
	rctx, cancel := s.readCtx(ctx)
	defer cancel()
	resp, err := s.cli.Get(rctx, s.keys.head())
	if err != nil {
		return cursorAt{}, s.etcdErr(ctx, "read the change cursor", err)
	}
	kv := resp.Kvs
	if len(kv) == 0 {
		s.head = cursorAt{known: true}
	} else if s.head, err = decodeHead(kv[0]); err != nil {
		return cursorAt{}, err
	}
	return s.head, nil
}

// putChange adds to t the moves of a run from status prev to next.Status:
// the status index, the change record under the next cursor and the cursor,
// compared at head. Its Else read of the cursor is the third.
func (s *Store) putChange(t *txn, prev reinv1.RunStatus, next runstate.State, head cursorAt) error {
	cursor := head.cursor + 1
	ch, err := proto.Marshal(&reinv1.RunChange{
		Cursor: cursor, RunId: next.RunID, Previous: prev, Status: next.Status, Version: next.Version,
		Reason: next.StatusReason, ChangedAt: timestamppb.New(next.UpdatedAt),
	})
	if err != nil {
		return fmt.Errorf("encode its status change: %w", err)
	}
	t.cmp(modIs(s.keys.head(), head.rev))
	t.orElse(s.keys.head())
	if prev != reinv1.RunStatus_RUN_STATUS_UNSPECIFIED {
		t.del(s.keys.status(prev, next.RunID))
	}
	t.put(s.keys.status(next.Status, next.RunID), nil)
	if runstate.Terminal(next.Status) && !runstate.Terminal(prev) {
		s.putEnded(t, next) // the ended index (lifecycle.go)
	}
	v := make([]byte, 0, len(next.Tenant)+1+len(ch))
	v = append(append(append(v, next.Tenant...), 0), ch...)
	t.put(s.keys.change(cursor), v)
	t.put(s.keys.head(), []byte(strconv.FormatUint(cursor, 10)))
	return nil
}

func sealEvents(what string, events []*reinv1.Event) ([][]byte, error) {
	encoded := make([][]byte, len(events))
	for i, ev := range events {
		data, err := seal.Seal(ev)
		if err != nil {
			return nil, fmt.Errorf("%s: encode event %d: %w", what, ev.GetSequence(), err)
		}
		encoded[i] = data
	}
	return encoded, nil
}

func contention(what string) error {
	return fmt.Errorf("%s: %w: gave up after %d attempts while other servers kept moving the run's lease or the change cursor; retry", what, store.ErrConflict, maxAttempts)
}
