package replica_test

// A run whose append meets a full etcd (its quota, the NOSPACE alarm): it
// stops as after a crash, stays running under its server's lease, and is
// carried on by that server's look over its runs once etcd takes writes
// again. On a cluster of one etcd member process of its own
// (internal/etcdtest), since the alarm is the whole cluster's.

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/etcdtest"
	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/replica"
	etcdstore "github.com/reinhq/rein/internal/store/etcd"
	"github.com/reinhq/rein/internal/tools"
	"github.com/reinhq/rein/server"
)

// joinOn is joinWith on the cluster cli talks to.
func joinOn(t *testing.T, cli *clientv3.Client, prefix, name string, models func(*reinv1.ModelSpec) (model.Model, error), lookedOver func(string, time.Duration)) *member {
	t.Helper()
	st, err := etcdstore.Open(t.Context(), cli, prefix, etcdstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := replica.Join(t.Context(), replica.Config{Client: cli, Store: st, Name: name, TTL: ttl, LookedOver: lookedOver})
	if err != nil {
		t.Fatal(err)
	}
	node, err := server.Open(t.Context(), server.Config{
		Store: st, Replica: true, Owner: name, Commits: st, Leased: rep.Holding, Resume: true, Models: models,
		Tools: tools.NewFixtures(map[string][]tools.FixtureResult{"lookup": {{Output: structpb.NewStringValue("found")}}}),
	})
	if err != nil {
		t.Fatal(err)
	}
	rep.Serve(node.Engine)
	lis := bufconn.Listen(1 << 20)
	go func() { _ = node.GRPC.Serve(lis) }()
	cc, err := grpc.NewClient("passthrough:///"+name,
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	m := &member{name: name, store: st, rep: rep, node: node, client: reinv1.NewRunServiceClient(cc)}
	t.Cleanup(func() {
		_ = cc.Close()
		rep.StopTaking()
		node.Close()
		rep.Leave(context.Background())
	})
	return m
}

// gated is a model whose first call waits for release; every call
// answers with a final answer. calls counts the calls sent.
type gated struct {
	called  chan struct{}
	release chan struct{}
	calls   *atomic.Int32
}

func (g gated) Next(ctx context.Context, _ *model.Request) (*model.Reply, error) {
	if g.calls.Add(1) == 1 {
		g.called <- struct{}{}
		select {
		case <-g.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return &model.Reply{Decision: &reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: "done"}}},
		Usage: &reinv1.Usage{InputTokens: 1, OutputTokens: 1}}, nil
}

// TestRunCarriesOnWhenSpaceReturns: a run whose model reply cannot be
// stored because etcd's quota filled while the call was in flight stops
// driving; it stays running, its model call open, under its server's
// lease, and neither fails nor sends the call again while etcd is full,
// look after look over the runs (the failure twin: a full etcd does not
// end or advance the run). Once an operator frees etcd, the server's next
// look over its runs carries it on: the call is sent again marked resumed,
// and the run completes.
func TestRunCarriesOnWhenSpaceReturns(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	c := etcdtest.StartWith(t, etcdtest.Options{Members: 1, QuotaBackendBytes: 4 << 20})
	cli := c.Client()
	const prefix = "/rein/"
	g := gated{called: make(chan struct{}, 1), release: make(chan struct{}), calls: &atomic.Int32{}}
	looked := make(chan struct{}, 1)
	a := joinOn(t, cli, prefix, "replica-a", func(*reinv1.ModelSpec) (model.Model, error) { return g, nil }, func(string, time.Duration) {
		select {
		case looked <- struct{}{}:
		default:
		}
	})
	resp, err := a.client.StartRun(ctx, &reinv1.StartRunRequest{RequestId: "r1", Contract: contract()})
	if err != nil {
		t.Fatal(err)
	}
	runID := resp.GetRun().GetRunId()
	select {
	case <-g.called:
	case <-ctx.Done():
		t.Fatal("the run's model was never called")
	}
	c.Fill(cli, "/filler/")
	close(g.release)
	if err := a.node.Engine.Wait(ctx, runID); err != nil { // its driver met the full etcd and left
		t.Fatal(err)
	}
	stopped, err := a.client.GetRun(ctx, &reinv1.GetRunRequest{RunId: runID})
	if err != nil {
		t.Fatalf("GetRun with etcd full: %v", err)
	}
	owner := func() string {
		t.Helper()
		resp, err := cli.Get(ctx, prefix+"owner/"+runID)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 {
			return ""
		}
		return string(resp.Kvs[0].Value)
	}
	if st := stopped.GetRun().GetStatus(); st != reinv1.RunStatus_RUN_STATUS_RUNNING || owner() != "replica-a" {
		t.Fatalf("the run whose reply etcd refused: %v, owner %q; want running, held by replica-a", st, owner())
	}

	for range 2 { // two looks over the runs, each driving it again into the full etcd
		select {
		case <-looked:
		case <-ctx.Done():
			t.Fatal("no look over the runs within the test's time")
		}
	}
	if err := a.node.Engine.Wait(ctx, runID); err != nil {
		t.Fatal(err)
	}
	still, err := a.client.GetRun(ctx, &reinv1.GetRunRequest{RunId: runID})
	if err != nil {
		t.Fatal(err)
	}
	if st, v := still.GetRun().GetStatus(), still.GetRun().GetVersion(); st != reinv1.RunStatus_RUN_STATUS_RUNNING || v != stopped.GetRun().GetVersion() || g.calls.Load() != 1 {
		t.Fatalf("while etcd is full: %v at version %d after %d model calls; want running at %d, the one call", st, v, g.calls.Load(), stopped.GetRun().GetVersion())
	}

	c.FreeSpace(cli, "/filler/")
	freed := time.Now()
	evs, err := follow(ctx, a, runID)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(freed)
	if last := evs[len(evs)-1].GetStatusChanged(); last.GetTo() != reinv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Fatalf("after etcd was freed the run ended %v, want completed", last.GetTo())
	}
	resumed := false
	for _, ev := range evs {
		if mr := ev.GetModelRequested(); mr != nil && mr.GetResumed() {
			resumed = true
		}
	}
	if !resumed || g.calls.Load() != 2 {
		t.Fatalf("after etcd was freed: the call sent again marked resumed %v, %d model calls; want true, 2", resumed, g.calls.Load())
	}
	t.Logf("from etcd freed to the run completed: %v (a look over the runs every %v)", took, ttl)
	if took > ttl+5*time.Second {
		t.Fatalf("the run took %v to carry on after etcd was freed; want about a look over the runs (%v)", took, ttl)
	}
}
