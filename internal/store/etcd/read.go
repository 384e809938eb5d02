package etcd

import (
	"bytes"
	"context"
	"fmt"
	"strconv"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
)

// Load implements store.Store.
func (s *Store) Load(ctx context.Context, runID string) (runstate.State, error) {
	if err := s.enter("read store"); err != nil {
		return runstate.State{}, err
	}
	defer s.mu.RUnlock()
	return s.load(ctx, runID)
}

// load reads a run's snapshot and contract in one read.
func (s *Store) load(ctx context.Context, runID string) (runstate.State, error) {
	resp, err := s.read(ctx, "read run "+runID, clientv3.OpGet(s.keys.run(runID)), clientv3.OpGet(s.keys.contract(runID)))
	if err != nil {
		return runstate.State{}, err
	}
	return decodeState(runID, kvOf(resp, 0), kvOf(resp, 1))
}

// decodeState decodes a run from its snapshot and contract.
func decodeState(runID string, snap, contract *mvccpb.KeyValue) (runstate.State, error) {
	if snap == nil {
		if contract != nil {
			return runstate.State{}, damaged("run "+runID, "its contract is stored but its snapshot is not")
		}
		return runstate.State{}, notFound(runID)
	}
	run := &reinv1.Run{}
	if err := unseal(snap.Value, run, "run "+runID+" snapshot"); err != nil {
		return runstate.State{}, err
	}
	if run.GetRunId() != runID {
		return runstate.State{}, damaged("run "+runID, "its snapshot is run %q's", run.GetRunId())
	}
	var c *reinv1.TaskContract
	if contract != nil {
		c = &reinv1.TaskContract{}
		if err := unseal(contract.Value, c, "run "+runID+" contract"); err != nil {
			return runstate.State{}, err
		}
	}
	return runstate.FromProto(run, c), nil
}

// readRun reads what an append is validated on: the snapshot, the lease
// and the owner key, and the contract, which the state an append returns
// holds, in one read.
func (s *Store) readRun(ctx context.Context, runID string) (runAt, error) {
	resp, err := s.read(ctx, "read run "+runID, clientv3.OpGet(s.keys.run(runID)), clientv3.OpGet(s.keys.lease(runID)), clientv3.OpGet(s.keys.owner(runID)),
		clientv3.OpGet(s.keys.contract(runID)))
	if err != nil {
		return runAt{}, err
	}
	r, err := s.decodeRun(ctx, runID, kvOf(resp, 0), kvOf(resp, 1), kvOf(resp, 2), kvOf(resp, 3))
	if err == nil {
		s.remember(runID, r)
	}
	return r, err
}

// decodeRun is the run whose snapshot, lease and owner key are these, with
// its contract when contract is not nil.
func (s *Store) decodeRun(ctx context.Context, runID string, snap, lease, owner, contract *mvccpb.KeyValue) (runAt, error) {
	if snap == nil {
		// Not found, unless its contract is there.
		_, err := s.load(ctx, runID)
		if err == nil {
			err = notFound(runID)
		}
		return runAt{}, err
	}
	st, err := decodeState(runID, snap, contract)
	if err != nil {
		return runAt{}, err
	}
	epoch, name, leaseRev := decodeLease(lease)
	return runAt{st: st, snapRev: snap.ModRevision, epoch: epoch, owner: name, leaseRev: leaseRev, own: decodeOwner(owner)}, nil
}

// read runs ops in one read Txn (one revision), bounded by the timeout.
func (s *Store) read(ctx context.Context, what string, ops ...clientv3.Op) (*clientv3.TxnResponse, error) {
	rctx, cancel := s.readCtx(ctx)
	defer cancel()
	resp, err := s.cli.Txn(rctx).Then(ops...).Commit()
	if err != nil {
		return nil, s.etcdErr(ctx, what, err)
	}
	return resp, nil
}

// Events implements store.Store.
func (s *Store) Events(ctx context.Context, runID string, after uint64, limit int) ([]*reinv1.Event, error) {
	if err := s.enter("read store"); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	if limit <= 0 {
		return nil, nil
	}
	prefix := s.keys.events(runID)
	resp, err := s.read(ctx, fmt.Sprintf("read run %s events from %d", runID, after+1),
		clientv3.OpGet(s.keys.run(runID), clientv3.WithKeysOnly()),
		clientv3.OpGet(s.keys.event(runID, after+1), clientv3.WithRange(clientv3.GetPrefixRangeEnd(prefix)), clientv3.WithLimit(int64(limit))),
		clientv3.OpGet(s.keys.event(runID, 1), clientv3.WithCountOnly()), // none: archived (lifecycle.go)
	)
	if err != nil {
		return nil, err
	}
	if kvOf(resp, 0) == nil {
		_, err := s.load(ctx, runID) // not found, or damaged if its contract is there
		if err == nil {
			err = notFound(runID)
		}
		return nil, err
	}
	if resp.Responses[2].GetResponseRange().GetCount() == 0 {
		return nil, s.logGone(ctx, runID)
	}
	kvs := resp.Responses[1].GetResponseRange().GetKvs()
	out := make([]*reinv1.Event, 0, len(kvs))
	want := after + 1
	for _, kv := range kvs {
		ev := &reinv1.Event{}
		if err := decodeEvent(runID, want, prefix, kv, ev); err != nil {
			return nil, err
		}
		out = append(out, ev)
		want++
	}
	return out, nil
}

// decodeEvent decodes the stored event kv, which must be the next in the
// run's log (want), into ev, checking its seal and that it is the event its
// key says.
func decodeEvent(runID string, want uint64, prefix string, kv *mvccpb.KeyValue, ev *reinv1.Event) error {
	seq, err := strconv.ParseUint(string(bytes.TrimPrefix(kv.Key, []byte(prefix))), 16, 64)
	if err != nil {
		return damaged(eventName(runID, want), "the next key in the run's log is %q, not a sequence", kv.Key)
	}
	if seq != want {
		return damaged(eventName(runID, want), "it is missing: the next stored event is %d", seq)
	}
	if err := unseal(kv.Value, ev, eventName(runID, seq)); err != nil {
		return err
	}
	if ev.GetSequence() != seq || ev.GetRunId() != runID {
		return damaged(eventName(runID, seq), "the stored value is run %q event %d", ev.GetRunId(), ev.GetSequence())
	}
	return nil
}

// Changes implements store.Store. The cursor is the one the change record's
// Txn compared and moved, so it orders commits across every server sharing
// the prefix: a watcher resumes from it gap-free on any of them.
func (s *Store) Changes(ctx context.Context, after uint64, limit int) ([]store.Change, uint64, error) {
	if err := s.enter("read store"); err != nil {
		return nil, 0, err
	}
	defer s.mu.RUnlock()
	if limit <= 0 {
		limit = 0
	}
	ops := []clientv3.Op{clientv3.OpGet(s.keys.head())}
	if limit > 0 {
		ops = append(ops, clientv3.OpGet(s.keys.change(after+1),
			clientv3.WithRange(clientv3.GetPrefixRangeEnd(s.keys.changes())), clientv3.WithLimit(int64(limit))))
	}
	resp, err := s.read(ctx, "read the status changes", ops...)
	if err != nil {
		return nil, 0, err
	}
	head, err := decodeHead(kvOf(resp, 0))
	if err != nil {
		return nil, 0, err
	}
	if limit == 0 {
		return nil, head.cursor, nil
	}
	kvs := resp.Responses[1].GetResponseRange().GetKvs()
	out := make([]store.Change, 0, len(kvs))
	for _, kv := range kvs {
		tenant, data, ok := bytes.Cut(kv.Value, []byte{0})
		ch := &reinv1.RunChange{}
		if !ok || proto.Unmarshal(data, ch) != nil {
			return nil, 0, damaged(fmt.Sprintf("status change %s", bytes.TrimPrefix(kv.Key, []byte(s.keys.changes()))), "it does not decode")
		}
		out = append(out, store.Change{Cursor: ch.GetCursor(), Tenant: string(tenant), Change: ch})
	}
	return out, head.cursor, nil
}
