// Package lifecycle_test runs the lifecycle as a deployment does: two
// servers on one etcd cluster with a small quota, archiving every run as it
// ends and deleting it a few seconds later, through far more run content
// than the quota holds.
package lifecycle_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/archive"
	"github.com/reinhq/rein/internal/etcdtest"
	"github.com/reinhq/rein/internal/lifecycle"
	"github.com/reinhq/rein/internal/replica"
	etcdstore "github.com/reinhq/rein/internal/store/etcd"
	"github.com/reinhq/rein/server"
)

const (
	quota   = 64 << 20
	goalLen = 48 << 10 // each run's goal: unique, incompressible-ish text
	prefix  = "/rein-lifecycle/"
	retain  = 3 * time.Second
)

type replicaNode struct {
	node   *server.Node
	client reinv1.RunServiceClient
	store  *etcdstore.Store
}

func startReplica(t *testing.T, c *etcdtest.Cluster, name, archiveURL string) *replicaNode {
	t.Helper()
	ctx := context.Background()
	st, err := etcdstore.Open(ctx, c.Client(), prefix, etcdstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := replica.Join(ctx, replica.Config{Client: c.Client(), Store: st, Name: name, TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	a, err := archive.Open(ctx, archiveURL)
	if err != nil {
		t.Fatal(err)
	}
	node, err := server.Open(ctx, server.Config{
		Store: st, Replica: true, Owner: name, Commits: st, Leased: rep.Holding, Resume: true,
		Archive: a, SweepEvery: 200 * time.Millisecond,
		Policy: func(string) lifecycle.Policy {
			return lifecycle.Policy{ArchiveOn: true, RetainOn: true, Retain: retain}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	rep.Serve(node.Engine)
	cctx, cancel := context.WithCancel(ctx)
	go st.CompactHistory(cctx, time.Second, nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = node.GRPC.Serve(lis)
	}()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cc.Close()
		rep.StopTaking()
		node.Close()
		<-served
		rep.Leave(context.Background())
		_ = a.Close()
	})
	return &replicaNode{node: node, client: reinv1.NewRunServiceClient(cc), store: st}
}

// goal is a run's goal: goalLen bytes that no other run shares.
func goal(i int) string {
	b := make([]byte, goalLen/2)
	_, _ = rand.Read(b)
	return fmt.Sprintf("run %d: %x", i, b)
}

// TestEtcdQuotaHoldsUnderLifecycle: a workload of five times etcd's quota
// in run content completes on two servers, every StartRun taken, with
// etcd's database (compacted by the servers, defragmented by the test as an
// operator's cron would) under its quota; every run started is accounted
// for. (What a full quota does without a lifecycle, ResourceExhausted naming
// etcd's quota, is server's TestEtcdNoSpace and the etcd store's quota
// tests.)
func TestEtcdQuotaHoldsUnderLifecycle(t *testing.T) {
	if testing.Short() {
		t.Skip("a workload of five etcd quotas")
	}
	c := etcdtest.StartWith(t, etcdtest.Options{Members: 3, QuotaBackendBytes: quota})
	url := "file://" + filepath.ToSlash(filepath.Join(t.TempDir(), "archive"))
	nodes := []*replicaNode{startReplica(t, c, "a", url), startReplica(t, c, "b", url)}
	ctx := context.Background()

	// A run puts its goal in etcd three times (its contract, its
	// run_started, its model call's input): kept, these runs would fill the
	// quota five times over.
	runs := 5 * quota / (3 * goalLen)
	var started sync.Map // run ID -> true
	var failed atomic.Int64
	var firstErr atomic.Value
	defrag := make(chan struct{}, 1)
	var wg sync.WaitGroup
	work := make(chan int)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				n := nodes[i%2]
				resp, err := n.client.StartRun(ctx, &reinv1.StartRunRequest{RequestId: fmt.Sprintf("req-%d", i), Contract: &reinv1.TaskContract{
					Goal:  goal(i),
					Model: &reinv1.ModelSpec{Provider: "script", Script: []*reinv1.ScriptedReply{{Reply: &reinv1.ScriptedReply_Decision{Decision: &reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: "done"}}}}}}},
				}})
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				started.Store(resp.GetRun().GetRunId(), true)
				if i%200 == 199 {
					select {
					case defrag <- struct{}{}:
					default:
					}
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() {
		// The operator's cron: defragment each member now and then.
		for {
			select {
			case <-done:
				return
			case <-defrag:
				defragment(t, c)
			}
		}
	}()
	for i := 0; i < runs; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	close(done)
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of %d StartRuns failed; the first: %v", n, runs, firstErr.Load())
	}

	// Every run ends, is archived and then deleted; wait for the last: the
	// live store lists nothing (a run or a stub) once all are deleted.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		resp, err := nodes[0].client.ListRuns(ctx, &reinv1.ListRunsRequest{PageSize: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetRuns()) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("runs still in the live store %s after the workload, run %s among them", 3*time.Minute, resp.GetRuns()[0].GetRunId())
		}
		<-time.After(500 * time.Millisecond) // a poll, with the deadline above
	}
	// Accounted for: every run started has its deletion record.
	recs := map[string]bool{}
	archived := 0
	token := ""
	for {
		resp, err := nodes[1].client.ListDeletions(ctx, &reinv1.ListDeletionsRequest{PageSize: 1000, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range resp.GetDeletions() {
			if d.GetDeletedBy() != lifecycle.ByPolicy {
				t.Errorf("run %s deleted by %q, want retention", d.GetRunId(), d.GetDeletedBy())
			}
			// A run whose retention passed before a sweep archived it is
			// deleted from the live store directly.
			if d.GetArchived() {
				archived++
			}
			recs[d.GetRunId()] = true
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	count := 0
	started.Range(func(k, _ any) bool {
		count++
		if !recs[k.(string)] {
			t.Errorf("run %s was started and is neither live, archived nor deleted", k)
		}
		return true
	})
	if count != runs {
		t.Fatalf("%d runs started, want %d", count, runs)
	}
	if archived == 0 {
		t.Fatal("no run was archived before its deletion: the test did not exercise the archive")
	}
	t.Logf("%d runs: %d archived, then deleted; %d deleted before a sweep archived them", runs, archived, runs-archived)
	compact(t, c)
	defragment(t, c)
	for i := 0; i < c.Len(); i++ {
		st, err := c.Client().Status(ctx, c.Endpoint(i))
		if err != nil {
			t.Fatal(err)
		}
		if st.DbSize >= quota {
			t.Fatalf("member %d's database is %d bytes, over the %d quota", i, st.DbSize, quota)
		}
		t.Logf("member %d: database %d bytes (%d in use) after %d runs of %d KiB", i, st.DbSize, st.DbSizeInUse, runs, goalLen>>10)
	}
}

// compact compacts etcd's history to its head.
func compact(t *testing.T, c *etcdtest.Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.Client().Get(ctx, "compact-probe")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client().Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil && !strings.Contains(err.Error(), "compacted") {
		t.Fatal(err)
	}
}

// defragment defragments every member, one after the other.
func defragment(t *testing.T, c *etcdtest.Cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := 0; i < c.Len(); i++ {
		if _, err := c.Client().Defragment(ctx, c.Endpoint(i)); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("defragment member %d: %v", i, err)
		}
	}
}
