package failover_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/reinhq/rein/client"
	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/etcdtest"
	"github.com/reinhq/rein/internal/runstate"
)

// readContract is a run of two steps, a read then an answer, each model
// call taking delayMs.
func readContract(i int, delayMs uint32) *reinv1.TaskContract {
	c := contract(i, delayMs)
	c.Tools = c.Tools[:1]
	script := c.Model.Script
	c.Model.Script = []*reinv1.ScriptedReply{script[0], script[2]}
	return c
}

// TestQueueAcrossReplicaKills: three replicas with --max-running 3 share
// one queue on etcd. 30 runs are queued through them while two replicas
// are killed and started again: every run completes, each is admitted
// exactly once, and no more than 3 run at once (the failure twin of the
// shared lock: without it replicas would each admit their own 3).
func TestQueueAcrossReplicaKills(t *testing.T) {
	if testing.Short() {
		t.Skip("three etcd members and three rein servers, two killed (about 20 s)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	reps, addrs, cl := threeReplicas(t, "--max-running", "3")
	const n = 30
	ids := make([]string, n)
	for i := range n {
		from := i % len(addrs)
		rcl := dial(t, append(append([]string{}, addrs[from:]...), addrs[:from]...)...)
		if err := retry(ctx, func(ctx context.Context) error {
			resp, err := rcl.Runs.StartRun(ctx, &reinv1.StartRunRequest{RequestId: fmt.Sprintf("queued-%03d", i), Contract: readContract(i, 150)})
			ids[i] = resp.GetRun().GetRunId()
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}

	// Sample how many run at once while the kills go on.
	var mu sync.Mutex
	most := 0
	sampled := make(chan struct{})
	sampleCtx, stopSampling := context.WithCancel(ctx)
	go func() {
		defer close(sampled)
		for sampleCtx.Err() == nil {
			running := 0
			_ = retry(sampleCtx, func(ctx context.Context) error {
				resp, err := cl.Runs.ListRuns(ctx, &reinv1.ListRunsRequest{Statuses: []reinv1.RunStatus{reinv1.RunStatus_RUN_STATUS_RUNNING}, PageSize: 100})
				running = len(resp.GetRuns())
				return err
			})
			mu.Lock()
			most = max(most, running)
			mu.Unlock()
			select {
			case <-sampleCtx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	for _, victim := range reps[:2] {
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
		victim.kill(t)
		select {
		case <-time.After(500 * time.Millisecond):
		case <-ctx.Done():
		}
		victim.start(t)
	}
	for _, id := range ids {
		if err := waitEnded(ctx, cl, id); err != nil {
			t.Fatal(err)
		}
	}
	stopSampling()
	<-sampled
	for i, id := range ids {
		evs, run := allEvents(t, ctx, cl, id)
		admitted := 0
		for _, ev := range evs {
			if ev.GetRunAdmitted() != nil {
				admitted++
			}
		}
		if run.GetStatus() != reinv1.RunStatus_RUN_STATUS_COMPLETED || admitted != 1 {
			t.Errorf("run %d (%s) is %s and was admitted %d times; want completed, admitted once", i, id, run.GetStatus(), admitted)
		}
	}
	if most > 3 {
		t.Errorf("%d runs ran at once across the replicas, over --max-running 3", most)
	}
}

// threeReplicas starts three replicas, given extra flags, on a cluster of
// three etcd members, and a client of all three.
func threeReplicas(t *testing.T, extra ...string) ([]*replica, []string, *client.Client) {
	t.Helper()
	cluster := etcdtest.Start(t, 3)
	g := newGroup(t, cluster.Endpoints(), ttl)
	g.extra = extra
	reps := []*replica{g.replica(t, "replica-0"), g.replica(t, "replica-1"), g.replica(t, "replica-2")}
	var addrs []string
	for _, r := range reps {
		r.start(t)
		addrs = append(addrs, r.addr)
	}
	return reps, addrs, dial(t, addrs...)
}

// waitEnded polls a run until it ends.
func waitEnded(ctx context.Context, cl *client.Client, runID string) error {
	for {
		var st reinv1.RunStatus
		if err := retry(ctx, func(ctx context.Context) error {
			resp, err := cl.Runs.GetRun(ctx, &reinv1.GetRunRequest{RunId: runID})
			st = resp.GetRun().GetStatus()
			return err
		}); err != nil {
			return err
		}
		if runstate.Terminal(st) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("run %s did not end: %w", runID, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
