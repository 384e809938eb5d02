package etcd

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// Follower follows what the servers sharing the prefix commit: a server
// learns of what the others commit through etcd watches, each from the
// revision it has read up to, so that nothing committed after that read
// is missed: etcd delivers every change after a watch's start revision, in
// revision order, unless the revisions were compacted (then the watcher is
// told to read everything again). It owns no key: it watches the keys the
// Store writes, P run/<run id> (a run's snapshot, rewritten by every
// append) and P change/ (the change feed). The Store embeds it, so a Store
// is a server.Commits.
type Follower struct{ *conn }

// watchRetry is the pause before a watch that failed is started again.
const watchRetry = 200 * time.Millisecond

// FollowRun calls grew with the version of run runID each time its log
// grows (its snapshot is rewritten with every append), by any server, from
// the moment of the call until ctx ends; and missed whenever it may have
// missed some (at the start, and when its watch
// had to start again past compacted revisions), so that the caller reads
// the run's log again. A server follows a run only while it serves a watch
// of it: etcd then sends it that run's commits, and no other's. The calls
// come from one goroutine, in commit order; they must not block. It
// returns when ctx ends.
func (f *Follower) FollowRun(ctx context.Context, runID string, grew func(version uint64), missed func()) {
	key := f.keys.run(runID)
	f.follow(ctx, key, []clientv3.OpOption{clientv3.WithFilterDelete()}, func(_ string, value []byte) {
		run := &reinv1.Run{}
		if err := unseal(value, run, "run "+runID+" snapshot"); err != nil {
			missed() // not rein's: let the caller read what is stored
			return
		}
		grew(run.GetVersion())
	}, missed)
}

// FollowChanges calls changed each time a run's status changes (a key of
// the change feed, which WatchRuns reads, is written), by any server, until
// ctx ends; and missed as FollowRun does. A server follows the feed only
// while it serves a watch of every run.
func (f *Follower) FollowChanges(ctx context.Context, changed func(), missed func()) {
	f.follow(ctx, f.keys.changes(), []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithFilterDelete()},
		func(string, []byte) { changed() }, missed)
}

// follow watches key (with clientv3.WithPrefix in opts, the keys under
// it) from the current revision on, calling fn with each key less key and
// its value, and missed at the start (the watch then begins at the
// revision read, so that nothing after it is lost) and after each restart that
// may have lost changes, until ctx ends.
func (f *Follower) follow(ctx context.Context, prefix string, opts []clientv3.OpOption, fn func(key string, value []byte), missed func()) {
	var rev int64 // the last revision seen; 0: start from now
	for ctx.Err() == nil {
		if rev == 0 {
			rctx, cancel := f.readCtx(ctx)
			resp, err := f.cli.Get(rctx, f.keys.layout())
			cancel()
			if err != nil {
				pause(ctx, watchRetry)
				continue
			}
			rev = resp.Header.Revision
			missed()
		}
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		ch := f.cli.Watch(wctx, prefix, append([]clientv3.OpOption{clientv3.WithRev(rev + 1)}, opts...)...)
		for resp := range ch {
			if resp.CompactRevision != 0 {
				rev = 0 // what we needed is gone: read everything again
				break
			}
			if resp.Err() != nil {
				break
			}
			for _, ev := range resp.Events {
				fn(string(ev.Kv.Key[len(prefix):]), ev.Kv.Value)
				rev = ev.Kv.ModRevision
			}
		}
		cancel()
		pause(ctx, watchRetry)
	}
}

func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
