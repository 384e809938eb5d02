package engine

import (
	"context"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reinhq/rein/internal/etcdtest"
	etcdstore "github.com/reinhq/rein/internal/store/etcd"
)

// The takeover tests of takeover_test.go on etcd, with the old owner and
// the taker two replicas of one prefix, each holding its runs under an
// etcd lease of its own: etcd's Acquire compares only the run's lease and
// owner keys, so it takes a run the old owner ended, or moved and then
// left, between the taker's load and its lease.

// etcdReplicas opens two replica stores of a prefix of the test's own on c, each under an
// etcd lease of its own; revoke ends the old one's lease at once, as its
// expiry would.
func etcdReplicas(t *testing.T, c *etcdtest.Cluster) (old, taker *etcdstore.Store, revoke func()) {
	t.Helper()
	cli := c.Client()
	prefix := "/" + strings.ReplaceAll(t.Name(), "/", "-") + "/"
	var leases []clientv3.LeaseID
	open := func() *etcdstore.Store {
		s, err := etcdstore.Open(context.Background(), cli, prefix, etcdstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		g, err := cli.Grant(t.Context(), 60)
		if err != nil {
			t.Fatal(err)
		}
		s.SetLease(g.ID)
		leases = append(leases, g.ID)
		return s
	}
	old, taker = open(), open()
	return old, taker, func() {
		if _, err := cli.Revoke(t.Context(), leases[0]); err != nil {
			t.Fatal(err)
		}
	}
}

// TestEtcdTakeoverOfARunThatEndedOrMovedMeanwhile: on etcd, a taker whose
// load is older than the run when it takes the lease carries on the run
// as it is then: one the old owner ended is dropped quietly, one the old
// owner moved and then left is driven from where it is. The twin: a run
// its owner left before the taker looked is driven from the taker's load.
func TestEtcdTakeoverOfARunThatEndedOrMovedMeanwhile(t *testing.T) {
	c := etcdtest.Start(t, 1)

	t.Run("ended", func(t *testing.T) {
		old, taker, _ := etcdReplicas(t, c)
		p := newTakeoverPairOn(t, old, taker, true)
		p.takeover(t)
		close(p.oldModel.release)
		p.entered(t, 2)
		if _, err := p.old.Cancel(testCtx(t), p.runID, "done here", "alice"); err != nil {
			t.Fatal(err)
		}
		ended, _ := stored(t, p.s, p.runID)
		close(p.paused.proceed)
		waitRun(t, p.taker, p.runID)

		p.logged.none(t)
		if n := p.newModel.calls.Load(); n != 0 {
			t.Errorf("the taker made %d model calls for a run that had ended", n)
		}
		after, evs := stored(t, p.s, p.runID)
		if after.Version != ended.Version {
			t.Errorf("the run moved from version %d to %d after it ended; log:\n%s", ended.Version, after.Version, dump(evs))
		}
		wantStatus(t, after, evs, statusCancelled, after.StatusReason)
	})

	t.Run("moved", func(t *testing.T) {
		old, taker, revoke := etcdReplicas(t, c)
		p := newTakeoverPairOn(t, old, taker, true)
		p.takeover(t)
		close(p.oldModel.release)
		p.entered(t, 2)
		p.old.Abandon(testCtx(t))
		revoke()
		moved, _ := stored(t, p.s, p.runID)
		close(p.paused.proceed)
		waitRun(t, p.taker, p.runID)

		p.logged.none(t)
		st, evs := stored(t, p.s, p.runID)
		wantStatus(t, st, evs, statusCompleted, st.StatusReason)
		if n := p.newModel.calls.Load(); n != 1 {
			t.Errorf("the taker made %d model calls, want 1 (the call in flight when the old owner stopped)", n)
		}
		p.tools.wantCalls(t, 1, 0, 0)
		if taken := ofType(evs, "run_taken"); len(taken) != 1 || taken[0].GetSequence() != moved.Version+1 {
			t.Errorf("want one run_taken at sequence %d; log:\n%s", moved.Version+1, dump(evs))
		}
	})

	t.Run("abandoned", func(t *testing.T) {
		old, taker, revoke := etcdReplicas(t, c)
		p := newTakeoverPairOn(t, old, taker, true)
		p.old.Abandon(testCtx(t))
		revoke()
		before, _ := stored(t, p.s, p.runID)
		p.takeover(t)
		close(p.paused.proceed)
		waitRun(t, p.taker, p.runID)

		p.logged.none(t)
		st, evs := stored(t, p.s, p.runID)
		wantStatus(t, st, evs, statusCompleted, st.StatusReason)
		if n := p.newModel.calls.Load(); n != 1 {
			t.Errorf("the taker made %d model calls, want 1", n)
		}
		if taken := ofType(evs, "run_taken"); len(taken) != 1 || taken[0].GetSequence() != before.Version+1 {
			t.Errorf("want one run_taken at sequence %d; log:\n%s", before.Version+1, dump(evs))
		}
	})
}
