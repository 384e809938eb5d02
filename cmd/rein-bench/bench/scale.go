package bench

// The scale scenario: N rein serve --etcd replicas (processes of the rein
// binary) over one etcd cluster, for N in 1, 2, 4, 8. It shows whether a
// replica's work follows the runs it drives and the streams it serves, or
// every run of the cluster: replica 0, the observer, is sent no request,
// while the others drive a steady workload of steps; the observer's CPU
// and the bytes its etcd client receives, per 1,000 steps driven
// elsewhere, are set against what it spends idle over the same time. Then
// the prefix is filled with finished runs, and the observer's idle cost
// measured again: a server's look over the runs must not grow with the
// runs that ended. Everything shares this machine's cores: a replica's CPU
// is its own process's (/proc/PID/stat), but etcd and the driver slow it.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reinhq/rein/internal/store"
)

// Sizes and targets of the scale scenario at scale 1.
const (
	// ScaleTTL is the replicas' lease TTL.
	ScaleTTL = 2 * time.Second
	// ScaleMaxRuns is each replica's --max-runs.
	ScaleMaxRuns = 16
	// scaleTarget bounds each of the observer's ratios: what it spends
	// while others work, or with the finished runs, over what it spends
	// idle, or without them.
	scaleTarget = 1.05
	// scalePaused is how many runs wait for a person throughout.
	scalePaused = 1000
	// scaleSteps is the workload's steps for each replica that drives it,
	// scaleStepsPerRun a run's (three tool reads and a final answer),
	// scaleClients the clients driving each such replica: every driving
	// replica has the same work at any N, so that its CPU per step is
	// comparable across N.
	scaleSteps       = 2000
	scaleStepsPerRun = 4
	scaleClients     = 4
	// scaleFinished is how many finished runs the look-over phase adds,
	// scaleFillers at once, for at most scaleFillBudget: the store
	// serializes creations on its change cursor (one etcd round trip each,
	// about a millisecond here), and a server whose look over the runs
	// grows with them slows the fill down further; past the budget the
	// phase measures what was added.
	scaleFinished   = 100_000
	scaleFillers    = 16
	scaleFillBudget = 4 * time.Minute
	// scaleIdle is an idle measurement's length, past three lease TTLs (a
	// lease's keep-alives come every third of its TTL); scaleSettle is the
	// wait before one, for what a phase started to end.
	scaleIdle   = 8 * time.Second
	scaleSettle = ScaleTTL
	// scaleFillSettle is the wait after the fill before the idle measure.
	scaleFillSettle = 5 * ScaleTTL
)

// Scale is what the scale scenario needs beyond Options.
type Scale struct {
	// Etcd is a client of the cluster; Endpoints its members, as --etcd
	// takes them; Prefix a key prefix of the scenario's own, under which
	// each replica count takes a fresh one.
	Etcd      *clientv3.Client
	Endpoints string
	Prefix    string
	// Replica is the command of one `rein serve` replica, as Failover's,
	// serving operators' HTTP on admin (it must log msg="serving
	// operators' HTTP" admin_addr=HOST:PORT, and serve
	// rein_etcd_received_bytes_total and rein_steps_total on /metrics) and
	// driving at most maxRuns runs at once.
	Replica func(listen, admin, name, prefix string, ttl time.Duration, maxRuns int, tools string) *exec.Cmd
	// Open opens rein's store under prefix on the cluster, in this
	// process, to fill it with finished runs; the scenario closes it.
	Open func(ctx context.Context, prefix string) (store.Store, error)
	// Replicas are the replica counts to measure, in order; nil is 1, 2,
	// 4, 8.
	Replicas []int
}

// ScaleResult is the scale scenario's measurement: Result's headline (the
// worst of the observer's CPU ratios against the bound, scaleTarget), a
// group for each replica count and the look-over phase. Fields are added,
// never renamed.
type ScaleResult struct {
	Result
	Groups   []ScaleGroup   `json:"groups"`
	LookOver *ScaleLookOver `json:"look_over,omitempty"`
}

// ScaleGroup is one replica count's measurement.
type ScaleGroup struct {
	Replicas int `json:"replicas"`
	// Paused is how many runs waited for a person throughout.
	Paused int `json:"paused_runs"`
	// IdleSeconds and BusySeconds are the phases' wall times; Steps the
	// steps the workload took (every replica's rein_steps_total).
	IdleSeconds float64 `json:"idle_seconds"`
	BusySeconds float64 `json:"busy_seconds"`
	Steps       float64 `json:"steps"`
	// CPUMsPerStep is the CPU the replicas that drove the workload spent
	// per step they drove, over them all; AloneCPUMsPerStep the CPU per step of
	// the first of them driving the same work alone, the others idle.
	CPUMsPerStep      float64 `json:"cpu_ms_per_step"`
	AloneCPUMsPerStep float64 `json:"alone_cpu_ms_per_step"`
	// NoEtcdBytes says the rein binary has no
	// rein_etcd_received_bytes_total (a build from before it): its etcd
	// figures read 0.
	NoEtcdBytes bool `json:"no_etcd_bytes,omitempty"`
	// EtcdDBBytesPerStep is how much etcd's backend file grew per step of
	// the workload: what a step stores, with the history etcd keeps until
	// it is compacted (0 when it could not be read).
	EtcdDBBytesPerStep float64 `json:"etcd_db_bytes_per_step"`
	// Observer is replica 0's figures; nil with one replica, which drives
	// the workload itself.
	Observer   *ScaleObserver `json:"observer,omitempty"`
	PerReplica []ScaleReplica `json:"per_replica"`
}

// ScaleReplica is one replica's figures in a group.
type ScaleReplica struct {
	Name string `json:"name"`
	// Observer says clients sent it nothing.
	Observer bool `json:"observer"`
	// IdleCPUMsPerS and IdleEtcdKBPerS are its idle rates.
	IdleCPUMsPerS  float64 `json:"idle_cpu_ms_per_s"`
	IdleEtcdKBPerS float64 `json:"idle_etcd_kb_per_s"`
	// Steps is what it drove while busy; BusyCPUMs and BusyEtcdKB what it
	// spent and received then; CPUMsPerStep their ratio (0 with no steps).
	Steps        float64 `json:"steps"`
	BusyCPUMs    float64 `json:"busy_cpu_ms"`
	BusyEtcdKB   float64 `json:"busy_etcd_kb"`
	CPUMsPerStep float64 `json:"cpu_ms_per_step"`
}

// ScaleObserver is the observer's cost of the steps other replicas drove,
// per 1,000 of them, while busy and, at its idle rates, over the same wall
// time; the ratios are busy over idle.
type ScaleObserver struct {
	StepsElsewhere float64 `json:"steps_elsewhere"`
	BusyCPUMs      float64 `json:"busy_cpu_ms_per_1k_steps"`
	IdleCPUMs      float64 `json:"idle_cpu_ms_per_1k_steps"`
	CPURatio       float64 `json:"cpu_ratio"`
	BusyEtcdKB     float64 `json:"busy_etcd_kb_per_1k_steps"`
	IdleEtcdKB     float64 `json:"idle_etcd_kb_per_1k_steps"`
	EtcdRatio      float64 `json:"etcd_ratio"`
}

// ScaleLookOver is the observer's idle cost before and after the prefix
// was filled with finished runs.
type ScaleLookOver struct {
	Replicas int `json:"replicas"`
	// Finished is how many finished runs were added, in FillSeconds, of
	// Wanted (fewer when the fill took scaleFillBudget); FillCPUMs and
	// FillEtcdKB are what the observer spent and received meanwhile.
	Finished    int     `json:"finished_runs"`
	Wanted      int     `json:"finished_runs_wanted"`
	FillSeconds float64 `json:"fill_seconds"`
	FillCPUMs   float64 `json:"fill_cpu_ms"`
	FillEtcdKB  float64 `json:"fill_etcd_kb"`
	// EtcdDBBytesPerRun is how much etcd's backend file grew per finished
	// run added (0 when it could not be read).
	EtcdDBBytesPerRun float64 `json:"etcd_db_bytes_per_finished_run"`
	// Before and After are idle rates (per second).
	BeforeCPUMsPerS  float64 `json:"before_cpu_ms_per_s"`
	AfterCPUMsPerS   float64 `json:"after_cpu_ms_per_s"`
	CPURatio         float64 `json:"cpu_ratio"`
	BeforeEtcdKBPerS float64 `json:"before_etcd_kb_per_s"`
	AfterEtcdKBPerS  float64 `json:"after_etcd_kb_per_s"`
	EtcdRatio        float64 `json:"etcd_ratio"`
}

var scaleTools = `{"records.get": [{"output": {"record": "R-1", "status": "open"}}],
 "records.update": [{"preview": {"record": "R-1", "status": "closed"}, "receipt": {"updated": true}}]}`

// RunScale runs the scale scenario. Its figure is the worst of the
// observer's CPU ratios (busy over idle at each replica count from 2, and
// the look-over's after over before), against the bound scaleTarget: ratio
// bound/worst, target 1.
func RunScale(ctx context.Context, o Options, s Scale) (ScaleResult, error) {
	t0 := time.Now()
	r := ScaleResult{Result: Result{Scenario: "scale", Unit: "× the observer's idle CPU, worst", Baseline: scaleTarget, Target: 1, Extra: map[string]float64{}}}
	if s.Etcd == nil || s.Replica == nil || s.Open == nil {
		return r, errors.New("bench scale: no etcd cluster, replica command or store given")
	}
	counts := s.Replicas
	if len(counts) == 0 {
		counts = []int{1, 2, 4, 8}
	}
	if slices.ContainsFunc(counts, func(n int) bool { return n < 1 }) {
		return r, fmt.Errorf("bench scale: replica counts %v: each must be at least 1", counts)
	}
	dir, err := tempDir(o, "scale")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	tools := filepath.Join(dir, "tools.json")
	if err := os.WriteFile(tools, []byte(scaleTools), 0o600); err != nil {
		return r, err
	}
	f := Failover{Etcd: s.Etcd, Endpoints: s.Endpoints, Prefix: s.Prefix,
		Replica: func(listen, name, prefix string, ttl time.Duration, tools string) *exec.Cmd {
			return s.Replica(listen, "127.0.0.1:0", name, prefix, ttl, ScaleMaxRuns, tools)
		}}
	// The look-over is measured on two replicas, or the last count.
	look := counts[len(counts)-1]
	if slices.Contains(counts, 2) {
		look = 2
	}
	sz := scaleSizes{paused: o.scaled(scalePaused, 10), steps: o.scaled(scaleSteps, 10*scaleStepsPerRun), finished: o.scaled(scaleFinished, 100)}
	worst := 0.0
	for _, n := range counts {
		g, err := startGroup(ctx, &replicaGroup{f: f, prefix: fmt.Sprintf("%sscale-%d/", s.Prefix, n), tools: tools, dir: dir, admin: true}, n)
		if err != nil {
			return r, fmt.Errorf("%d replicas: %w", n, err)
		}
		sg, lo, err := measureScale(ctx, g, s, sz, n == look)
		g.stop()
		if err != nil {
			return r, fmt.Errorf("%d replicas: %w", n, err)
		}
		r.Groups = append(r.Groups, sg)
		r.Extra[fmt.Sprintf("cpu_ms_per_step_%d", n)] = sg.CPUMsPerStep
		if ob := sg.Observer; ob != nil {
			r.Extra[fmt.Sprintf("observer_cpu_ratio_%d", n)] = ob.CPURatio
			r.Extra[fmt.Sprintf("observer_etcd_ratio_%d", n)] = ob.EtcdRatio
			worst = max(worst, ob.CPURatio)
		}
		if lo != nil {
			r.LookOver = lo
			r.Extra["lookover_cpu_ratio"] = lo.CPURatio
			r.Extra["lookover_etcd_ratio"] = lo.EtcdRatio
			r.Extra["lookover_finished_runs"] = float64(lo.Finished)
			r.Extra["lookover_finished_runs_wanted"] = float64(lo.Wanted)
			r.Extra["lookover_fill_seconds"] = lo.FillSeconds
			worst = max(worst, lo.CPURatio)
		}
	}
	r.spread("cpu_ms_per_step_spread", func(g ScaleGroup) float64 { return g.CPUMsPerStep })
	r.spread("alone_cpu_ms_per_step_spread", func(g ScaleGroup) float64 { return g.AloneCPUMsPerStep })
	r.Extra["lease_ttl_s"] = ScaleTTL.Seconds()
	r.Extra["paused_runs"] = float64(sz.paused)
	r.Extra["clients_per_driving_replica"] = scaleClients
	r.Figure = worst
	r.Ratio = r.Baseline / worst
	r.Met = r.Ratio >= r.Target
	r.Runs = sz.steps / scaleStepsPerRun
	r.Rounds = len(counts)
	r.Seconds = time.Since(t0).Seconds()
	return r, nil
}

// scaleSizes are the scenario's sizes at its scale.
type scaleSizes struct {
	paused, steps, finished int
}

// measureScale measures one group: it seeds the paused runs, measures the
// replicas idle, then busy, and with lookOver the look-over phase.
func measureScale(ctx context.Context, g *replicaGroup, s Scale, sz scaleSizes, lookOver bool) (ScaleGroup, *ScaleLookOver, error) {
	n := len(g.reps)
	sg := ScaleGroup{Replicas: n, Paused: sz.paused}
	// Clients send requests to the workers only: replicas 1..n-1, or the
	// one replica there is.
	workers := []int{0}
	if n > 1 {
		workers = workers[:0]
		for i := 1; i < n; i++ {
			workers = append(workers, i)
		}
	}
	paused, err := g.seedPaused(ctx, workers, sz.paused)
	if err != nil {
		return sg, nil, err
	}
	idle, err := g.idle(ctx)
	if err != nil {
		return sg, nil, err
	}
	sg.IdleSeconds = idle.seconds
	before, err := g.sample(ctx)
	if err != nil {
		return sg, nil, err
	}
	db0 := etcdDBSize(ctx, s.Etcd)
	if err := g.workload(ctx, workers, len(workers)*sz.steps/scaleStepsPerRun, "steps"); err != nil {
		return sg, nil, err
	}
	db1 := etcdDBSize(ctx, s.Etcd)
	after, err := g.sample(ctx)
	if err != nil {
		return sg, nil, err
	}
	busy := diff(before, after)
	sg.BusySeconds = busy.seconds
	sg.NoEtcdBytes = before.noEtcdBytes
	if db0 > 0 && db1 > 0 {
		var steps float64
		for _, n := range busy.steps {
			steps += n
		}
		if steps > 0 {
			sg.EtcdDBBytesPerStep = float64(db1-db0) / steps
		}
	}
	var drivenCPU, driven float64
	for i, rep := range g.reps {
		sr := ScaleReplica{Name: rep.name, Observer: n > 1 && i == 0,
			IdleCPUMsPerS: idle.cpuMs[i] / idle.seconds, IdleEtcdKBPerS: idle.etcdBytes[i] / 1024 / idle.seconds,
			Steps: busy.steps[i], BusyCPUMs: busy.cpuMs[i], BusyEtcdKB: busy.etcdBytes[i] / 1024}
		if sr.Steps > 0 {
			sr.CPUMsPerStep = sr.BusyCPUMs / sr.Steps
		}
		if !sr.Observer {
			drivenCPU += sr.BusyCPUMs
			driven += sr.Steps
		}
		sg.Steps += sr.Steps
		sg.PerReplica = append(sg.PerReplica, sr)
	}
	if want := float64(sz.steps / scaleStepsPerRun * scaleStepsPerRun); sg.Steps < want {
		return sg, nil, fmt.Errorf("the replicas counted %.0f steps (rein_steps_total) while the workload took %.0f", sg.Steps, want)
	}
	if driven > 0 {
		sg.CPUMsPerStep = drivenCPU / driven
	}
	if n > 1 {
		ob := sg.PerReplica[0]
		elsewhere := sg.Steps - ob.Steps
		per := 1000 / elsewhere
		o := &ScaleObserver{StepsElsewhere: elsewhere,
			BusyCPUMs: ob.BusyCPUMs * per, IdleCPUMs: ob.IdleCPUMsPerS * busy.seconds * per,
			BusyEtcdKB: ob.BusyEtcdKB * per, IdleEtcdKB: ob.IdleEtcdKBPerS * busy.seconds * per}
		o.CPURatio = ratioOver(o.BusyCPUMs, o.IdleCPUMs, max(idle.cpuResMs, busy.cpuResMs)*per)
		o.EtcdRatio = ratioOver(o.BusyEtcdKB, o.IdleEtcdKB, 0)
		sg.Observer = o
	}
	// The same work driven by one replica alone, the others idle: its CPU
	// per step, against N, is what the cluster's size costs a replica,
	// apart from the machine's cores being shared by more work.
	one, err := g.sample(ctx)
	if err != nil {
		return sg, nil, err
	}
	if err := g.workload(ctx, workers[:1], sz.steps/scaleStepsPerRun, "alone"); err != nil {
		return sg, nil, err
	}
	two, err := g.sample(ctx)
	if err != nil {
		return sg, nil, err
	}
	alone := diff(one, two)
	if w := workers[0]; alone.steps[w] > 0 {
		sg.AloneCPUMsPerStep = alone.cpuMs[w] / alone.steps[w]
	}
	if err := g.stillPaused(ctx, workers, paused); err != nil {
		return sg, nil, err
	}
	if !lookOver {
		return sg, nil, nil
	}
	lo, err := g.lookOver(ctx, s, sz.finished)
	if err != nil {
		return sg, nil, fmt.Errorf("look-over: %w", err)
	}
	return sg, lo, nil
}

// ratioOver is a/b, b raised to floor first: an idle figure below what
// can be measured (the CPU figures' resolution) is taken as that much, so
// that the ratio stays finite and errs low.
func ratioOver(a, b, floor float64) float64 {
	b = max(b, floor)
	if b <= 0 {
		if a <= 0 {
			return 1
		}
		return math.Inf(1)
	}
	return a / b
}

// idle waits scaleSettle, then samples the replicas over scaleIdle.
func (g *replicaGroup) idle(ctx context.Context) (scaleDelta, error) {
	return g.idleAfter(ctx, scaleSettle)
}

// idleAfter is idle with a wait of settle first.
func (g *replicaGroup) idleAfter(ctx context.Context, settle time.Duration) (scaleDelta, error) {
	if err := sleepCtx(ctx, settle); err != nil {
		return scaleDelta{}, err
	}
	before, err := g.sample(ctx)
	if err != nil {
		return scaleDelta{}, err
	}
	if err := sleepCtx(ctx, scaleIdle); err != nil {
		return scaleDelta{}, err
	}
	after, err := g.sample(ctx)
	if err != nil {
		return scaleDelta{}, err
	}
	return diff(before, after), nil
}

// etcdDBSize is the size of etcd's backend file, as the first endpoint
// reports it; 0 when it cannot be read.
func etcdDBSize(ctx context.Context, cli *clientv3.Client) int64 {
	if cli == nil || len(cli.Endpoints()) == 0 {
		return 0
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := cli.Status(ctx, cli.Endpoints()[0])
	if err != nil {
		return 0
	}
	return st.DbSize
}

// spread puts in Extra[name] the largest of the groups' figures over the
// smallest (the figures measured: those above 0).
func (r *ScaleResult) spread(name string, figure func(ScaleGroup) float64) {
	var xs []float64
	for _, g := range r.Groups {
		if x := figure(g); x > 0 {
			xs = append(xs, x)
		}
	}
	if len(xs) > 0 {
		r.Extra[name] = slices.Max(xs) / slices.Min(xs)
	}
}

// sleepCtx waits d, or until ctx ends (its error).
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// lookOver measures the observer idle (the group's idle figures, taken
// before the workload, are not reused: the workload's runs are in the
// store now), fills the prefix with finished runs, and measures it idle
// again.
func (g *replicaGroup) lookOver(ctx context.Context, s Scale, finished int) (*ScaleLookOver, error) {
	lo := &ScaleLookOver{Replicas: len(g.reps), Wanted: finished}
	before, err := g.idle(ctx)
	if err != nil {
		return nil, err
	}
	st, err := s.Open(ctx, g.prefix)
	if err != nil {
		return nil, fmt.Errorf("open the store at %s: %w", g.prefix, err)
	}
	s0, err := g.sample(ctx)
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	db0 := etcdDBSize(ctx, s.Etcd)
	lo.Finished, err = fillFinished(ctx, st, finished, scaleFillBudget)
	if db1 := etcdDBSize(ctx, s.Etcd); db0 > 0 && db1 > 0 && lo.Finished > 0 {
		lo.EtcdDBBytesPerRun = float64(db1-db0) / float64(lo.Finished)
	}
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("fill %s with %d finished runs: %w", g.prefix, finished, err)
	}
	s1, err := g.sample(ctx)
	if err != nil {
		return nil, err
	}
	fill := diff(s0, s1)
	lo.FillSeconds, lo.FillCPUMs, lo.FillEtcdKB = fill.seconds, fill.cpuMs[0], fill.etcdBytes[0]/1024
	// What the fill set going settles first: the servers' first looks
	// after it, and their collectors.
	after, err := g.idleAfter(ctx, scaleFillSettle)
	if err != nil {
		return nil, err
	}
	lo.BeforeCPUMsPerS, lo.AfterCPUMsPerS = before.cpuMs[0]/before.seconds, after.cpuMs[0]/after.seconds
	lo.BeforeEtcdKBPerS, lo.AfterEtcdKBPerS = before.etcdBytes[0]/1024/before.seconds, after.etcdBytes[0]/1024/after.seconds
	lo.CPURatio = ratioOver(lo.AfterCPUMsPerS, lo.BeforeCPUMsPerS, before.cpuResMs/before.seconds)
	lo.EtcdRatio = ratioOver(lo.AfterEtcdKBPerS, lo.BeforeEtcdKBPerS, 0)
	return lo, nil
}
