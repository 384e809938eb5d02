package bench

// The failover scenario: rein serve --etcd replicas (processes of this
// binary) over one etcd cluster. It measures how long after a replica is
// killed its running runs are carried on by the others (10 kills, a lease
// TTL of 2s), and how many runs a second 1, 2 and 3 replicas complete on
// this machine. Both figures are bounded here by what shares the machine:
// every replica, etcd and the driver run on the same cores.

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// FailoverTTL is the replicas' lease TTL in the failover scenario.
const FailoverTTL = 2 * time.Second

// Failover is what the failover scenario needs beyond Options.
type Failover struct {
	// Etcd is a client of the cluster; Endpoints its members, as
	// --etcd takes them; Prefix a key prefix of the scenario's own, under
	// which each phase takes a fresh one.
	Etcd      *clientv3.Client
	Endpoints string
	Prefix    string
	// Replica is the command of one `rein serve` replica: listening on
	// listen, named name, on the etcd prefix with the lease TTL, with the
	// tools of the fixture file tools. It must log msg="rein serving" on
	// stderr once it serves.
	Replica func(listen, name, prefix string, ttl time.Duration, tools string) *exec.Cmd
}

var failoverTools = `{"records.get": [{"output": {"record": "R-1"}}]}`

// RunFailover runs the failover scenario: the worst kill-to-resumed time
// against the bound of the lease TTL and 1s (ratio bound/worst, target 1),
// with runs per second at 1, 2 and 3 replicas in Extra.
func RunFailover(ctx context.Context, o Options, f Failover) (Result, error) {
	r := Result{Scenario: "failover", Unit: "s worst kill to resumed", Target: 1, Extra: map[string]float64{}}
	if f.Etcd == nil || f.Replica == nil {
		return r, errors.New("bench failover: no etcd cluster or replica command given")
	}
	dir, err := tempDir(o, "failover")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	tools := filepath.Join(dir, "tools.json")
	if err := os.WriteFile(tools, []byte(failoverTools), 0o600); err != nil {
		return r, err
	}
	runs := o.scaled(150, 6)
	for n := 1; n <= 3; n++ {
		g, err := startReplicas(ctx, f, fmt.Sprintf("%sthroughput-%d/", f.Prefix, n), n, tools, dir)
		if err != nil {
			return r, err
		}
		rate, err := g.throughput(ctx, runs)
		g.stop()
		if err != nil {
			return r, err
		}
		r.Extra[fmt.Sprintf("runs_per_s_%d", n)] = rate
	}
	g, err := startReplicas(ctx, f, f.Prefix+"kills/", 3, tools, dir)
	if err != nil {
		return r, err
	}
	defer g.stop()
	kills := o.scaled(10, 2)
	times, carried, err := g.kills(ctx, kills)
	if err != nil {
		return r, err
	}
	slices.Sort(times)
	worst := times[len(times)-1]
	bound := (FailoverTTL + time.Second).Seconds()
	r.Figure, r.Baseline = worst, bound
	r.Ratio = bound / worst
	r.Met = r.Ratio >= r.Target
	r.Runs, r.Rounds = runs, kills
	r.Figures = times
	r.Extra["kills"] = float64(kills)
	r.Extra["runs_carried_on"] = float64(carried)
	r.Extra["median_kill_to_resumed_s"] = times[len(times)/2]
	r.Extra["lease_ttl_s"] = FailoverTTL.Seconds()
	return r, nil
}

// replicaGroup is the replicas of one phase.
type replicaGroup struct {
	f      Failover
	prefix string
	tools  string
	dir    string
	reps   []*benchReplica
	conns  []*grpc.ClientConn
	runs   []reinv1.RunServiceClient
	// admin says the replicas serve operators' HTTP (rein serve
	// --admin-listen): start waits for its address too.
	admin bool
}

type benchReplica struct {
	name, addr string
	// admin is the address of its operators' HTTP (/metrics), when the
	// group's replicas serve it.
	admin  string
	cmd    *exec.Cmd
	exited chan struct{}
	mu     sync.Mutex
	tail   []string
}

var (
	replicaServingRe = regexp.MustCompile(`msg="rein serving" addr=(\S+)`)
	replicaAdminRe   = regexp.MustCompile(`msg="serving operators' HTTP" admin_addr=(\S+)`)
)

func startReplicas(ctx context.Context, f Failover, prefix string, n int, tools, dir string) (*replicaGroup, error) {
	return startGroup(ctx, &replicaGroup{f: f, prefix: prefix, tools: tools, dir: dir}, n)
}

// startGroup starts n replicas of g, with a client of each.
func startGroup(ctx context.Context, g *replicaGroup, n int) (*replicaGroup, error) {
	for i := range n {
		rep := &benchReplica{name: fmt.Sprintf("replica-%d", i)}
		if err := g.start(ctx, rep, "127.0.0.1:0"); err != nil {
			g.stop()
			return nil, err
		}
		g.reps = append(g.reps, rep)
		cc, err := grpc.NewClient(rep.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			g.stop()
			return nil, err
		}
		g.conns = append(g.conns, cc)
		g.runs = append(g.runs, reinv1.NewRunServiceClient(cc))
	}
	return g, nil
}

// start starts rep on listen and waits until it logs its address (and,
// with g.admin, its operators' HTTP address).
func (g *replicaGroup) start(ctx context.Context, rep *benchReplica, listen string) error {
	rep.cmd = g.f.Replica(listen, rep.name, g.prefix, FailoverTTL, g.tools)
	rep.cmd.Stdout = io.Discard
	stderr, err := rep.cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := rep.cmd.Start(); err != nil {
		return fmt.Errorf("start replica %s: %w", rep.name, err)
	}
	rep.exited = make(chan struct{})
	addrc, adminc := make(chan string, 1), make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			rep.mu.Lock()
			rep.tail = append(rep.tail, line)
			if len(rep.tail) > 20 {
				rep.tail = rep.tail[1:]
			}
			rep.mu.Unlock()
			if m := replicaServingRe.FindStringSubmatch(line); m != nil {
				select {
				case addrc <- m[1]:
				default:
				}
			}
			if m := replicaAdminRe.FindStringSubmatch(line); m != nil {
				select {
				case adminc <- m[1]:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		_ = rep.cmd.Wait()
		close(rep.exited)
	}()
	timeout := time.After(30 * time.Second)
	for served, admin := false, !g.admin; !served || !admin; {
		select {
		case rep.addr = <-addrc:
			served = true
		case rep.admin = <-adminc:
			admin = true
		case <-rep.exited:
			return fmt.Errorf("replica %s exited before serving:\n%s", rep.name, rep.log())
		case <-timeout:
			return fmt.Errorf("replica %s did not serve within 30s:\n%s", rep.name, rep.log())
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (rep *benchReplica) log() string {
	rep.mu.Lock()
	defer rep.mu.Unlock()
	return strings.Join(rep.tail, "\n")
}

// stop ends every replica (SIGTERM, then SIGKILL after 10s).
func (g *replicaGroup) stop() {
	for _, cc := range g.conns {
		_ = cc.Close()
	}
	for _, rep := range g.reps {
		if rep.cmd == nil || rep.cmd.Process == nil {
			continue
		}
		_ = rep.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-rep.exited:
		case <-time.After(10 * time.Second):
			_ = rep.cmd.Process.Kill()
			<-rep.exited
		}
	}
}

func failoverContract(i int, delayMs uint32) *reinv1.TaskContract {
	args, _ := structpb.NewStruct(map[string]any{"record": fmt.Sprintf("R-%d", i)})
	reply := func(d *reinv1.Decision) *reinv1.ScriptedReply {
		return &reinv1.ScriptedReply{Reply: &reinv1.ScriptedReply_Decision{Decision: d}, Usage: &reinv1.Usage{InputTokens: 100, OutputTokens: 10}, DelayMs: delayMs}
	}
	return &reinv1.TaskContract{
		Goal:  "Read a record.",
		Tools: []*reinv1.ToolGrant{{Name: "records.get", Tier: reinv1.ToolTier_TOOL_TIER_READ}},
		Model: &reinv1.ModelSpec{Provider: "script", Name: "bench", Script: []*reinv1.ScriptedReply{
			reply(&reinv1.Decision{Action: &reinv1.Decision_ToolCall{ToolCall: &reinv1.ToolCall{Tool: "records.get", CallId: "c1", Arguments: args}}}),
			reply(&reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: "read"}}}),
		}},
	}
}

// waitEnded waits until the run is terminal, following it on replica i.
func (g *replicaGroup) waitEnded(ctx context.Context, runID string) error {
	for attempt := 0; ; attempt++ {
		for _, c := range g.runs {
			got, err := c.GetRun(ctx, &reinv1.GetRunRequest{RunId: runID})
			if err == nil {
				if s := got.GetRun().GetStatus(); s != reinv1.RunStatus_RUN_STATUS_RUNNING {
					if s != reinv1.RunStatus_RUN_STATUS_COMPLETED {
						return fmt.Errorf("run %s ended %v", runID, s)
					}
					return nil
				}
				break
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// throughput starts runs spread over the replicas (run i on replica i mod
// n), 32 at a time, and returns the runs completed per second.
func (g *replicaGroup) throughput(ctx context.Context, runs int) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	next := make(chan int, runs)
	for i := range runs {
		next <- i
	}
	close(next)
	errs := make(chan error, 32)
	t0 := time.Now()
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for i := range next {
				c := g.runs[i%len(g.runs)]
				resp, err := c.StartRun(ctx, &reinv1.StartRunRequest{RequestId: fmt.Sprintf("bench-%d", i), Contract: failoverContract(i, 0)})
				if err == nil {
					err = g.waitEnded(ctx, resp.GetRun().GetRunId())
				}
				if err != nil {
					errs <- fmt.Errorf("run %d on %d replicas: %w", i, len(g.runs), err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	return float64(runs) / time.Since(t0).Seconds(), nil
}

// kills keeps runs going on three replicas and kills one (SIGKILL) at a
// time, a different one each time, restarting it after its runs were
// carried on; it returns each kill's time from the kill to every run the
// victim drove taken under a newer epoch, and how many runs were carried.
func (g *replicaGroup) kills(ctx context.Context, kills int) ([]float64, int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 12 {
		wg.Go(func() {
			for i := w; ; i += 12 {
				select {
				case <-stop:
					return
				default:
				}
				for _, c := range slices.Concat(g.runs[i%3:], g.runs[:i%3]) {
					resp, err := c.StartRun(ctx, &reinv1.StartRunRequest{RequestId: fmt.Sprintf("kill-%d", i), Contract: failoverContract(i, 500)})
					if err == nil {
						_ = g.waitEnded(ctx, resp.GetRun().GetRunId())
						break
					}
				}
			}
		})
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	var times []float64
	carried := 0
	for k := range kills {
		time.Sleep(time.Second)
		victim := g.reps[k%len(g.reps)]
		owned, before, err := g.drivenBy(ctx, victim.name)
		if err != nil {
			return nil, 0, err
		}
		if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			return nil, 0, err
		}
		<-victim.exited
		killed := time.Now()
		for len(owned) > 0 {
			if time.Since(killed) > FailoverTTL+30*time.Second {
				return nil, 0, fmt.Errorf("kill %d of %s: %d runs not carried on after %v", k+1, victim.name, len(owned), time.Since(killed))
			}
			for _, runID := range slices.Clone(owned) {
				e, err := g.epoch(ctx, runID)
				if err != nil {
					return nil, 0, err
				}
				switch {
				case e > before[runID]:
					owned = slices.DeleteFunc(owned, func(s string) bool { return s == runID })
					carried++
				case g.ended(ctx, runID):
					// It ended before the kill: nothing to carry on.
					owned = slices.DeleteFunc(owned, func(s string) bool { return s == runID })
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
		times = append(times, time.Since(killed).Seconds())
		if err := g.start(ctx, victim, victim.addr); err != nil {
			return nil, 0, err
		}
	}
	return times, carried, nil
}

// ended reports whether the run is terminal, as a live replica says.
func (g *replicaGroup) ended(ctx context.Context, runID string) bool {
	for _, c := range g.runs {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		got, err := c.GetRun(cctx, &reinv1.GetRunRequest{RunId: runID})
		cancel()
		if err == nil {
			return got.GetRun().GetStatus() != reinv1.RunStatus_RUN_STATUS_RUNNING
		}
	}
	return false
}

// drivenBy is the running runs whose owner key names the replica, with
// their lease epochs.
func (g *replicaGroup) drivenBy(ctx context.Context, name string) ([]string, map[string]uint64, error) {
	resp, err := g.f.Etcd.Get(ctx, g.prefix+"owner/", clientv3.WithPrefix())
	if err != nil {
		return nil, nil, err
	}
	var runs []string
	epochs := map[string]uint64{}
	for _, kv := range resp.Kvs {
		if string(kv.Value) != name {
			continue
		}
		runID := strings.TrimPrefix(string(kv.Key), g.prefix+"owner/")
		if epochs[runID], err = g.epoch(ctx, runID); err != nil {
			return nil, nil, err
		}
		runs = append(runs, runID)
	}
	return runs, epochs, nil
}

func (g *replicaGroup) epoch(ctx context.Context, runID string) (uint64, error) {
	resp, err := g.f.Etcd.Get(ctx, g.prefix+"lease/"+runID)
	if err != nil || len(resp.Kvs) == 0 || len(resp.Kvs[0].Value) < 8 {
		return 0, err
	}
	return binary.BigEndian.Uint64(resp.Kvs[0].Value[:8]), nil
}
