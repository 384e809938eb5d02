package replica_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/replica"
	etcdstore "github.com/reinhq/rein/internal/store/etcd"
	"github.com/reinhq/rein/internal/tools"
	"github.com/reinhq/rein/server"
)

var shared *clientv3.Client

func TestMain(m *testing.M) { os.Exit(withEtcd(m)) }

func withEtcd(m *testing.M) int {
	dir, err := os.MkdirTemp("", "rein-replica-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	cfg := embed.NewConfig()
	cfg.Dir, cfg.Name = dir, "test"
	client, peer := freeURL(), freeURL()
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.UnsafeNoFsync = true
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		fmt.Fprintln(os.Stderr, "etcd not ready within 30s")
		return 1
	}
	if shared, err = clientv3.New(clientv3.Config{Endpoints: []string{client.String()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer shared.Close()
	return m.Run()
}

// ownerOf is the name in the run's owner key, or "".
func ownerOf(t *testing.T, prefix, runID string) string {
	t.Helper()
	resp, err := shared.Get(t.Context(), prefix+"owner/"+runID)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}

func freeURL() url.URL {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return url.URL{Scheme: "http", Host: l.Addr().String()}
}

const ttl = 2 * time.Second

// member is one rein server of several on one etcd prefix, as rein serve
// --etcd makes it, reached through the generated client.
type member struct {
	name   string
	store  *etcdstore.Store
	rep    *replica.Replica
	node   *server.Node
	client reinv1.RunServiceClient
}

func join(t *testing.T, prefix, name string, models func(*reinv1.ModelSpec) (model.Model, error)) *member {
	t.Helper()
	return joinCapped(t, prefix, name, models, 0)
}

// joinCapped is join with a cap on the runs the member drives at once.
func joinCapped(t *testing.T, prefix, name string, models func(*reinv1.ModelSpec) (model.Model, error), maxDriven int) *member {
	t.Helper()
	return joinWith(t, prefix, name, models, maxDriven, nil)
}

// joinWith is join with a cap and a hook told of each look over the runs.
func joinWith(t *testing.T, prefix, name string, models func(*reinv1.ModelSpec) (model.Model, error), maxDriven int, lookedOver func(string, time.Duration)) *member {
	t.Helper()
	st, err := etcdstore.Open(t.Context(), shared, prefix, etcdstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := replica.Join(t.Context(), replica.Config{Client: shared, Store: st, Name: name, TTL: ttl, LookedOver: lookedOver})
	if err != nil {
		t.Fatal(err)
	}
	node, err := server.Open(t.Context(), server.Config{
		Store: st, Replica: true, Owner: name, Commits: st, Leased: rep.Holding, Resume: true, MaxDriven: maxDriven,
		Models: models, Tools: tools.NewFixtures(map[string][]tools.FixtureResult{"lookup": {{Output: structpb.NewStringValue("found")}}}),
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

// die ends the member's lease at once, as its expiry after a crash would;
// the member finds it lost and stops driving its runs.
func (m *member) die(t *testing.T) {
	t.Helper()
	if _, err := shared.Revoke(t.Context(), m.store.Lease()); err != nil {
		t.Fatal(err)
	}
}

// hanging is a model whose calls never return before their context ends:
// the run it drives stays running on its server.
type hanging struct{ called chan struct{} }

func (h hanging) Next(ctx context.Context, _ *model.Request) (*model.Reply, error) {
	select {
	case h.called <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

func hangingModels(called chan struct{}) func(*reinv1.ModelSpec) (model.Model, error) {
	return func(*reinv1.ModelSpec) (model.Model, error) { return hanging{called}, nil }
}

func scripted(*reinv1.ModelSpec) (model.Model, error) {
	return model.NewScript([]*reinv1.ScriptedReply{
		{Reply: &reinv1.ScriptedReply_Decision{Decision: &reinv1.Decision{Action: &reinv1.Decision_ToolCall{ToolCall: &reinv1.ToolCall{Tool: "lookup", CallId: "c1"}}}}, Usage: &reinv1.Usage{InputTokens: 10, OutputTokens: 5}},
		{Reply: &reinv1.ScriptedReply_Decision{Decision: &reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: "done"}}}}, Usage: &reinv1.Usage{InputTokens: 10, OutputTokens: 5}},
	}), nil
}

func contract() *reinv1.TaskContract {
	return &reinv1.TaskContract{Goal: "look it up",
		Tools: []*reinv1.ToolGrant{{Name: "lookup", Tier: reinv1.ToolTier_TOOL_TIER_READ}},
		Model: &reinv1.ModelSpec{Provider: "script", Script: []*reinv1.ScriptedReply{{Reply: &reinv1.ScriptedReply_Decision{Decision: &reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: "x"}}}}}}}}
}

// follow watches runID on m from the start and returns every event up to
// the run's end, failing on a gap or a duplicate.
func follow(ctx context.Context, m *member, runID string) ([]*reinv1.Event, error) {
	stream, err := m.client.WatchRun(ctx, &reinv1.WatchRunRequest{RunId: runID})
	if err != nil {
		return nil, err
	}
	var evs []*reinv1.Event
	for {
		resp, err := stream.Recv()
		if err != nil {
			return evs, fmt.Errorf("watch on %s after %d events: %w", m.name, len(evs), err)
		}
		ev := resp.GetEvent()
		if ev == nil {
			continue
		}
		if want := uint64(len(evs) + 1); ev.GetSequence() != want {
			return evs, fmt.Errorf("watch on %s: event %d where %d was due: a gap or a duplicate", m.name, ev.GetSequence(), want)
		}
		evs = append(evs, ev)
		if sc := ev.GetStatusChanged(); sc != nil && sc.GetTo() != reinv1.RunStatus_RUN_STATUS_RUNNING &&
			sc.GetTo() != reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT && sc.GetTo() != reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL {
			return evs, nil
		}
	}
}

// TestTakeoverWhenAServerDies: a run driven by A, whose model call hangs,
// is taken over by B once A's lease ends: B sends the call again marked
// resumed and carries the run to its end, within the TTL and a second of
// the lease's end. A watcher on A (the server that lost the run) and one
// on B follow it with no gap or duplicate, and nothing A tried to append
// after it lost its lease is in the log.
func TestTakeoverWhenAServerDies(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	prefix := "/takeover-" + t.Name() + "/"
	called := make(chan struct{}, 1)
	a := join(t, prefix, "replica-a", hangingModels(called))
	resp, err := a.client.StartRun(ctx, &reinv1.StartRunRequest{RequestId: "r1", Contract: contract()})
	if err != nil {
		t.Fatal(err)
	}
	runID := resp.GetRun().GetRunId()
	select {
	case <-called: // A drives the run, its model call in flight
	case <-ctx.Done():
		t.Fatal("A never called the model")
	}
	lookedOver := make(chan struct{}, 8)
	b := joinWith(t, prefix, "replica-b", scripted, 0, func(string, time.Duration) {
		select {
		case lookedOver <- struct{}{}:
		default: // the test has counted the ones it waits for
		}
	})
	// The twin: while A holds its lease, B leaves A's run alone, however
	// often it looks over the runs: at its start, then once per TTL.
	before, err := b.client.GetRun(ctx, &reinv1.GetRunRequest{RunId: runID})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case <-lookedOver:
		case <-ctx.Done():
			t.Fatal("B never looked over the runs")
		}
	}
	after, err := b.client.GetRun(ctx, &reinv1.GetRunRequest{RunId: runID})
	if err != nil {
		t.Fatal(err)
	}
	if after.GetRun().GetVersion() != before.GetRun().GetVersion() || ownerOf(t, prefix, runID) != "replica-a" {
		t.Fatalf("B touched the run A drives: version %d → %d, owner %q", before.GetRun().GetVersion(), after.GetRun().GetVersion(), ownerOf(t, prefix, runID))
	}
	var wg sync.WaitGroup
	watched := make([][]*reinv1.Event, 2)
	errs := make([]error, 2)
	for i, m := range []*member{a, b} {
		wg.Go(func() { watched[i], errs[i] = follow(ctx, m, runID) })
	}
	died := time.Now()
	a.die(t)
	wg.Wait()
	took := time.Since(died)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("watcher %d: %v", i, err)
		}
	}
	final, err := b.client.GetRun(ctx, &reinv1.GetRunRequest{RunId: runID})
	if err != nil {
		t.Fatal(err)
	}
	if st := final.GetRun().GetStatus(); st != reinv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Fatalf("run ended %v, want completed", st)
	}
	if len(watched[0]) != len(watched[1]) || uint64(len(watched[0])) != final.GetRun().GetVersion() {
		t.Fatalf("watchers saw %d and %d events of %d", len(watched[0]), len(watched[1]), final.GetRun().GetVersion())
	}
	resumed, taken := false, false
	for _, ev := range watched[1] {
		if mr := ev.GetModelRequested(); mr != nil && mr.GetResumed() {
			resumed = true
		}
		if rt := ev.GetRunTaken(); rt != nil {
			taken = rt.GetOwner() == "replica-b" && rt.GetEpoch() >= 2 && rt.GetTraceId() == final.GetRun().GetTraceId()
		}
	}
	if !resumed || !taken {
		t.Fatalf("B's takeover: call sent again marked resumed %v, run_taken by replica-b in the run's trace %v", resumed, taken)
	}
	t.Logf("from the lease's end to the run completed on B: %v (TTL %v)", took, ttl)
	if took > ttl+time.Second+2*time.Second {
		t.Fatalf("B took %v to carry the run on; want about the TTL (%v) or less", took, ttl)
	}
}

// TestDecisionOnAnotherServer: a run paused on A for a person's answer is
// answered through B, which takes the run and carries it on; when it pauses
// again (on B), an answer through A, which held the run before, takes it
// back. Each answer is applied once. The twin: a second answer to the same
// question is refused, changing nothing.
func TestDecisionOnAnotherServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	prefix := "/decide-" + t.Name() + "/"
	asking := func(*reinv1.ModelSpec) (model.Model, error) {
		ask := func(q string) *reinv1.ScriptedReply {
			return &reinv1.ScriptedReply{Reply: &reinv1.ScriptedReply_Decision{Decision: &reinv1.Decision{Action: &reinv1.Decision_AskHuman{AskHuman: &reinv1.AskHuman{Question: q}}}}, Usage: &reinv1.Usage{InputTokens: 1, OutputTokens: 1}}
		}
		return model.NewScript([]*reinv1.ScriptedReply{ask("which quarter?"), ask("which year?"),
			{Reply: &reinv1.ScriptedReply_Decision{Decision: &reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: "Q3 2030"}}}}, Usage: &reinv1.Usage{InputTokens: 1, OutputTokens: 1}},
		}), nil
	}
	a := join(t, prefix, "replica-a", asking)
	b := join(t, prefix, "replica-b", asking)
	resp, err := a.client.StartRun(ctx, &reinv1.StartRunRequest{RequestId: "r1", Contract: contract()})
	if err != nil {
		t.Fatal(err)
	}
	runID := resp.GetRun().GetRunId()
	// waitStatus follows the run on m past version until it changes to
	// want, and returns the run then.
	waitStatus := func(m *member, want reinv1.RunStatus, version uint64) *reinv1.Run {
		t.Helper()
		stream, err := m.client.WatchRun(ctx, &reinv1.WatchRunRequest{RunId: runID, AfterSequence: version})
		if err != nil {
			t.Fatal(err)
		}
		for {
			resp, err := stream.Recv()
			if err != nil {
				t.Fatalf("run never reached %v past version %d: %v", want, version, err)
			}
			if resp.GetEvent().GetStatusChanged().GetTo() == want {
				got, err := m.client.GetRun(ctx, &reinv1.GetRunRequest{RunId: runID})
				if err != nil {
					t.Fatal(err)
				}
				return got.GetRun()
			}
		}
	}
	paused := waitStatus(b, reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT, 0)
	if _, err := b.client.ProvideInput(ctx, &reinv1.ProvideInputRequest{RunId: runID, Text: "Q3"}); err != nil {
		t.Fatalf("answer through B: %v", err)
	}
	again := waitStatus(a, reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT, paused.GetVersion())
	if got := ownerOf(t, prefix, runID); got != "replica-b" {
		t.Fatalf("after the answer through B the run's owner is %q, want replica-b", got)
	}
	if _, err := a.client.ProvideInput(ctx, &reinv1.ProvideInputRequest{RunId: runID, Text: "2030"}); err != nil {
		t.Fatalf("answer through A after B drove the run: %v", err)
	}
	done := waitStatus(b, reinv1.RunStatus_RUN_STATUS_COMPLETED, again.GetVersion())
	if got := ownerOf(t, prefix, runID); got != "" {
		t.Fatalf("the ended run still has an owner: %q", got)
	}
	before := done.GetVersion()
	if _, err := b.client.ProvideInput(ctx, &reinv1.ProvideInputRequest{RunId: runID, Text: "late"}); err == nil {
		t.Fatal("an answer to a run that ended was taken")
	}
	evs, err := follow(ctx, a, runID)
	if err != nil {
		t.Fatal(err)
	}
	answers := 0
	for _, ev := range evs {
		if ev.GetInputProvided() != nil {
			answers++
		}
	}
	if answers != 2 || uint64(len(evs)) != before {
		t.Fatalf("%d answers in %d events (version %d), want 2 answers and nothing after the end", answers, len(evs), before)
	}
}

// TestCappedServerLeavesRunsToOthers: a server that drives as many runs as
// its cap allows leaves a new run it received to the others, one of which
// takes it within a TTL and carries it to its end; the runs it does drive
// stay its own. The twin: under the cap, the server drives what it gets.
func TestCappedServerLeavesRunsToOthers(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	prefix := "/capped-" + t.Name() + "/"
	called := make(chan struct{}, 1)
	a := joinCapped(t, prefix, "replica-a", hangingModels(called), 1)
	first, err := a.client.StartRun(ctx, &reinv1.StartRunRequest{RequestId: "r1", Contract: contract()})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-called: // under its cap, A drives the first run
	case <-ctx.Done():
		t.Fatal("A never drove the first run")
	}
	b := join(t, prefix, "replica-b", scripted)
	second, err := a.client.StartRun(ctx, &reinv1.StartRunRequest{RequestId: "r2", Contract: contract()})
	if err != nil {
		t.Fatal(err)
	}
	evs, err := follow(ctx, b, second.GetRun().GetRunId())
	if err != nil {
		t.Fatal(err)
	}
	if last := evs[len(evs)-1].GetStatusChanged(); last.GetTo() != reinv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Fatalf("the run A left ended %v, want completed", last.GetTo())
	}
	if got := ownerOf(t, prefix, first.GetRun().GetRunId()); got != "replica-a" {
		t.Fatalf("the run A drives is owned by %q", got)
	}
}
