package server

import (
	"context"
	"crypto/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/etcdtest"
	"github.com/reinhq/rein/internal/model"
	etcdstore "github.com/reinhq/rein/internal/store/etcd"
)

// countedCommits is the etcd store's follows of other servers' commits,
// counting the follows started, those live, the commits they are told and
// the times a run's follow had its watchers read the store.
//
// A run's follow has its watchers read the store at its start, once it has
// read the revision it follows from; here that read waits for the follow's
// first told commit. The watchers read from their cursors either way, but a
// read that came late would find every commit of a short run and leave the
// follow nothing to tell, and the test could not see it follow.
type countedCommits struct {
	*etcdstore.Store
	runs, feeds, live, grew, reads atomic.Int32
}

func (c *countedCommits) FollowRun(ctx context.Context, runID string, grew func(uint64), missed func()) {
	c.runs.Add(1)
	c.live.Add(1)
	defer c.live.Add(-1)
	told := make(chan struct{})
	var once sync.Once
	started := false
	c.Store.FollowRun(ctx, runID, func(v uint64) {
		c.grew.Add(1)
		grew(v)
		once.Do(func() { close(told) })
	}, func() {
		c.reads.Add(1)
		if started {
			missed()
			return
		}
		started = true
		go func() {
			select {
			case <-told:
			case <-ctx.Done():
			}
			missed()
		}()
	})
}

func (c *countedCommits) FollowChanges(ctx context.Context, changed, missed func()) {
	c.feeds.Add(1)
	c.live.Add(1)
	defer c.live.Add(-1)
	c.Store.FollowChanges(ctx, changed, missed)
}

// followingServer is a node named name on c's store, following other
// servers' commits through a countedCommits, with the model m.
func followingServer(t *testing.T, c *etcdtest.Cluster, name string, m model.Model) (*tcpServer, *countedCommits) {
	t.Helper()
	st, err := etcdstore.Open(context.Background(), c.Client(), "/rein/", etcdstore.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	commits := &countedCommits{Store: st}
	cfg := Config{Store: st, Tools: fixtures(), Commits: commits, Owner: name, StreamModelCalls: true,
		Models: func(*reinv1.ModelSpec) (model.Model, error) { return m, nil }}
	return serveTCP(t, cfg), commits
}

// waitNoFollow waits until c follows nothing.
func waitNoFollow(t *testing.T, c *countedCommits, what string) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for c.live.Load() != 0 {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("%s: %d follows of other servers' commits still live 30s on", what, c.live.Load())
		}
	}
}

// TestWatchFollowsOnlyWatchedRuns: two servers share one etcd store. A run
// driven by one, watched nowhere else, costs the other nothing: it follows
// no commit and is told of none. A watcher of the run on the other server
// makes it follow that run's commits, and is streamed the run live to its
// end; once the watch ends, so does the follow. A watcher of every run
// there makes it follow the change feed, only while the watch lasts.
func TestWatchFollowsOnlyWatchedRuns(t *testing.T) {
	c := etcdtest.Start(t, 1)
	m := &writingModel{pieces: []string{"done"}, gate: make(chan struct{})}
	driver, _ := followingServer(t, c, "driver", m)
	other, commits := followingServer(t, c, "other", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := func() string {
		resp, err := driver.client.StartRun(ctx, &reinv1.StartRunRequest{RequestId: rand.Text(), Contract: contract(nil)})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetRun().GetRunId()
	}

	// Watched where it is driven only.
	first := start()
	close(m.gate)
	watchOutput(t, ctx, driver, first, 0, false).toEnd(t)
	if r, f, g := commits.runs.Load(), commits.feeds.Load(), commits.grew.Load(); r+f+g != 0 {
		t.Fatalf("a run watched only where it is driven: the other server started %d run follows and %d feed follows, told of %d commits; want none", r, f, g)
	}

	// Watched on the other server: it follows that run, to its end.
	m.gate = make(chan struct{})
	runID := start()
	far := watchOutput(t, ctx, other, runID, 0, false)
	far.until(t, func(r *reinv1.WatchRunResponse) bool { return r.GetEvent().GetModelRequested() != nil })
	// The run goes on once the follow has read the revision it follows
	// from: a commit before that would be read from the store, not told.
	waitFor(t, 30*time.Second, "the follow's start", func() bool { return commits.reads.Load() > 0 })
	close(m.gate)
	far.toEnd(t)
	if r, g := commits.runs.Load(), commits.grew.Load(); r != 1 || g == 0 {
		t.Fatalf("a run watched on the other server: it started %d follows, told of %d commits (its watchers read the store %d times); want 1 follow told of its commits", r, g, commits.reads.Load())
	}
	waitNoFollow(t, commits, "the run's watch ended")

	// A watcher of every run: the change feed, while it lasts.
	wctx, stop := context.WithCancel(ctx)
	all, err := other.client.WatchRuns(wctx, &reinv1.WatchRunsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	third := start()
	for {
		resp, err := all.Recv()
		if err != nil {
			t.Fatalf("the watch of every run on the other server ended before run %s completed: %v", third, err)
		}
		if resp.GetChange().GetRunId() == third && resp.GetChange().GetStatus() == reinv1.RunStatus_RUN_STATUS_COMPLETED {
			break
		}
	}
	if f := commits.feeds.Load(); f != 1 {
		t.Fatalf("a watch of every run started %d follows of the change feed; want 1", f)
	}
	stop()
	waitNoFollow(t, commits, "the watch of every run ended")
}
