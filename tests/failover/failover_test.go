package failover_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/reinhq/rein/client"
	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/etcdtest"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/tests/internal/fixtureledger"
)

const (
	ttl        = 2 * time.Second
	rpcTimeout = 10 * time.Second
)

// contract is run i's task: read a record, update it (a write that needs
// approval), answer. Each model call takes delayMs, so that kills find
// calls in flight.
func contract(i int, delayMs uint32) *reinv1.TaskContract {
	record := fmt.Sprintf("R-%03d", i)
	args, _ := structpb.NewStruct(map[string]any{"record": record})
	reply := func(d *reinv1.Decision) *reinv1.ScriptedReply {
		return &reinv1.ScriptedReply{Reply: &reinv1.ScriptedReply_Decision{Decision: d}, Usage: &reinv1.Usage{InputTokens: 100, OutputTokens: 10}, DelayMs: delayMs}
	}
	call := func(tool, id string) *reinv1.Decision {
		return &reinv1.Decision{Action: &reinv1.Decision_ToolCall{ToolCall: &reinv1.ToolCall{Tool: tool, CallId: id, Arguments: args}}}
	}
	return &reinv1.TaskContract{
		Goal: "Zero the balance of record " + record + ".",
		Tools: []*reinv1.ToolGrant{
			{Name: readTool, Description: "Read a record.", Tier: reinv1.ToolTier_TOOL_TIER_READ},
			{Name: writeTool, Description: "Update a record.", Tier: reinv1.ToolTier_TOOL_TIER_WRITE},
		},
		Model: &reinv1.ModelSpec{Provider: "script", Name: "failover", Script: []*reinv1.ScriptedReply{
			reply(call(readTool, "c1")),
			reply(call(writeTool, "c2")),
			reply(&reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: record + " is zeroed."}}}),
		}},
	}
}

func transient(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted:
		return true
	}
	return false
}

// retry calls f until it succeeds, fails for good, or ctx ends.
func retry(ctx context.Context, f func(ctx context.Context) error) error {
	for {
		cctx, cancel := context.WithTimeout(ctx, rpcTimeout)
		err := f(cctx)
		cancel()
		if err == nil || !transient(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// drive starts run i, approves its write when it pauses and follows it to
// its end. It returns the run's ID.
func drive(ctx context.Context, cl *client.Client, i int, delayMs uint32) (string, error) {
	runID, err := start(ctx, cl, i, delayMs)
	if err != nil {
		return "", err
	}
	return runID, approveToEnd(ctx, cl, runID)
}

func start(ctx context.Context, cl *client.Client, i int, delayMs uint32) (string, error) {
	var runID string
	if err := retry(ctx, func(ctx context.Context) error {
		resp, err := cl.Runs.StartRun(ctx, &reinv1.StartRunRequest{RequestId: fmt.Sprintf("failover-%03d", i), Contract: contract(i, delayMs)})
		runID = resp.GetRun().GetRunId()
		return err
	}); err != nil {
		return "", fmt.Errorf("StartRun %d: %w", i, err)
	}
	return runID, nil
}

// approveToEnd follows a run to its end, approving its write when it
// pauses for it.
func approveToEnd(ctx context.Context, cl *client.Client, runID string) error {
	return cl.Watch(ctx, runID, 0, func(ev *reinv1.Event) error {
		if ev.GetStatusChanged().GetTo() != reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL {
			return nil
		}
		return retry(ctx, func(ctx context.Context) error {
			got, err := cl.Runs.GetRun(ctx, &reinv1.GetRunRequest{RunId: runID})
			if err != nil {
				return err
			}
			p := got.GetRun().GetPending().GetProposal()
			if got.GetRun().GetVersion() > ev.GetSequence() || p == nil {
				return nil // an earlier approval, whose answer was lost, took effect
			}
			_, err = cl.Runs.DecideApproval(ctx, &reinv1.DecideApprovalRequest{RunId: runID, ProposalId: p.GetProposalId(),
				ProposalHash: p.GetHash(), Verdict: reinv1.ApprovalVerdict_APPROVAL_VERDICT_APPROVE, Reason: "failover test"})
			if status.Code(err) == codes.FailedPrecondition {
				return status.Error(codes.Aborted, err.Error()) // look again: decided meanwhile?
			}
			return err
		})
	})
}

// epochOf is the run's lease epoch in etcd (0: none yet).
func epochOf(ctx context.Context, cli *clientv3.Client, runID string) (uint64, error) {
	resp, err := cli.Get(ctx, prefix+"lease/"+runID)
	if err != nil || len(resp.Kvs) == 0 || len(resp.Kvs[0].Value) < 8 {
		return 0, err
	}
	return binary.BigEndian.Uint64(resp.Kvs[0].Value[:8]), nil
}

// drivenBy is the running runs whose owner key names the replica.
func drivenBy(ctx context.Context, cli *clientv3.Client, cl *client.Client, name string) ([]string, error) {
	resp, err := cli.Get(ctx, prefix+"owner/", clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	var runs []string
	for _, kv := range resp.Kvs {
		if string(kv.Value) != name {
			continue
		}
		runID := strings.TrimPrefix(string(kv.Key), prefix+"owner/")
		got, err := cl.Runs.GetRun(ctx, &reinv1.GetRunRequest{RunId: runID})
		if err == nil && got.GetRun().GetStatus() == reinv1.RunStatus_RUN_STATUS_RUNNING {
			runs = append(runs, runID)
		}
	}
	return runs, nil
}

// drivingSoon is drivenBy once the replica drives a run: it waits for one
// (a replica restarted by the kill before has none at first) until the
// runs are finished or limit passes, then returns what the replica drives,
// which may be nothing.
func drivingSoon(ctx context.Context, cli *clientv3.Client, cl *client.Client, name string, finished <-chan struct{}, limit time.Duration) ([]string, error) {
	deadline := time.After(limit)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		runs, err := drivenBy(ctx, cli, cl, name)
		if err != nil || len(runs) > 0 {
			return runs, err
		}
		select {
		case <-tick.C:
		case <-finished:
			return drivenBy(ctx, cli, cl, name)
		case <-deadline:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// resumedWithin waits until every one of runs was taken under a newer
// epoch than it had (or ended), and returns how long that took from since.
func resumedWithin(ctx context.Context, cli *clientv3.Client, cl *client.Client, runs []string, before map[string]uint64, since time.Time, limit time.Duration) (time.Duration, error) {
	left := map[string]bool{}
	for _, r := range runs {
		left[r] = true
	}
	for len(left) > 0 {
		if time.Since(since) > limit {
			return time.Since(since), fmt.Errorf("%d of %d runs not carried on after %v: %v", len(left), len(runs), limit, left)
		}
		for r := range left {
			e, err := epochOf(ctx, cli, r)
			if err != nil {
				return 0, err
			}
			if e > before[r] {
				delete(left, r)
				continue
			}
			if got, err := cl.Runs.GetRun(ctx, &reinv1.GetRunRequest{RunId: r}); err == nil && runstate.Terminal(got.GetRun().GetStatus()) {
				delete(left, r)
			}
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return time.Since(since), ctx.Err()
		}
	}
	return time.Since(since), nil
}

// TestFailover: three etcd members and three replicas; -failover.runs runs
// read, propose a write, are approved and complete while a replica is
// killed with SIGKILL -failover.kills times, a different one each time, and
// restarted. Afterwards every run completed, its log is gap-free and folds,
// each takeover is under a newer epoch, every approved write was applied
// exactly once by the fixture ledger and never sent again, a watcher on a
// surviving replica followed a run of a killed one gap-free to its end, and
// each kill's runs were carried on elsewhere within the lease TTL and 1s.
func TestFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("three etcd members and three rein servers, killed ten times (about a minute)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cluster := etcdtest.Start(t, 3)
	cli := cluster.Client()
	g := newGroup(t, cluster.Endpoints(), ttl)
	reps := []*replica{g.replica(t, "replica-0"), g.replica(t, "replica-1"), g.replica(t, "replica-2")}
	var addrs []string
	for _, r := range reps {
		r.start(t)
		addrs = append(addrs, r.addr)
	}
	cl := dial(t, addrs...)

	// The runs, driven by workers through the list of all three servers,
	// each worker's list starting at another replica, as callers spread
	// over the replicas do: each replica starts runs, so each kill has runs
	// to take from it.
	n := *runsFlag
	runIDs := make([]string, n)
	errs := make([]error, n)
	next := make(chan int, n)
	for i := range n {
		next <- i
	}
	close(next)
	var drivers sync.WaitGroup
	for w := range 5 {
		from := w % len(addrs)
		wcl := dial(t, append(slices.Clone(addrs[from:]), addrs[:from]...)...)
		drivers.Go(func() {
			for i := range next {
				runIDs[i], errs[i] = drive(ctx, wcl, i, 400)
			}
		})
	}

	// The kills.
	type kill struct {
		victim  string
		runs    int
		resumed time.Duration
	}
	var kills []kill
	watched := make(chan error, 1)
	watching := false
	finished := make(chan struct{})
	go func() { drivers.Wait(); close(finished) }()
	for k := range *killsFlag {
		victim := reps[k%len(reps)]
		owned, err := drivingSoon(ctx, cli, cl, victim.name, finished, ttl)
		if err != nil {
			t.Fatal(err)
		}
		before := map[string]uint64{}
		for _, r := range owned {
			if before[r], err = epochOf(ctx, cli, r); err != nil {
				t.Fatal(err)
			}
		}
		if !watching && len(owned) > 0 {
			// Followed from a replica that survives this kill only.
			watching = true
			other := reps[(k+1)%len(reps)]
			go func(runID string) { watched <- followGapFree(ctx, dial(t, other.addr), runID) }(owned[0])
		}
		victim.kill(t)
		killed := time.Now()
		took, err := resumedWithin(ctx, cli, cl, owned, before, killed, ttl+10*time.Second)
		if err != nil {
			t.Fatalf("kill %d of %s: %v", k+1, victim.name, err)
		}
		kills = append(kills, kill{victim.name, len(owned), took})
		victim.start(t)
	}
	drivers.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("run %d (%s): %v", i, runIDs[i], err)
		}
	}
	if watching {
		if err := <-watched; err != nil {
			t.Fatalf("the watcher on a surviving replica: %v", err)
		}
	}

	// The histories.
	ledger := readLedger(t, g.ledger)
	taken, resumedCalls := 0, 0
	for _, runID := range runIDs {
		h := checkHistory(t, ctx, cl, ledger, runID)
		taken += len(h.taken)
		resumedCalls += h.resumed
	}
	if len(ledger.Applied) != n || ledger.Repeats != 0 {
		t.Errorf("ledger: %d operations applied for %d runs, %d sent again after they were applied", len(ledger.Applied), n, ledger.Repeats)
	}
	total, worst := 0, time.Duration(0)
	var lines []string
	for _, k := range kills {
		total += k.runs
		worst = max(worst, k.resumed)
		lines = append(lines, fmt.Sprintf("%s: %d runs in %v", k.victim, k.runs, k.resumed.Round(time.Millisecond)))
	}
	t.Logf("%d runs, %d kills; %d runs driven by a killed replica, %d run_taken, %d model calls sent again; kill to resumed elsewhere (TTL %v): %s",
		n, len(kills), total, taken, resumedCalls, ttl, strings.Join(lines, "; "))
	if total == 0 {
		t.Fatal("no kill found a run being driven: the test proved nothing")
	}
	if worst > ttl+time.Second {
		t.Errorf("the slowest takeover took %v, over the lease TTL %v and 1s", worst, ttl)
	}
}

// followGapFree watches a run from its start to its end and fails on a
// gap or a duplicate.
func followGapFree(ctx context.Context, cl *client.Client, runID string) error {
	var seen uint64
	return cl.Watch(ctx, runID, 0, func(ev *reinv1.Event) error {
		if ev.GetSequence() != seen+1 {
			return fmt.Errorf("run %s: event %d after %d", runID, ev.GetSequence(), seen)
		}
		seen = ev.GetSequence()
		return nil
	})
}

func allEvents(t *testing.T, ctx context.Context, cl *client.Client, runID string) ([]*reinv1.Event, *reinv1.Run) {
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
	return evs, run
}

// readLedger is the fixture ledger at path.
func readLedger(t *testing.T, path string) fixtureledger.Ledger {
	t.Helper()
	l, err := fixtureledger.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// history is what checkHistory found in a run's log.
type history struct {
	taken   []*reinv1.RunTaken
	resumed int // model calls sent again
}

// checkHistory fails t unless the run completed with a gap-free log that
// folds to its state, each run_taken under a newer epoch, and its one write
// applied once by the ledger.
func checkHistory(t *testing.T, ctx context.Context, cl *client.Client, l fixtureledger.Ledger, runID string) history {
	t.Helper()
	evs, run := allEvents(t, ctx, cl, runID)
	if run.GetStatus() != reinv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Errorf("run %s is %v, want completed", runID, run.GetStatus())
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
	var h history
	var epoch uint64
	commits := 0
	for _, ev := range evs {
		if rt := ev.GetRunTaken(); rt != nil {
			if rt.GetEpoch() <= epoch {
				t.Fatalf("run %s: run_taken at %d under epoch %d, not past %d", runID, ev.GetSequence(), rt.GetEpoch(), epoch)
			}
			epoch = rt.GetEpoch()
			h.taken = append(h.taken, rt)
		}
		if ev.GetModelRequested().GetResumed() {
			h.resumed++
		}
		if wc := ev.GetWriteCommitted(); wc != nil {
			commits++
			if l.Applied[wc.GetOperationId()] != 1 {
				t.Errorf("run %s: operation %s applied %d times by the ledger", runID, wc.GetOperationId(), l.Applied[wc.GetOperationId()])
			}
		}
	}
	if commits != 1 {
		t.Errorf("run %s: %d write_committed, want 1", runID, commits)
	}
	return h
}

// TestPausedReplicaIsFenced: a replica driving runs is stopped with SIGSTOP
// past its lease TTL; the other takes its runs over under new epochs and
// carries them on; when the first is resumed with SIGCONT it finds its
// lease lost and stops driving them, and nothing it still tried to append
// is in any log (each log folds, and each write was applied once). The
// twin: before the stop, the other replica leaves the runs alone.
func TestPausedReplicaIsFenced(t *testing.T) {
	if testing.Short() {
		t.Skip("three etcd members and two rein servers, one paused past its lease")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cluster := etcdtest.Start(t, 3)
	cli := cluster.Client()
	g := newGroup(t, cluster.Endpoints(), ttl)
	a, b := g.replica(t, "replica-a"), g.replica(t, "replica-b")
	a.start(t)
	b.start(t)
	onA, onB := dial(t, a.addr), dial(t, b.addr)
	var runs []string
	for i := range 4 {
		runID, err := start(ctx, onA, i, 1500)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, runID)
	}
	var owned []string
	pollUntil(t, ctx, 20*time.Second, func() bool {
		var err error
		if owned, err = drivenBy(ctx, cli, onB, a.name); err != nil {
			t.Fatal(err)
		}
		return len(owned) >= len(runs)
	}, func() string { return fmt.Sprintf("A drives %d of the %d runs it started", len(owned), len(runs)) })
	before := map[string]uint64{}
	for _, r := range owned {
		before[r], _ = epochOf(ctx, cli, r)
	}
	// The twin: B leaves A's runs alone. B looks over the runs once per TTL
	// and nothing outside its process says when it has, so the test watches
	// the runs' epochs for a whole TTL, and a quarter more for the look
	// that starts at its end, and fails at the first one taken.
	holdsFor(t, ctx, ttl+ttl/4, func() string {
		for _, r := range owned {
			e, err := epochOf(ctx, cli, r)
			if err != nil {
				t.Fatal(err)
			}
			if e != before[r] {
				return fmt.Sprintf("run %s was taken (epoch %d → %d) while A held its lease", r, before[r], e)
			}
		}
		return ""
	})

	a.signal(t, syscall.SIGSTOP)
	stopped := time.Now()
	took, err := resumedWithin(ctx, cli, onB, owned, before, stopped, ttl+10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// A stays paused past the takeover: until B has recorded it, a
	// run_taken under B's epoch, in the log of every run it carries on. B
	// records it with its first commit; a run A had paused for a person
	// before its own pause (nothing recorded since) gets it with the commit
	// after the decision, and is not waited for here.
	var untaken []string
	pollUntil(t, ctx, 10*time.Second, func() bool {
		untaken = nil
		for _, r := range owned {
			evs, run := allEvents(t, ctx, onB, r)
			taken := slices.ContainsFunc(evs, func(ev *reinv1.Event) bool { return ev.GetRunTaken().GetEpoch() > before[r] })
			waits := run.GetStatus() == reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL && len(evs) > 0 &&
				evs[len(evs)-1].GetRecordedAt().AsTime().Before(stopped)
			if !taken && !waits {
				untaken = append(untaken, r)
			}
		}
		return len(untaken) == 0
	}, func() string { return fmt.Sprintf("B has not recorded its takeover of %v", untaken) })
	a.signal(t, syscall.SIGCONT)
	t.Logf("A paused; its %d runs carried on by B %v after the pause", len(owned), took.Round(time.Millisecond))

	for _, r := range runs {
		if err := approveToEnd(ctx, onB, r); err != nil {
			t.Fatalf("run %s: %v", r, err)
		}
	}
	l := readLedger(t, g.ledger)
	for _, r := range runs {
		h := checkHistory(t, ctx, onB, l, r)
		if len(h.taken) == 0 || h.taken[len(h.taken)-1].GetOwner() == "" {
			t.Errorf("run %s has no run_taken after A's pause", r)
		}
	}
	if l.Repeats != 0 || len(l.Applied) != len(runs) {
		t.Errorf("ledger: %d operations applied for %d runs, %d sent again", len(l.Applied), len(runs), l.Repeats)
	}
	pollUntil(t, ctx, 10*time.Second, func() bool { return g.log.count(a.name+"/", "lost its etcd lease") > 0 },
		func() string { return "A, resumed, never said it lost its lease" })
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

// holdsFor checks every 20ms for d that nothing is wrong: broken says
// what is, or "". It fails t at the first thing wrong.
func holdsFor(t *testing.T, ctx context.Context, d time.Duration, broken func() string) {
	t.Helper()
	end := time.After(d)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if what := broken(); what != "" {
			t.Fatal(what)
		}
		select {
		case <-tick.C:
		case <-end:
			if what := broken(); what != "" {
				t.Fatal(what)
			}
			return
		case <-ctx.Done():
			t.Fatalf("watching for %v: %v", d, ctx.Err())
		}
	}
}
