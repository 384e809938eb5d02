package upgrade_test

// The replicas of TestRollingUpgrade, the people who answer its runs, and
// what watches and checks them.

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/reinhq/rein/client"
	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
)

// cluster is the replicas on one etcd: each has a name and an address that
// stay across its builds.
type cluster struct {
	args     []string // every replica's flags but --listen and --name
	names    []string
	addrs    []string
	mu       sync.Mutex
	live     []*server // by replica, the process now serving
	all      []*server // every process started, for their logs
	builds   []string  // by replica, "old" or "new"
	etcd     *clientv3.Client
	startsOf map[string]int
}

func (c *cluster) start(t *testing.T, i int, bin, build string) {
	t.Helper()
	s := start(t, bin, append([]string{"--listen", c.addrs[i], "--name", c.names[i]}, c.args...)...)
	s.tag = fmt.Sprintf("%s/%s| ", c.names[i], build)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.live[i] = s
	c.all = append(c.all, s)
	c.builds[i] = build
	c.startsOf[c.names[i]]++
}

// logs is every process's log, each line tagged with its replica and build.
func (c *cluster) logs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var lines []string
	for _, s := range c.all {
		for _, line := range strings.Split(strings.TrimSpace(s.logText()), "\n") {
			lines = append(lines, s.tag+line)
		}
	}
	return lines
}

// drives is the running runs whose owner key in etcd names replica i (a
// run keeps its key when it pauses or ends).
func (c *cluster) drives(ctx context.Context, cl *client.Client, i int) (int, error) {
	resp, err := c.etcd.Get(ctx, etcdPrefix+"owner/", clientv3.WithPrefix())
	if err != nil {
		return 0, err
	}
	n := 0
	for _, kv := range resp.Kvs {
		if string(kv.Value) != c.names[i] {
			continue
		}
		var st reinv1.RunStatus
		if err := retry(ctx, func(ctx context.Context) error {
			got, err := cl.Runs.GetRun(ctx, &reinv1.GetRunRequest{RunId: strings.TrimPrefix(string(kv.Key), etcdPrefix+"owner/")})
			st = got.GetRun().GetStatus()
			return err
		}); err != nil {
			return 0, err
		}
		if st == reinv1.RunStatus_RUN_STATUS_RUNNING {
			n++
		}
	}
	return n, nil
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// fastReconnect moves a client to another replica within tens of
// milliseconds (gRPC's default backoff grows to two minutes).
var fastReconnect = grpc.WithConnectParams(grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1.5, Jitter: 0.2, MaxDelay: 200 * time.Millisecond},
	MinConnectTimeout: 2 * time.Second,
})

func dial(t *testing.T, addrs ...string) *client.Client {
	t.Helper()
	cl, err := client.Dial(strings.Join(addrs, ","), client.Options{DialOptions: []grpc.DialOption{fastReconnect}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// retry calls f until it succeeds, fails for good, or ctx ends: a replica
// that stops answers Unavailable until the client moves to another.
func retry(ctx context.Context, f func(ctx context.Context) error) error {
	for {
		cctx, cancel := context.WithTimeout(ctx, rpcTimeout)
		err := f(cctx)
		cancel()
		switch status.Code(err) {
		case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted:
		default:
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stalls follows the running runs and keeps, for each, the longest time it
// went without a new event while running: a run stranded on a replica that
// stopped shows here until another takes it.
type stalls struct {
	mu    sync.Mutex
	worst time.Duration
	run   string
}

func (s *stalls) follow(ctx context.Context, cl *client.Client) {
	type seen struct {
		version uint64
		since   time.Time
	}
	last := map[string]seen{}
	for ctx.Err() == nil {
		var runs []*reinv1.Run
		err := retry(ctx, func(ctx context.Context) error {
			runs = nil
			req := &reinv1.ListRunsRequest{Statuses: []reinv1.RunStatus{reinv1.RunStatus_RUN_STATUS_RUNNING}, PageSize: 500}
			for {
				page, err := cl.Runs.ListRuns(ctx, req)
				if err != nil {
					return err
				}
				runs = append(runs, page.GetRuns()...)
				if page.GetNextPageToken() == "" {
					return nil
				}
				req.PageToken = page.GetNextPageToken()
			}
		})
		if err != nil {
			return
		}
		now := time.Now()
		next := map[string]seen{}
		for _, r := range runs {
			prev, ok := last[r.GetRunId()]
			if !ok || prev.version != r.GetVersion() {
				prev = seen{r.GetVersion(), now}
			}
			next[r.GetRunId()] = prev
			s.mu.Lock()
			if d := now.Sub(prev.since); d > s.worst {
				s.worst, s.run = d, r.GetRunId()
			}
			s.mu.Unlock()
		}
		last = next
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// people decide what the runs ask of a person, a few at a time, until ctx
// ends: approve or reject a proposal as the run's kind says, answer a
// question. It counts the decisions.
func people(ctx context.Context, cl *client.Client, decided *atomic.Int64) error {
	for ctx.Err() == nil {
		var waiting []*reinv1.Run
		if err := retry(ctx, func(ctx context.Context) error {
			resp, err := cl.Runs.ListRuns(ctx, &reinv1.ListRunsRequest{Statuses: []reinv1.RunStatus{reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL, reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT}, PageSize: 3})
			waiting = resp.GetRuns()
			return err
		}); err != nil {
			return nil // ctx ended
		}
		for _, r := range waiting {
			if err := decide(ctx, cl, r.GetRunId()); err != nil {
				return err
			}
			decided.Add(1)
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// lastRefusal is the last error a person's decision met ("run: error"),
// for a test that fails on a run that never ended.
var lastRefusal atomic.Value

// decide answers the one thing run asks, unless it was answered already (an
// earlier answer whose reply was lost took effect).
func decide(ctx context.Context, cl *client.Client, runID string) error {
	return retry(ctx, func(ctx context.Context) (err error) {
		defer func() {
			if err != nil {
				lastRefusal.Store(fmt.Sprintf("%s: %v", runID, err))
			}
		}()
		got, err := cl.Runs.GetRun(ctx, &reinv1.GetRunRequest{RunId: runID})
		if err != nil {
			return err
		}
		run := got.GetRun()
		switch run.GetStatus() {
		case reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL:
			p := run.GetPending().GetProposal()
			verdict := reinv1.ApprovalVerdict_APPROVAL_VERDICT_APPROVE
			if run.GetContract().GetLabels()["kind"] == rejected.String() {
				verdict = reinv1.ApprovalVerdict_APPROVAL_VERDICT_REJECT
			}
			_, err = cl.Runs.DecideApproval(ctx, &reinv1.DecideApprovalRequest{RunId: runID, ProposalId: p.GetProposalId(),
				ProposalHash: p.GetHash(), Verdict: verdict, Reason: "rolling upgrade test"})
		case reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT:
			_, err = cl.Runs.ProvideInput(ctx, &reinv1.ProvideInputRequest{RunId: runID, Text: "the balance"})
		default:
			return nil
		}
		if status.Code(err) == codes.FailedPrecondition {
			return status.Error(codes.Aborted, err.Error()) // look again: answered meanwhile?
		}
		return err
	})
}

// states counts the runs in each status, and the trees with children.
func states(ctx context.Context, cl *client.Client) (map[reinv1.RunStatus]int, int, error) {
	counts := map[reinv1.RunStatus]int{}
	trees := 0
	err := retry(ctx, func(ctx context.Context) error {
		clear(counts)
		trees = 0
		req := &reinv1.ListRunsRequest{PageSize: 500}
		for {
			page, err := cl.Runs.ListRuns(ctx, req)
			if err != nil {
				return err
			}
			for _, r := range page.GetRuns() {
				counts[r.GetStatus()]++
				if r.GetDelegatedBy().GetParentRunId() != "" && r.GetStatus() == reinv1.RunStatus_RUN_STATUS_RUNNING {
					trees++
				}
			}
			if page.GetNextPageToken() == "" {
				return nil
			}
			req.PageToken = page.GetNextPageToken()
		}
	})
	return counts, trees, err
}

// history reads a run's events and state, and fails t unless the log is
// gap-free and folds, with this build, to the run's state.
func history(t *testing.T, ctx context.Context, cl *client.Client, runID string) ([]*reinv1.Event, *reinv1.Run) {
	t.Helper()
	var run *reinv1.Run
	var evs []*reinv1.Event
	err := retry(ctx, func(ctx context.Context) error {
		got, err := cl.Runs.GetRun(ctx, &reinv1.GetRunRequest{RunId: runID})
		if err != nil {
			return err
		}
		run, evs = got.GetRun(), nil
		req := &reinv1.ListEventsRequest{RunId: runID, PageSize: 1000}
		for {
			page, err := cl.Runs.ListEvents(ctx, req)
			if err != nil {
				return err
			}
			evs = append(evs, page.GetEvents()...)
			if page.GetNextPageToken() == "" {
				return nil
			}
			req.PageToken = page.GetNextPageToken()
		}
	})
	if err != nil {
		t.Fatalf("read run %s: %v", runID, err)
	}
	for j, ev := range evs {
		if ev.GetSequence() != uint64(j+1) {
			t.Fatalf("run %s: event %d has sequence %d: a gap or a duplicate", runID, j+1, ev.GetSequence())
		}
	}
	st, err := runstate.ApplyAll(runstate.State{}, evs)
	if err != nil || st.Version != run.GetVersion() || st.Status != run.GetStatus() {
		t.Fatalf("run %s: its log folds to version %d %v (%v), the run is at %d %v", runID, st.Version, st.Status, err, run.GetVersion(), run.GetStatus())
	}
	return evs, run
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
			return fmt.Errorf("run %s is still %v: %w", runID, st, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// pollUntil checks cond every 20ms until it holds, and fails t with what
// says once within has passed (or ctx ended).
func pollUntil(t *testing.T, ctx context.Context, within time.Duration, cond func() bool, what func() string) {
	t.Helper()
	deadline := time.After(within)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("after %v: %s", within, what())
		case <-ctx.Done():
			t.Fatalf("%v: %s", ctx.Err(), what())
		}
	}
}
