package etcd

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
)

// Ownership across servers. A Store given an etcd lease (SetLease) is one
// replica of several sharing the prefix: besides the run's epoch (P
// lease/<id>), each run it takes gets P owner/<id>, naming the replica and
// attached to the replica's etcd lease, so that the key vanishes when the
// replica's lease ends (it died, or was cut off or paused past the TTL). The
// rules, all checked inside the write's Txn:
//
//   - A fenced append (WithEpoch) also needs the owner key attached to this
//     replica's lease (a LeaseValue compare): once the lease ends, nothing
//     the replica still tries to append is stored (store.ErrFenced), even
//     before another replica takes the run.
//   - Taking a run (Acquire, WithAcquire) bumps the epoch and puts the
//     owner key, compared at the revision read. It is refused with
//     store.ErrOwned while another replica's live lease holds a run that is
//     running and stays so: one replica drives a run at a time. A paused
//     run is driven by no one, so a replica applying a person's decision
//     takes it from a live owner (which is fenced); so does one whose
//     append ends the run (a cancel).
//   - The append that ends a run deletes its owner key.
//
// Without a lease (the default, one server on the prefix) none of this
// applies and the epoch alone fences, as in the bolt store.

// ownerAt is a run's owner key as read: the replica's name, the etcd
// lease it is attached to, and its ModRevision (0: absent).
type ownerAt struct {
	name  string
	lease int64
	rev   int64
}

func decodeOwner(kv *mvccpb.KeyValue) ownerAt {
	if kv == nil {
		return ownerAt{}
	}
	return ownerAt{name: string(kv.Value), lease: kv.Lease, rev: kv.ModRevision}
}

// SetLease makes this Store a replica whose runs are held under the etcd
// lease id (granted and kept alive by the caller), or, with 0, a single
// server again. A replica whose lease ended sets the new one it was granted.
func (s *Store) SetLease(id clientv3.LeaseID) { s.replicaLease.Store(int64(id)) }

// Lease is the etcd lease SetLease gave; 0 when there is none.
func (s *Store) Lease() clientv3.LeaseID { return clientv3.LeaseID(s.replicaLease.Load()) }

// NameHolder is the replica holding a name on the prefix, as its key
// P replica/<name> says.
type NameHolder struct {
	// Key is the name's key.
	Key string
	// Value is what the holder put there to say who it is.
	Value string
	// Lease is the etcd lease the key is attached to.
	Lease clientv3.LeaseID
	// Revision is the etcd revision the key was read at: a watch from the
	// next one sees every later change to it.
	Revision int64
}

// ClaimName makes this replica the holder of name on the prefix: in one
// Txn it puts P replica/<name> with value, attached to lease, if no key
// holds the name, and otherwise reads the key that does. It returns true
// when the name is claimed; false and the holder when another key holds it
// (nothing is written then). The key vanishes when lease ends, so a
// replica that died frees its name within its TTL.
func (s *Store) ClaimName(ctx context.Context, name, value string, lease clientv3.LeaseID) (NameHolder, bool, error) {
	if name == "" {
		return NameHolder{}, false, errors.New("claim a replica name: the name is empty")
	}
	key := s.keys.replica(name)
	what := fmt.Sprintf("claim the replica name %q (%s)", name, key)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.Timeout)
	defer cancel()
	resp, err := s.cli.Txn(wctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, value, clientv3.WithLease(lease))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return NameHolder{}, false, s.etcdErr(ctx, what, err)
	}
	if resp.Succeeded {
		return NameHolder{}, true, nil
	}
	h := NameHolder{Key: key, Revision: resp.Header.GetRevision()}
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
		h.Value, h.Lease = string(kvs[0].Value), clientv3.LeaseID(kvs[0].Lease)
	}
	return h, false, nil
}

// mayOwn returns the refusal, if any, of a write by this replica that
// moves the run from cur to next, with the append's options: a fenced
// append whose lease is gone, or a taking of a run another replica drives.
func (s *Store) mayOwn(what string, cur runAt, next reinv1.RunStatus, o store.AppendOptions) error {
	lease := s.replicaLease.Load()
	if lease == 0 {
		return nil
	}
	switch {
	case o.Acquire != "":
		if cur.own.lease == 0 || cur.own.lease == lease {
			return nil
		}
		if cur.st.Status == reinv1.RunStatus_RUN_STATUS_RUNNING && !runstate.Terminal(next) {
			return fmt.Errorf("%s: server %q drives it under a live lease: %w; it carries the run on, and should it stop, its lease ends within the TTL and another server takes the run",
				what, cur.own.name, store.ErrOwned)
		}
	case o.Epoch != 0:
		if cur.own.lease != lease {
			by := "no server holds it now"
			if cur.own.name != "" {
				by = fmt.Sprintf("server %q holds it now", cur.own.name)
			}
			return fmt.Errorf("%s: this server's lease on the run ended (%s): %w; this server stops driving it", what, by, store.ErrFenced)
		}
	}
	return nil
}

// mayTake is mayOwn for Acquire, which a replica calls to drive a run or
// carry one on: it is refused, too, a paused run another replica holds
// under a live lease, whose deadlines that replica keeps. (A person's
// decision takes a paused run with its append: WithAcquire, mayOwn.)
func (s *Store) mayTake(what string, cur runAt, o store.AppendOptions) error {
	if err := s.mayOwn(what, cur, cur.st.Status, o); err != nil {
		return err
	}
	if lease := s.replicaLease.Load(); lease != 0 && cur.own.lease != 0 && cur.own.lease != lease && !runstate.Terminal(cur.st.Status) {
		return fmt.Errorf("%s: server %q holds it under a live lease: %w; it keeps the run's deadlines, and should it stop, its lease ends within the TTL and another server takes the run",
			what, cur.own.name, store.ErrOwned)
	}
	return nil
}

// fenceOwner adds to t the compares and puts of mayOwn's rules for a write
// it allowed, with owner the replica taking the run (WithAcquire, Acquire).
func (s *Store) fenceOwner(t *txn, runID string, cur runAt, next reinv1.RunStatus, o store.AppendOptions) {
	lease := s.replicaLease.Load()
	if lease == 0 || (o.Acquire == "" && o.Epoch == 0) {
		return
	}
	key := s.keys.owner(runID)
	if o.Acquire != "" {
		t.cmp(modIs(key, cur.own.rev))
	} else {
		t.cmp(leasedBy(key, lease))
	}
	switch {
	case runstate.Terminal(next):
		t.del(key)
	case o.Acquire != "":
		t.putLeased(key, []byte(o.Acquire), clientv3.LeaseID(lease))
	}
}

// Finding the runs no live replica drives, at a cost of what is orphaned
// rather than what is live: two indexes, kept in the Txn of every write
// that moves a run's ownership (indexOwner), and the replicas' name keys.
//
//   - P unowned/<id> is put when a run is created and deleted when a
//     replica first takes it or it ends: a run whose server died right
//     after creating it is found there (Unowned).
//   - P held/<name>/<id> is put when the replica name takes the run, moved
//     when another takes it, and deleted when the run ends. It is not
//     leased: when a replica's lease ends its name key P replica/<name> is
//     deleted (WatchLeft), and the runs it drove are found under its name
//     (Held).

// indexOwner adds to t the moves of the ownership indexes of a write that
// takes run runID (o.Acquire) or moves it from cur to next.
func (s *Store) indexOwner(t *txn, runID string, cur runAt, next reinv1.RunStatus, o store.AppendOptions) {
	switch {
	case runstate.Terminal(next) && !runstate.Terminal(cur.st.Status):
		t.del(s.keys.unowned(runID))
		if cur.owner != "" {
			t.del(s.keys.held(cur.owner, runID))
		}
	case o.Acquire != "":
		if cur.owner == "" {
			t.del(s.keys.unowned(runID)) // taken for the first time
		}
		if s.replicaLease.Load() == 0 || cur.owner == o.Acquire {
			return
		}
		if cur.owner != "" {
			t.del(s.keys.held(cur.owner, runID))
		}
		t.put(s.keys.held(o.Acquire, runID), nil)
	}
}

// indexPage is how many keys one read of an ownership index returns.
const indexPage = 1000

// Unowned lists, in ID order after the run ID after, up to limit (0: a
// page of 1,000) of the live runs no replica has taken yet, whose index
// key was put at or before revision since (0: at any), and returns the
// revision read at. A look that passes the revision of the look before
// it sees only runs unowned for that long: not a run its server is about
// to take a moment after creating it.
func (s *Store) Unowned(ctx context.Context, since int64, after string, limit int) ([]string, int64, error) {
	return s.indexed(ctx, "list the runs no server took", s.keys.unowneds(), since, after, limit)
}

// Held lists, as Unowned does, the runs the replica named owner took last
// and that have not ended: those to take over once its lease ended.
func (s *Store) Held(ctx context.Context, owner, after string, limit int) ([]string, error) {
	ids, _, err := s.indexed(ctx, fmt.Sprintf("list the runs server %q drove", owner), s.keys.helds(owner), 0, after, limit)
	return ids, err
}

// HeldCount is how many runs the replica named owner holds, running or
// paused: those it hands over when it leaves.
func (s *Store) HeldCount(ctx context.Context, owner string) (int64, error) {
	rctx, cancel := s.readCtx(ctx)
	defer cancel()
	resp, err := s.cli.Get(rctx, s.keys.helds(owner), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, s.etcdErr(ctx, fmt.Sprintf("count the runs server %q holds", owner), err)
	}
	return resp.Count, nil
}

// indexed lists the run IDs under prefix after the ID after, keys only,
// of the keys put at or before revision since (0: any), and the revision
// read at.
func (s *Store) indexed(ctx context.Context, what, prefix string, since int64, after string, limit int) ([]string, int64, error) {
	if limit <= 0 {
		limit = indexPage
	}
	from := prefix
	if after != "" {
		from = prefix + after + "\x00"
	}
	rctx, cancel := s.readCtx(ctx)
	defer cancel()
	opts := []clientv3.OpOption{clientv3.WithRange(clientv3.GetPrefixRangeEnd(prefix)), clientv3.WithKeysOnly(), clientv3.WithLimit(int64(limit))}
	if since > 0 {
		opts = append(opts, clientv3.WithMaxCreateRev(since))
	}
	resp, err := s.cli.Get(rctx, from, opts...)
	if err != nil {
		return nil, 0, s.etcdErr(ctx, what, err)
	}
	ids := make([]string, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		ids = append(ids, string(kv.Key[len(prefix):]))
	}
	return ids, resp.Header.GetRevision(), nil
}

// WatchLeft calls left with the name of each replica whose name key is
// deleted (its lease ended: it left, died, or was cut off or paused past
// the TTL), so that the runs it held (Held) are taken over; missed is
// called as for FollowRun, so that the caller looks for orphaned runs
// itself. Nothing is sent for a run that ends or starts: a replica learns
// of other replicas' runs only when one of them leaves.
func (s *Store) WatchLeft(ctx context.Context, left func(name string), missed func()) {
	s.follow(ctx, s.keys.replicas(), []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithFilterPut()}, func(key string, _ []byte) {
		name, err := url.PathUnescape(key)
		if err != nil {
			missed() // not rein's: look over everything
			return
		}
		left(name)
	}, missed)
}
