package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reinhq/rein/internal/store"
)

// Space. etcd keeps every revision of every key until its history is
// compacted, in a database it will not let grow past --quota-backend-bytes
// (2 GiB unless set). A write that would take it past is refused and the
// cluster raises its NOSPACE alarm, under which every member refuses every
// write that adds data (a put, a Txn that puts, a lease grant), however
// small, until an operator disarms it; reads, deletes, compactions and
// defragmentation still pass. Compacting frees the old revisions' pages for
// reuse but does not shrink the database: only a defragmentation does, and
// the quota counts the database's size. So the remedy is, in this order:
// compact, defragment every member, disarm the alarm; then make room that
// lasts (archive or delete runs, or a larger quota). Archiving and
// deleting a run each put a record (its stub, its tombstone), so they too
// wait for the disarm.
//
// A write etcd refused so is store.ErrNoSpace (etcdErr), which says that
// remedy; SpaceAlarm says whether the alarm is raised now, for /readyz and
// the metrics. The run whose append met it stops as after a crash and is
// carried on once etcd takes writes again (a replica's look over its runs).
//
// CompactHistory keeps the history from growing without end.

// noSpaceRemedy is what an operator does about a full etcd, in the order
// that works.
const noSpaceRemedy = "etcd refuses every write until its NOSPACE alarm is disarmed: " +
	"compact its history and defragment every member (etcdctl compaction REV, etcdctl defrag --cluster), then etcdctl alarm disarm; " +
	"then archive or delete runs, or raise etcd's --quota-backend-bytes, so that it does not fill again"

// isNoSpace reports whether err is etcd's refusal of a write for its quota,
// as the client returns it (rpctypes.ErrNoSpace) or as a gRPC status.
func isNoSpace(err error) bool {
	return errors.Is(err, rpctypes.ErrNoSpace) || errors.Is(err, rpctypes.ErrGRPCNoSpace)
}

// SpaceAlarm asks etcd whether its NOSPACE alarm is raised: an error
// wrapping store.ErrNoSpace that names the members that raised it and the
// remedy, or nil when none has. A cluster that does not answer is an error
// wrapping store.ErrUnavailable.
func (s *Store) SpaceAlarm(ctx context.Context) error {
	const what = "ask etcd for its alarms"
	if err := s.enter(what); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	rctx, cancel := s.readCtx(ctx)
	defer cancel()
	resp, err := s.cli.AlarmList(rctx)
	if err != nil {
		return s.etcdErr(ctx, what, err)
	}
	var members []string
	for _, a := range resp.Alarms {
		if a.Alarm == pb.AlarmType_NOSPACE {
			members = append(members, fmt.Sprintf("%x", a.MemberID))
		}
	}
	if len(members) == 0 {
		return nil
	}
	return fmt.Errorf("%w: etcd at %s has its NOSPACE alarm raised (member %s); %s",
		store.ErrNoSpace, strings.Join(s.cli.Endpoints(), ","), strings.Join(members, ", "), noSpaceRemedy)
}

// Compaction. Whoever runs etcd may have it compact its own history
// (--auto-compaction-retention), but no API says whether it does, and an
// etcd that never compacts fills its quota with old revisions of rein's
// snapshots (every append rewrites one). So rein compacts it itself, from
// every server (CompactHistory): each one, every period, compacts to the
// revision the cluster had one period before, so the last period of history
// is always kept. No server needs to lead it: a compaction to a revision at
// or below the one the cluster is compacted to already is refused by etcd
// (ErrCompacted) having done nothing, and is counted as done; servers a few
// seconds apart each move the compaction on by those seconds' writes.
//
// Compaction is of the whole cluster, keys outside rein's prefix included,
// as etcd's own auto-compaction is. A watch that starts from a compacted
// revision is told so; rein's own watches (follower.go, relay.go) then read
// everything again (missed), so compaction loses them nothing, and with a
// period of minutes they rarely need to: a live watch is never behind.

// DefaultCompactEvery is how often a server compacts etcd's history unless
// told otherwise (rein serve --etcd-compact-every), and so how much of it
// is kept: enough for a watch that restarts to resume where it was.
const DefaultCompactEvery = 5 * time.Minute

// CompactHistory compacts the etcd cluster's history every period until
// ctx ends, each time to the revision the cluster had one period before
// (the first time, the one it had when CompactHistory was called). report,
// when not nil, is told of each compaction: the revision, and nil or what
// failed. A compaction that fails is tried again at the next tick, to a
// later revision. Every server on a store may call it: see above. It
// returns when ctx ends or the store is closed; with every 0 or less, at
// once.
func (s *Store) CompactHistory(ctx context.Context, every time.Duration, report func(rev int64, err error)) {
	if every <= 0 {
		return
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	prev, _ := s.revision(ctx) // 0 when etcd did not answer: the next tick reads it
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if prev > 0 {
			err := s.compact(ctx, prev)
			if ctx.Err() != nil || errors.Is(err, store.ErrClosed) {
				return
			}
			if report != nil {
				report(prev, err)
			}
		}
		if now, err := s.revision(ctx); err == nil {
			prev = now
		}
	}
}

// revision is the cluster's current revision.
func (s *Store) revision(ctx context.Context) (int64, error) {
	const what = "read etcd's revision"
	if err := s.enter(what); err != nil {
		return 0, err
	}
	defer s.mu.RUnlock()
	rev, err := s.headAt(ctx, 0)
	if err != nil {
		return 0, s.etcdErr(ctx, what, err)
	}
	return rev, nil
}

// headAt reads the layout marker's count at revision at (0: the current
// one) and returns the cluster's current revision, or the client's error.
func (s *Store) headAt(ctx context.Context, at int64) (int64, error) {
	rctx, cancel := s.readCtx(ctx)
	defer cancel()
	resp, err := s.cli.Get(rctx, s.keys.layout(), clientv3.WithRev(at), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

// compact compacts the cluster's history to rev. A revision at or below
// the one it is compacted to already is done (etcd refuses it with
// ErrCompacted, having changed nothing).
func (s *Store) compact(ctx context.Context, rev int64) error {
	what := fmt.Sprintf("compact etcd's history to revision %d", rev)
	if err := s.enter(what); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	rctx, cancel := s.readCtx(ctx)
	defer cancel()
	if _, err := s.cli.Compact(rctx, rev); err != nil && !isCompacted(err) {
		return s.etcdErr(ctx, what, err)
	}
	return nil
}

// isCompacted reports whether err is etcd's answer to a request for a
// revision its history no longer holds.
func isCompacted(err error) bool {
	return errors.Is(err, rpctypes.ErrCompacted) || errors.Is(err, rpctypes.ErrGRPCCompacted)
}

// Compacted reports whether etcd's history was ever compacted (its first
// revision is gone), and the cluster's current revision: at start, a
// server that does not compact the history warns of a cluster whose
// history was never compacted either.
func (s *Store) Compacted(ctx context.Context) (compacted bool, rev int64, err error) {
	const what = "read etcd's first revision"
	if err := s.enter(what); err != nil {
		return false, 0, err
	}
	defer s.mu.RUnlock()
	if rev, err = s.headAt(ctx, 0); err != nil {
		return false, 0, s.etcdErr(ctx, what, err)
	}
	if _, err = s.headAt(ctx, 1); err != nil {
		if isCompacted(err) {
			return true, rev, nil
		}
		return false, 0, s.etcdErr(ctx, what, err)
	}
	return false, rev, nil
}
