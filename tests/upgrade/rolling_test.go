package upgrade_test

// TestRollingUpgrade: three replicas of the old build on one etcd are
// replaced one by one by this build under runs in flight.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/reinhq/rein/client"
	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/etcdtest"
	"github.com/reinhq/rein/internal/storeformat"
	"github.com/reinhq/rein/tests/internal/fixtureledger"
)

const (
	// defaultRuns is how many runs TestRollingUpgrade drives unless
	// REIN_UPGRADE_RUNS says otherwise.
	defaultRuns = 200
	// maxRunning is the tenants' max_running: most runs wait in the queue.
	maxRunning = 4
	leaseTTL   = 2 * time.Second
	etcdPrefix = "/rein-upgrade/"
	readTool   = "records.get"
	writeTool  = "records.update"
	rpcTimeout = 10 * time.Second
)

// kind is what a run's script leads to, and so how it ends.
type kind int

const (
	approved kind = iota // reads, proposes a write that a person approves, completes
	rejected             // reads, proposes a write that a person rejects, completes
	input                // reads, asks a person, completes with the answer
	steps                // reads three times and completes, with no person
	tree                 // delegates two reads to children and completes
	kinds
)

var kindNames = [...]string{"approved", "rejected", "input", "steps", "tree"}

func (k kind) String() string { return kindNames[k] }

// rollingContract is run i's task, of kind i % kinds.
func rollingContract(i int) *reinv1.TaskContract {
	k := kind(i % int(kinds))
	record := fmt.Sprintf("R-%03d", i)
	args, _ := structpb.NewStruct(map[string]any{"record": record})
	reply := func(d *reinv1.Decision) *reinv1.ScriptedReply {
		return &reinv1.ScriptedReply{Reply: &reinv1.ScriptedReply_Decision{Decision: d}, Usage: &reinv1.Usage{InputTokens: 100, OutputTokens: 10}, DelayMs: 100}
	}
	call := func(tool, id string) *reinv1.ScriptedReply {
		return reply(&reinv1.Decision{Action: &reinv1.Decision_ToolCall{ToolCall: &reinv1.ToolCall{Tool: tool, CallId: id, Arguments: args}}})
	}
	answer := reply(&reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: record + ": done."}}})
	c := &reinv1.TaskContract{
		Goal: "Look after record " + record + ".",
		Tools: []*reinv1.ToolGrant{
			{Name: readTool, Description: "Read a record.", Tier: reinv1.ToolTier_TOOL_TIER_READ},
			{Name: writeTool, Description: "Update a record.", Tier: reinv1.ToolTier_TOOL_TIER_WRITE},
		},
		Labels: map[string]string{"kind": k.String()},
		Model:  &reinv1.ModelSpec{Provider: "script", Name: "rolling"},
	}
	switch k {
	case approved, rejected, input:
		// Ahead in the queue: the runs that pause for a person are paused
		// as the upgrade begins, the others still queued behind them.
		c.Priority = 1
	}
	switch k {
	case approved, rejected:
		c.Model.Script = []*reinv1.ScriptedReply{call(readTool, "c1"), call(writeTool, "c2"), answer}
	case input:
		ask := reply(&reinv1.Decision{Action: &reinv1.Decision_AskHuman{AskHuman: &reinv1.AskHuman{Question: "Which field of " + record + "?"}}})
		c.Model.Script = []*reinv1.ScriptedReply{call(readTool, "c1"), ask, answer}
	case steps:
		c.Model.Script = []*reinv1.ScriptedReply{call(readTool, "c1"), call(readTool, "c2"), call(readTool, "c3"), answer}
	case tree:
		task := func(q string) *reinv1.DelegatedTask {
			return &reinv1.DelegatedTask{Question: q + " " + record + "?", Tools: []*reinv1.DelegatedTool{{Name: readTool}}, Budget: &reinv1.DelegatedBudget{MaxSteps: 3}}
		}
		child := &reinv1.ModelSpec{Provider: "script", Name: "reader", Script: []*reinv1.ScriptedReply{call(readTool, "r1"), answer}}
		c.Delegation = &reinv1.DelegationPolicy{MaxChildren: 2, MaxDepth: 1, Tools: []string{readTool}, MaxShare: 0.4, ChildModels: []*reinv1.ModelSpec{child, child}}
		delegate := reply(&reinv1.Decision{Action: &reinv1.Decision_Delegate{Delegate: &reinv1.Delegate{Tasks: []*reinv1.DelegatedTask{task("What is the balance of"), task("Who owns")}}}})
		c.Model.Script = []*reinv1.ScriptedReply{delegate, answer}
		c.Budget = &reinv1.Budget{MaxSteps: 20, MaxTokens: 40000}
	}
	return c
}

// TestRollingUpgrade: three replicas of the old build share one etcd and a
// queue (max_running per tenant), with runs queued, running, paused for
// approval, paused for input and delegating to children. The replicas are
// replaced one by one by this build while more runs start and people
// approve, reject and answer; one old replica is killed with SIGKILL
// mid-upgrade instead of stopped. Afterwards every run ended as its script
// leads (completed, children too), its log is gap-free and folds with this
// build, each approved write was applied once by the fixture ledger and no
// rejected one at all, no running run went longer than the lease TTL (and
// a second for the takeover's look) without a new event, and no replica
// logged a fold failure. Before finalization an old build still joins the
// upgraded cluster; where this build has `rein cluster finalize`, the test
// finalizes, and an old build then refuses to start (exit 2) if the
// finalized format is newer than its own (finalize).
func TestRollingUpgrade(t *testing.T) {
	if testing.Short() {
		t.Skip("one etcd, two builds of rein, three replicas replaced under runs in flight (about a minute)")
	}
	n := defaultRuns
	if v := os.Getenv("REIN_UPGRADE_RUNS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < int(kinds)*3 {
			t.Fatalf("REIN_UPGRADE_RUNS=%q: want a number of runs, at least %d", v, kinds*3)
		}
	}
	root := moduleRoot(t)
	oldBin, commit := oldBuild(t, root)
	newBin := newBuild(t)
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	etcd := etcdtest.Start(t, 1)
	dir := t.TempDir()
	tools, ledger, tenants := filepath.Join(dir, "tools.json"), filepath.Join(dir, "ledger.tsv"), filepath.Join(dir, "tenants.toml")
	if err := os.WriteFile(tools, []byte(`{
  "`+readTool+`": [{"output": {"record": "R-1", "balance": "10.00"}}],
  "`+writeTool+`": [{"preview": {"set": {"balance": "0.00"}}, "receipt": {"update_id": "u_1", "status": "applied"}}]
}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tenants, []byte(fmt.Sprintf("[defaults]\nmax_running = %d\n", maxRunning)), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &cluster{
		args: []string{"--etcd", strings.Join(etcd.Endpoints(), ","), "--etcd-prefix", etcdPrefix, "--lease-ttl", leaseTTL.String(),
			"--tools", "fixture:" + tools, "--fixture-ledger", ledger, "--tenants", tenants, "--rate", "0", "--shutdown-timeout", "10s"},
		live: make([]*server, 3), builds: make([]string, 3), etcd: etcd.Client(), startsOf: map[string]int{},
	}
	for i := range 3 {
		c.names = append(c.names, fmt.Sprintf("replica-%d", i))
		c.addrs = append(c.addrs, freeAddr(t))
	}
	for i := range 3 {
		c.start(t, i, oldBin, "old")
	}
	t.Cleanup(func() {
		if t.Failed() {
			lines := c.logs()
			t.Logf("the replicas' logs (last 150 lines):\n%s", strings.Join(lines[max(0, len(lines)-150):], "\n"))
		}
	})
	// Each caller's list of replicas starts at another one, as callers
	// spread over them do.
	var clients []*client.Client
	for i := range 3 {
		clients = append(clients, dial(t, append(slices.Clone(c.addrs[i:]), c.addrs[:i]...)...))
	}
	cl := clients[0]

	ids := make([]string, n)
	startRun := func(i int) error {
		return retry(ctx, func(ctx context.Context) error {
			resp, err := clients[i%3].Runs.StartRun(ctx, &reinv1.StartRunRequest{RequestId: fmt.Sprintf("rolling-%03d", i), Contract: rollingContract(i)})
			ids[i] = resp.GetRun().GetRunId()
			return err
		})
	}
	var stall stalls
	followCtx, stopFollowing := context.WithCancel(ctx)
	followed := make(chan struct{})
	go func() { defer close(followed); stall.follow(followCtx, cl) }()

	// Half the runs start on the old build; the upgrade begins once those
	// that pause for a person have paused, while others are queued, others
	// running, and a tree has children running, all at once.
	before := n / 2
	pausing := 0
	for i := range before {
		if k := kind(i % int(kinds)); k == approved || k == rejected || k == input {
			pausing++
		}
		if err := startRun(i); err != nil {
			t.Fatalf("start run %d on the old build: %v", i, err)
		}
	}
	var counts map[reinv1.RunStatus]int
	var children int
	allStates := func() bool {
		var err error
		if counts, children, err = states(ctx, cl); err != nil {
			t.Fatal(err)
		}
		return counts[reinv1.RunStatus_RUN_STATUS_QUEUED] > 0 && counts[reinv1.RunStatus_RUN_STATUS_RUNNING] > 0 && children > 0 &&
			counts[reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL]+counts[reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT] == pausing
	}
	pollUntil(t, ctx, time.Minute, allStates, func() string {
		return fmt.Sprintf("the old build never had runs in every state at once, with all %d that pause for a person paused: %v, %d children running", pausing, counts, children)
	})
	t.Logf("on the old build (%s), as the upgrade begins: %d queued, %d running (%d of them children), %d paused for approval, %d paused for input, %d ended",
		commit, counts[reinv1.RunStatus_RUN_STATUS_QUEUED], counts[reinv1.RunStatus_RUN_STATUS_RUNNING], children,
		counts[reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL], counts[reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT], counts[reinv1.RunStatus_RUN_STATUS_COMPLETED])

	// People decide from here on, through this build's client.
	var decided atomic.Int64
	peopleCtx, stopPeople := context.WithCancel(ctx)
	peopleErr := make(chan error, 1)
	go func() { peopleErr <- people(peopleCtx, clients[1], &decided) }()

	// The upgrade: each step starts a third of the other runs, a few
	// milliseconds apart, and replaces a replica while they start. The
	// first and last replicas are stopped; the middle step kills one of
	// the two old replicas left, one that drives a run, with SIGKILL.
	var starting sync.WaitGroup
	startErrs := make(chan error, n)
	batch := func(from, to int) {
		starting.Go(func() {
			for i := from; i < to; i++ {
				if err := startRun(i); err != nil {
					startErrs <- fmt.Errorf("start run %d during the upgrade: %w", i, err)
					return
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		})
	}
	rest := n - before
	var killed string
	var killedRuns int
	order := []int{0, 1, 2}
	for step := range 3 {
		batch(before+rest*step/3, before+rest*(step+1)/3)
		i := order[step]
		if step == 1 {
			// Of the old replicas left, the first found driving a run.
			pollUntil(t, ctx, 30*time.Second, func() bool {
				for _, j := range order[1:] {
					d, err := c.drives(ctx, cl, j)
					if err != nil {
						t.Fatal(err)
					}
					if d > 0 {
						i, killedRuns = j, d
						return true
					}
				}
				return false
			}, func() string { return "neither old replica left drove a run to kill it under" })
			if i != order[1] {
				order[1], order[2] = order[2], order[1]
			}
			killed = c.names[i]
			c.live[i].kill(t)
		} else {
			c.live[i].stop(t)
		}
		d0 := decided.Load()
		c.start(t, i, newBin, "new")
		t.Logf("step %d: %s now runs this build (%d decisions by people so far, %d during its restart)", step+1, c.names[i], decided.Load(), decided.Load()-d0)
	}
	t.Logf("killed %s with SIGKILL while it drove %d runs", killed, killedRuns)
	starting.Wait()
	close(startErrs)
	for err := range startErrs {
		t.Fatal(err)
	}

	// Every run ends.
	for i, id := range ids {
		if err := waitEnded(ctx, cl, id); err != nil {
			t.Fatalf("run %d (%s, %v): %v; %d decisions by people, the last refused: %v", i, id, kind(i%int(kinds)), err, decided.Load(), lastRefusal.Load())
		}
	}
	stopPeople()
	if err := <-peopleErr; err != nil {
		t.Fatalf("people: %v", err)
	}
	stopFollowing()
	<-followed

	// Each run's history.
	l, err := fixtureledger.Read(ledger)
	if err != nil {
		t.Fatal(err)
	}
	writes, kids := 0, 0
	for i, id := range ids {
		k := kind(i % int(kinds))
		evs, run := history(t, ctx, cl, id)
		if run.GetStatus() != reinv1.RunStatus_RUN_STATUS_COMPLETED {
			t.Errorf("run %d (%s, %v) is %v, want completed", i, id, k, run.GetStatus())
		}
		commits, admitted := 0, 0
		for _, ev := range evs {
			if wc := ev.GetWriteCommitted(); wc != nil {
				commits++
				if got := l.Applied[wc.GetOperationId()]; got != 1 {
					t.Errorf("run %s: operation %s applied %d times by the ledger, want once", id, wc.GetOperationId(), got)
				}
			}
			if ev.GetRunAdmitted() != nil {
				admitted++
			}
			for _, child := range ev.GetDelegationStarted().GetChildren() {
				kids++
				if _, run := history(t, ctx, cl, child.GetRunId()); run.GetStatus() != reinv1.RunStatus_RUN_STATUS_COMPLETED {
					t.Errorf("run %s's child %s is %v, want completed", id, child.GetRunId(), run.GetStatus())
				}
			}
		}
		want := 0
		if k == approved {
			want = 1
		}
		if commits != want {
			t.Errorf("run %d (%s, %v): %d writes committed, want %d", i, id, k, commits, want)
		}
		writes += commits
		if admitted == 0 {
			t.Errorf("run %d (%s, %v) was never admitted from the queue (max_running %d)", i, id, k, maxRunning)
		}
	}
	if len(l.Applied) != writes || l.Repeats != 0 {
		t.Errorf("ledger: %d operations applied for %d writes committed, %d sent again after they were applied", len(l.Applied), writes, l.Repeats)
	}
	if want := 2 * ((n + int(kinds) - 1 - int(tree)) / int(kinds)); kids != want {
		t.Errorf("the trees had %d children, want %d", kids, want)
	}
	stall.mu.Lock()
	worst, worstRun := stall.worst, stall.run
	stall.mu.Unlock()
	if worst > leaseTTL+time.Second {
		t.Errorf("run %s went %v while running without a new event, past the lease TTL %v and a second", worstRun, worst.Round(time.Millisecond), leaseTTL)
	}
	// No replica failed to fold a run. Errors of another kind are shown, not
	// failed on: an old build that takes a run just as its driver ends it
	// (or moves it and leaves) logs "run stopped" with a version conflict
	// (nothing is written: the append is refused). This build reads the run
	// again once it holds the lease, and drops or carries on the run as it
	// is then (engine's drive; internal/engine/takeover_etcd_test.go).
	errorLines := 0
	for _, line := range c.logs() {
		switch {
		case strings.Contains(strings.ToLower(line), "fold"):
			t.Errorf("a replica logged a fold failure: %s", line)
		case strings.Contains(line, "level=ERROR"):
			errorLines++
			t.Logf("a replica logged: %s", line)
		}
	}

	// Before finalization the previous build still joins.
	downgrade := start(t, oldBin, append([]string{"--listen", "127.0.0.1:0", "--name", "replica-old"}, c.args...)...)
	downgrade.stop(t)
	finalize(t, newBin, oldBin, c)
	t.Logf("%d runs (%d approved writes, %d children), %d decisions by people; the longest a running run went without an event: %v (lease TTL %v); %d error lines logged; %v in all",
		n, writes, kids, decided.Load(), worst.Round(time.Millisecond), leaseTTL, errorLines, time.Since(began).Round(time.Second))
}

// finalize ends the upgrade with `rein cluster finalize`, where this build
// has it. An old build then refuses to start when the finalized format is
// newer than the one it writes (a build from before store formats counts
// as storeformat.Base): a build of store formats with exit 2; the old build
// here, from before them, by the prefix's layout, which the finalization
// to format 7 marked rein-etcd-3 (its error exit, 5). While this build
// writes the old build's format, finalization leaves the old build able to
// join, and it must.
func finalize(t *testing.T, newBin, oldBin string, c *cluster) {
	t.Helper()
	help := exec.Command(newBin, "cluster", "finalize", "--help")
	help.Env = cleanEnv()
	if out, err := help.CombinedOutput(); err != nil || !strings.Contains(string(out), "finalize") {
		t.Logf("finalization not checked: this build has no `rein cluster finalize` (%v); the cluster version (issue 49, part 1) adds it", err)
		return
	}
	out := cli(t, newBin, 0, "cluster", "finalize", "--server", c.addrs[0])
	t.Logf("rein cluster finalize: %s", strings.TrimSpace(out))
	args := append([]string{"--listen", "127.0.0.1:0", "--name", "replica-old"}, c.args...)
	if storeformat.Current == storeformat.Base {
		t.Logf("finalized: this build writes format %d, as the old build does, so the old build must still join", storeformat.Current)
		start(t, oldBin, args...).stop(t)
		return
	}
	old := exec.Command(oldBin, append(append([]string{"serve"}, args...), "--reflection=false")...)
	old.Env = cleanEnv()
	refused, err := runWithin(old, 30*time.Second)
	if code := old.ProcessState.ExitCode(); code != 5 || !strings.Contains(refused, `"rein-etcd-3"`) {
		t.Errorf("the old build (format %d) on a cluster finalized to format %d: exit %d (%v), want 5 and its layout error naming \"rein-etcd-3\":\n%s", storeformat.Base, storeformat.Current, code, err, refused)
	}
}

// runWithin runs cmd, killing it after d, and returns its output.
func runWithin(cmd *exec.Cmd, d time.Duration) (string, error) {
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return "", err
	}
	timer := time.AfterFunc(d, func() { _ = cmd.Process.Kill() })
	defer timer.Stop()
	err := cmd.Wait()
	return out.String(), err
}
