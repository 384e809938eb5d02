package etcd

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/store/seal"
)

// The lifecycle's keys (store.Lifecycle), under the prefix P (doc.go):
//
//	P ended/<end>/<run id>  flag (1 byte: 1 archived) + tenant + NUL +
//	                        parent run ID: the runs that ended, oldest first
//	                        (end: the run's UpdatedAt when it ended, Unix
//	                        nanoseconds as 16 hex digits), put by the Txn of
//	                        the append that ends the run (putChange); the
//	                        cursor of Ended is the key less P ended/
//	P meta/ended            "1": every run that ended is in the ended index
//	                        (backfillEnded, once, for a prefix from an older
//	                        rein; Open writes it with a new prefix's marker)
//	P meta/deletions        the sequence of the last deletion (decimal);
//	                        absent before the first one
//	P deletions/<newest>    a RunDeletion, sealed. newest is 2^64-1 less
//	                        the deletion's sequence, as 16 hex digits, so
//	                        that an ascending range (the only one etcd reads
//	                        without reading it whole) reads the newest
//	                        first; it is the cursor of Deletions
//	P deleted/<run id>      that newest: which record is the run's
//
// Archive and Delete are each one Txn, compared at the ModRevision of the
// run's snapshot as read, so that of two servers archiving (or deleting) a
// run at once one does and the other, reading again, finds it archived (or
// its record). A terminal run takes no events, so nothing but these two
// moves its snapshot. Delete also compares the deletion sequence, so that
// records are numbered in the order their Txns commit, across servers,
// whatever their clocks say.
//
// Both delete the run's blobs (P rblob/<run id>/, one range delete in
// their Txn): each run keeps its own copy of the blobs it brought
// (blob.go), so no other run loses one. A blob an older rein kept once for
// every run (P blob/<hash>) is not deleted by either: nothing records
// which runs brought it, and another may read it still; it stays until
// the prefix is dropped.

var _ store.Lifecycle = (*Store)(nil)

// backfillBatch is how many runs backfillEnded reads and indexes per Txn.
const backfillBatch = 32

// deletionsBatch is how many records Deletions reads per round trip past
// the first, when a tenant filter passes some over.
const deletionsBatch = 256

func (k keys) endedRuns() string     { return k.p + "ended/" }
func (k keys) endedMark() string     { return k.p + "meta/ended" }
func (k keys) deletions() string     { return k.p + "deletions/" }
func (k keys) deletionsHead() string { return k.p + "meta/deletions" }

func (k keys) ended(st runstate.State) string {
	return hex16(k.endedRuns(), uint64(st.UpdatedAt.UnixNano())) + "/" + st.RunID
}

func (k keys) deleted(id string) string { return k.p + "deleted/" + id }

func endedValue(st runstate.State) []byte {
	v := make([]byte, 1, 2+len(st.Tenant)+len(st.DelegatedBy.GetParentRunId()))
	if st.Archive != nil {
		v[0] = 1
	}
	v = append(append(v, st.Tenant...), 0)
	return append(v, st.DelegatedBy.GetParentRunId()...)
}

// putEnded adds to t the ended index's entry of st, a run that ends (or is
// archived) with t.
func (s *Store) putEnded(t *txn, st runstate.State) {
	t.put(s.keys.ended(st), endedValue(st))
}

// delPrefix deletes every key under prefix.
func (t *txn) delPrefix(prefix string) {
	t.ops = append(t.ops, &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{
		Key: []byte(prefix), RangeEnd: []byte(clientv3.GetPrefixRangeEnd(prefix)),
	}}})
	t.bytes += 2*len(prefix) + opOverhead
}

// splitCursor is the end time and run ID of a cursor of the ended index
// ("<16 hex digits>/<run id>"), or false.
func splitCursor(c string) (uint64, string, bool) {
	if len(c) < 18 || c[16] != '/' {
		return 0, "", false
	}
	n, err := strconv.ParseUint(c[:16], 16, 64)
	if err != nil || checkRunID(c[17:]) != nil {
		return 0, "", false
	}
	return n, c[17:], true
}

// Ended implements store.Lifecycle: one range of the ended index.
func (s *Store) Ended(ctx context.Context, after string, limit int) ([]store.Ended, error) {
	if err := s.enter("read store"); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	if limit <= 0 {
		return nil, nil
	}
	idx := s.keys.endedRuns()
	start := idx
	if after != "" {
		start = idx + after + "\x00" // the first key after after's
	}
	resp, err := s.read(ctx, "read the ended runs",
		clientv3.OpGet(start, clientv3.WithRange(clientv3.GetPrefixRangeEnd(idx)), clientv3.WithLimit(int64(limit))))
	if err != nil {
		return nil, err
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	out := make([]store.Ended, 0, len(kvs))
	for _, kv := range kvs {
		cursor := strings.TrimPrefix(string(kv.Key), idx)
		end, id, ok := splitCursor(cursor)
		if !ok || len(kv.Value) < 1 {
			return nil, damaged(fmt.Sprintf("ended index key %q", kv.Key), "it does not decode")
		}
		tenant, parent, _ := bytes.Cut(kv.Value[1:], []byte{0})
		out = append(out, store.Ended{
			Cursor:   cursor,
			RunID:    id,
			Tenant:   string(tenant),
			Parent:   string(parent),
			EndedAt:  time.Unix(0, int64(end)),
			Archived: kv.Value[0] == 1,
		})
	}
	return out, nil
}

// Archive implements store.Lifecycle. One Txn, compared at the snapshot's
// ModRevision as read, deletes the run's log, blobs, lease and owner key,
// puts its stub's snapshot and its labels-only contract, and marks its
// entry in the ended index archived.
func (s *Store) Archive(ctx context.Context, runID string, version uint64, rec *reinv1.RunArchive) (runstate.State, error) {
	what := "archive run " + runID
	if rec == nil {
		return runstate.State{}, fmt.Errorf("%s: no archive record: a run is archived only once its export is stored", what)
	}
	if err := checkRunID(runID); err != nil {
		return runstate.State{}, fmt.Errorf("%s: %w", what, err)
	}
	if err := s.enter("write run " + runID); err != nil {
		return runstate.State{}, err
	}
	defer s.mu.RUnlock()
	for range maxAttempts {
		resp, err := s.read(ctx, "read run "+runID, clientv3.OpGet(s.keys.run(runID)), clientv3.OpGet(s.keys.contract(runID)))
		if err != nil {
			return runstate.State{}, err
		}
		snap := kvOf(resp, 0)
		st, err := decodeState(runID, snap, kvOf(resp, 1))
		if err != nil {
			return runstate.State{}, err
		}
		switch {
		case st.Archive != nil:
			return runstate.State{}, fmt.Errorf("%s: %w under %s", what, store.ErrArchived, st.Archive.GetKey())
		case !runstate.Terminal(st.Status):
			return runstate.State{}, fmt.Errorf("%s: it is %s: %w", what, runstate.StatusName(st.Status), store.ErrLive)
		case st.Version != version:
			return runstate.State{}, fmt.Errorf("%s at version %d: the run is at version %d: %w", what, version, st.Version, store.ErrConflict)
		}
		stub := store.Stub(st, rec)
		stubSnap, err := seal.Seal(stub.Proto(false))
		if err != nil {
			return runstate.State{}, fmt.Errorf("%s: encode its stub: %w", what, err)
		}
		contract := stub.Contract
		if contract == nil {
			contract = &reinv1.TaskContract{}
		}
		stubContract, err := seal.Seal(contract)
		if err != nil {
			return runstate.State{}, fmt.Errorf("%s: encode its contract: %w", what, err)
		}
		t := &txn{}
		t.cmp(modIs(s.keys.run(runID), snap.ModRevision))
		t.delPrefix(s.keys.events(runID))
		t.delPrefix(s.keys.runBlobs(runID)) // not a legacy shared blob (the top of this file)
		t.del(s.keys.lease(runID))
		t.del(s.keys.owner(runID))
		t.put(s.keys.run(runID), stubSnap)
		t.put(s.keys.contract(runID), stubContract)
		s.putEnded(t, stub)
		cresp, err := s.commit(ctx, what, t)
		s.forget(runID)
		if err != nil {
			return runstate.State{}, err
		}
		if cresp.Succeeded {
			return stub, nil
		}
		// The snapshot moved (archived or deleted by another server): read
		// it again to say which.
	}
	return runstate.State{}, contention(what)
}

// Delete implements store.Lifecycle. One Txn, compared at the snapshot's
// ModRevision as read, on the run having no deletion record and at the
// deletion sequence as read, deletes every key of the run (erase) and puts
// its record under the next sequence.
func (s *Store) Delete(ctx context.Context, d *reinv1.RunDeletion) (*reinv1.RunDeletion, bool, error) {
	runID := d.GetRunId()
	what := "delete run " + runID
	if err := checkRunID(runID); err != nil {
		return nil, false, fmt.Errorf("%s: %w", what, err)
	}
	if err := s.enter("write run " + runID); err != nil {
		return nil, false, err
	}
	defer s.mu.RUnlock()
	for range maxAttempts {
		resp, err := s.read(ctx, "read run "+runID,
			clientv3.OpGet(s.keys.deleted(runID)), clientv3.OpGet(s.keys.run(runID)), clientv3.OpGet(s.keys.deletionsHead()))
		if err != nil {
			return nil, false, err
		}
		if kv := kvOf(resp, 0); kv != nil {
			rec, err := s.deletionAt(ctx, runID, string(kv.Value))
			return rec, false, err
		}
		snap := kvOf(resp, 1)
		if snap == nil {
			_, err := s.load(ctx, runID) // not found, or damaged if its contract is there
			if err == nil {
				err = notFound(runID)
			}
			return nil, false, err
		}
		st, err := decodeState(runID, snap, nil)
		if err != nil {
			return nil, false, err
		}
		if !runstate.Terminal(st.Status) {
			return nil, false, fmt.Errorf("%s: it is %s: %w", what, runstate.StatusName(st.Status), store.ErrLive)
		}
		head := kvOf(resp, 2)
		var seq uint64
		if head != nil {
			if seq, err = strconv.ParseUint(string(head.Value), 10, 64); err != nil {
				return nil, false, damaged("the deletion sequence", "%q is not a number", head.Value)
			}
		}
		seq++
		r := proto.Clone(d).(*reinv1.RunDeletion)
		r.Tenant, r.Status, r.Archived = st.Tenant, st.Status, st.Archive != nil
		cursor := hex16("", math.MaxUint64-seq)
		v, err := seal.Seal(r)
		if err != nil {
			return nil, false, fmt.Errorf("%s: encode its record: %w", what, err)
		}
		t := &txn{}
		t.cmp(modIs(s.keys.run(runID), snap.ModRevision))
		t.cmp(absent(s.keys.deleted(runID)))
		var headRev int64
		if head != nil {
			headRev = head.ModRevision
		}
		t.cmp(modIs(s.keys.deletionsHead(), headRev))
		if err := s.erase(ctx, t, st); err != nil {
			return nil, false, fmt.Errorf("%s: %w", what, err)
		}
		hooksAt := s.hooksElse(t, st.Tenant)
		t.put(s.keys.deletions()+cursor, v)
		t.put(s.keys.deleted(runID), []byte(cursor))
		t.put(s.keys.deletionsHead(), []byte(strconv.FormatUint(seq, 10)))
		cresp, err := s.commit(ctx, what, t)
		s.forget(runID)
		if err != nil {
			return nil, false, err
		}
		if cresp.Succeeded {
			return r, true, nil
		}
		s.hooks.seen(st.Tenant, kvOf(cresp, hooksAt))
		// Deleted or archived by another server meanwhile, another run
		// deleted, or the tenant's subscriptions changed: read it again.
	}
	return nil, false, fmt.Errorf("%s: %w: gave up after %d attempts while other deletions kept moving the deletion sequence; retry", what, store.ErrConflict, maxAttempts)
}

// erase adds to t the deletion of every key of run st: its log, blobs,
// snapshot, contract, lease and owner key, its entries in the listing,
// status and ended indexes, its request key when that still names it
// (a nested Txn comparing the value), and its webhook deliveries, pending
// or failed, in every subscription of its tenant (eraseOutbox). Its status
// changes stay (P change/): they hold its ID, tenant and statuses, no
// content, and WatchRuns resumes through them. A legacy shared blob it
// brought stays (see the top of this file).
func (s *Store) erase(ctx context.Context, t *txn, st runstate.State) error {
	id := st.RunID
	if err := s.eraseOutbox(ctx, t, st.Tenant, id); err != nil {
		return err
	}
	t.delPrefix(s.keys.events(id))
	t.delPrefix(s.keys.runBlobs(id)) // not a legacy shared blob
	t.del(s.keys.run(id))
	t.del(s.keys.contract(id))
	t.del(s.keys.lease(id))
	t.del(s.keys.owner(id))
	t.del(s.keys.newest(id))
	t.del(s.keys.status(st.Status, id))
	t.del(s.keys.ended(st))
	if st.RequestID != "" {
		rk := s.keys.request(st.Tenant, st.RequestID)
		names := &pb.Compare{Key: []byte(rk), Target: pb.Compare_VALUE, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Value{Value: []byte(id)}}
		del := &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(rk)}}}
		t.ops = append(t.ops, txnOp([]*pb.Compare{names}, []*pb.RequestOp{del}))
		t.bytes += 2*len(rk) + len(id) + 3*opOverhead
	}
	return nil
}

// Deletion implements store.Lifecycle.
func (s *Store) Deletion(ctx context.Context, runID string) (*reinv1.RunDeletion, error) {
	if err := s.enter("read store"); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	resp, err := s.read(ctx, "read the deletion of run "+runID, clientv3.OpGet(s.keys.deleted(runID)))
	if err != nil {
		return nil, err
	}
	kv := kvOf(resp, 0)
	if kv == nil {
		return nil, fmt.Errorf("deletion of run %q: %w", runID, store.ErrNotFound)
	}
	return s.deletionAt(ctx, runID, string(kv.Value))
}

// deletionAt reads run runID's deletion record, whose cursor P deleted/
// holds.
func (s *Store) deletionAt(ctx context.Context, runID, cursor string) (*reinv1.RunDeletion, error) {
	what := "the deletion of run " + runID
	if !deletionCursor(cursor) {
		return nil, damaged(what, "its key %q names no record", cursor)
	}
	resp, err := s.read(ctx, "read "+what, clientv3.OpGet(s.keys.deletions()+cursor))
	if err != nil {
		return nil, err
	}
	kv := kvOf(resp, 0)
	if kv == nil {
		return nil, damaged(what, "its record is missing")
	}
	r := &reinv1.RunDeletion{}
	if err := unseal(kv.Value, r, what); err != nil {
		return nil, err
	}
	return r, nil
}

// Deletions implements store.Lifecycle: ranges of P deletions/ from the
// cursor, newest first, until the page and one more record of the tenant
// are read or the records end.
func (s *Store) Deletions(ctx context.Context, tenant, after string, limit int) ([]*reinv1.RunDeletion, string, error) {
	if after != "" {
		if !deletionCursor(after) {
			return nil, "", fmt.Errorf("list deletions: page token %q: %w", after, store.ErrInvalidCursor)
		}
	}
	if err := s.enter("read store"); err != nil {
		return nil, "", err
	}
	defer s.mu.RUnlock()
	if limit <= 0 {
		return nil, "", nil
	}
	idx := s.keys.deletions()
	start := idx
	if after != "" {
		start = idx + after + "\x00" // the first key after after's
	}
	var out []*reinv1.RunDeletion
	var last string
	batch := limit + 1
	for {
		resp, err := s.read(ctx, "list deletions",
			clientv3.OpGet(start, clientv3.WithRange(clientv3.GetPrefixRangeEnd(idx)), clientv3.WithLimit(int64(batch))))
		if err != nil {
			return nil, "", err
		}
		r := resp.Responses[0].GetResponseRange()
		for _, kv := range r.GetKvs() {
			cursor := strings.TrimPrefix(string(kv.Key), idx)
			rec := &reinv1.RunDeletion{}
			if err := unseal(kv.Value, rec, fmt.Sprintf("deletion record %s", cursor)); err != nil {
				return nil, "", err
			}
			if tenant != "" && rec.GetTenant() != tenant {
				continue
			}
			if len(out) == limit {
				return out, last, nil // one more exists: the page is not the last
			}
			out = append(out, rec)
			last = cursor
		}
		kvs := r.GetKvs()
		if !r.GetMore() || len(kvs) == 0 {
			return out, "", nil
		}
		start = string(kvs[len(kvs)-1].Key) + "\x00"
		batch = deletionsBatch
	}
}

// deletionCursor reports whether c is a cursor of the deletions: 16 hex
// digits.
func deletionCursor(c string) bool {
	if len(c) != 16 {
		return false
	}
	_, err := strconv.ParseUint(c, 16, 64)
	return err == nil
}

// logGone is the error for a run whose snapshot is stored but not its
// first event: ErrArchived naming the archive's key when the snapshot is
// an archived run's stub, else damage. A run deleted meanwhile is not
// found.
func (s *Store) logGone(ctx context.Context, runID string) error {
	st, err := s.load(ctx, runID)
	if err != nil {
		return err
	}
	if st.Archive != nil {
		return fmt.Errorf("run %s: %w under %s", runID, store.ErrArchived, st.Archive.GetKey())
	}
	return damaged("run "+runID, "its snapshot is stored but its first event is not")
}

// backfillEnded lists in the ended index every run that ended before the
// index existed (a prefix an older rein wrote), then stores P meta/ended;
// with that key stored it reads nothing more. Open calls it. Each run's
// entry is put in a nested Txn compared at the snapshot as read and on the
// entry being absent, so that a run archived or deleted meanwhile, or
// indexed already (by another server's backfill), is left as it is; run
// again after a failure, it redoes only what is missing.
func (s *Store) backfillEnded(ctx context.Context) error {
	what := "open the rein store: list the runs that ended in the ended index"
	resp, err := s.read(ctx, what, clientv3.OpGet(s.keys.endedMark(), clientv3.WithCountOnly()))
	if err != nil {
		return err
	}
	if resp.Responses[0].GetResponseRange().GetCount() > 0 {
		return nil
	}
	for _, status := range terminalStatuses() {
		idx := s.keys.statuses(status)
		start := idx
		for {
			resp, err := s.read(ctx, what,
				clientv3.OpGet(start, clientv3.WithRange(clientv3.GetPrefixRangeEnd(idx)), clientv3.WithKeysOnly(), clientv3.WithLimit(backfillBatch)))
			if err != nil {
				return err
			}
			r := resp.Responses[0].GetResponseRange()
			var ids []string
			for _, kv := range r.GetKvs() {
				if id, ok := uninvert(strings.TrimPrefix(string(kv.Key), idx)); ok {
					ids = append(ids, id) // else damage, which List reports
				}
			}
			if err := s.indexEnded(ctx, what, ids); err != nil {
				return err
			}
			kvs := r.GetKvs()
			if !r.GetMore() || len(kvs) == 0 {
				break
			}
			start = string(kvs[len(kvs)-1].Key) + "\x00"
		}
	}
	t := &txn{}
	t.put(s.keys.endedMark(), []byte("1"))
	_, err = s.commit(ctx, what, t)
	return err
}

// indexEnded puts the ended index's entry of each of runs that ended and
// has none, in one Txn.
func (s *Store) indexEnded(ctx context.Context, what string, runs []string) error {
	if len(runs) == 0 {
		return nil
	}
	ops := make([]clientv3.Op, len(runs))
	for i, id := range runs {
		ops[i] = clientv3.OpGet(s.keys.run(id))
	}
	resp, err := s.read(ctx, what, ops...)
	if err != nil {
		return err
	}
	t := &txn{}
	for i, id := range runs {
		snap := kvOf(resp, i)
		if snap == nil {
			continue // deleted since: nothing to index
		}
		st, err := decodeState(id, snap, nil)
		if err != nil || !runstate.Terminal(st.Status) {
			continue // damage, which List reports; or a run the index lists stale
		}
		key, v := s.keys.ended(st), endedValue(st)
		t.ops = append(t.ops, txnOp(
			[]*pb.Compare{modIs(s.keys.run(id), snap.ModRevision), absent(key)},
			[]*pb.RequestOp{putOp(key, v, 0)}))
		t.bytes += 3*len(key) + len(v) + 3*opOverhead
	}
	if len(t.ops) == 0 {
		return nil
	}
	_, err = s.commit(ctx, what, t)
	return err
}

// terminalStatuses are the statuses runstate.Terminal holds, in order.
func terminalStatuses() []reinv1.RunStatus {
	var out []reinv1.RunStatus
	for n := range reinv1.RunStatus_name {
		if st := reinv1.RunStatus(n); runstate.Terminal(st) {
			out = append(out, st)
		}
	}
	slices.Sort(out)
	return out
}
