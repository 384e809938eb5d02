package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/server"
)

// Sizes, pace and targets of the watch scenario at scale 1.
const (
	watchStreams = 1000
	watchRuns    = 64
	// watchConns is how many client connections carry the streams.
	watchConns = 8
	// watchPacedEvents is how many events each run appends in the paced
	// phase, one per watchInterval, the runs staggered evenly across it:
	// a load both sides sustain, at which their latencies compare.
	watchPacedEvents = 50
	watchInterval    = 80 * time.Millisecond
	// watchUnpacedEvents is how many events each run appends in the
	// unpaced phase, back to back: each side's delivery capacity.
	watchUnpacedEvents = 200
	// watchP99Target bounds the figure's p99 latency in the paced phase as
	// a multiple of the baseline's.
	watchP99Target = 2
	// watchRSSTargetMiB bounds the server's resident memory with every
	// stream open and idle.
	watchRSSTargetMiB = 100
	// watchTimeout bounds one side of a round, or the memory measurement.
	watchTimeout = 2 * time.Minute
)

// WatchServer, when set, returns the command of a rein server for the watch
// scenario's memory measurement: it must serve the store at db on a free
// loopback port, without a rate limit and without tokens, and log its
// address on stderr as `rein serve` does (msg="rein serving" addr=HOST:PORT).
// The rein binary sets it to its own `serve`. Nil skips the measurement;
// then rss_idle_mib is -1 and the scenario's targets are not met.
var WatchServer func(db string) (*exec.Cmd, error)

// Watch measures WatchRun's fan-out: watchStreams WatchRun streams over
// loopback TCP (watchConns connections) follow watchRuns runs, stream i
// following run i mod watchRuns. One writer per run appends ~300-byte events
// through the store of an in-process server.Node and, after each durable
// Append, wakes the watchers through the node's hub, as the engine does.
// Every stream checks that it receives each sequence once, in order.
//
// After a warm-up event that every stream must receive (so every stream is
// subscribed), a round has two phases, both on the same streams:
//
//   - paced: each run appends watchPacedEvents events, one per
//     watchInterval, the runs staggered evenly (an offered load both sides
//     sustain); Extra's p50_ms and p99_ms are the commit-to-receipt latency
//     over every delivery of this phase.
//   - unpaced: each run appends watchUnpacedEvents events back to back, each
//     writer waiting for its durable commit; the figure is this phase's
//     deliveries per second, from its first commit to its last receipt.
//
// The baseline is plain grpc-go server streaming of the same messages to the
// same streams over the same connections, with the same phases: its writers
// make the same durable appends to a bbolt store of the same layout, then
// publish each event to an in-memory broadcaster of its run (a buffered
// channel per stream, drained by the handler), served by a RunService with
// no interceptors whose WatchRun never reads the store. Its commit time is
// taken after the append, as the figure's. So the ratio measures rein's
// watch path (hub, tail, store reads when behind, interceptors) against
// plain fan-out, with the same write load on the same two cores.
//
// The targets: deliveries/s at least 0.7 of the baseline's, paced p99 at
// most watchP99Target times the baseline's, no gap or duplicate in any
// stream, and at most watchRSSTargetMiB of resident memory in a separate
// server process (WatchServer) with every stream open and idle.
func Watch(ctx context.Context, o Options) (Result, error) {
	r := Result{Scenario: "watch", Unit: "deliveries/s", Target: 0.7, Extra: map[string]float64{}}
	p := newWatchPlan(o.scaled(watchRuns, 4), o.scaled(watchStreams, 20), watchConns,
		o.scaled(watchPacedEvents, 10), watchInterval, o.scaled(watchUnpacedEvents, 20))
	paced, unpaced := p.phases[1], p.phases[2]
	r.Runs, r.Events = p.runs, p.runs*unpaced.events
	r.Extra["streams"] = float64(p.streams)
	r.Extra["runs"] = float64(p.runs)
	r.Extra["connections"] = float64(p.conns)
	r.Extra["events_per_run"] = float64(unpaced.events)
	r.Extra["deliveries"] = float64(p.streams * unpaced.events)
	r.Extra["paced_events_per_run"] = float64(paced.events)
	r.Extra["paced_interval_ms"] = ms(paced.interval)
	r.Extra["paced_offered_events_per_s"] = float64(p.runs) / paced.interval.Seconds()
	r.Extra["paced_offered_deliveries_per_s"] = float64(p.streams) / paced.interval.Seconds()
	r.Extra["p99_ratio_target"] = watchP99Target
	r.Extra["rss_target_mib"] = watchRSSTargetMiB

	dir, err := tempDir(o, "watch")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)

	var figs, bases []watchRound
	figure := func(round int) (measure, error) {
		w, err := watchFigure(ctx, p, filepath.Join(dir, fmt.Sprintf("figure-%d.db", round)))
		if err != nil {
			return measure{}, err
		}
		figs = append(figs, w)
		return w.unpaced.m, nil
	}
	baseline := func(round int) (measure, error) {
		w, err := watchBaseline(ctx, p, filepath.Join(dir, fmt.Sprintf("baseline-%d.db", round)))
		if err != nil {
			return measure{}, err
		}
		bases = append(bases, w)
		return w.unpaced.m, nil
	}
	if err := alternate(ctx, &r, o.rounds(), figure, baseline); err != nil {
		return r, err
	}
	// Latencies: the round with the lowest paced p99 of each side, best of
	// N like the rates; the worst p99 shows the spread.
	f, b := bestPaced(figs), bestPaced(bases)
	r.Extra["p50_ms"], r.Extra["p99_ms"], r.Extra["max_ms"] = ms(f.p50), ms(f.p99), ms(f.max)
	r.Extra["baseline_p50_ms"], r.Extra["baseline_p99_ms"], r.Extra["baseline_max_ms"] = ms(b.p50), ms(b.p99), ms(b.max)
	r.Extra["p99_ms_worst"] = ms(worstPaced(figs).p99)
	r.Extra["baseline_p99_ms_worst"] = ms(worstPaced(bases).p99)
	p99Ratio := 1.0 // both zero
	switch {
	case b.p99 > 0:
		p99Ratio = float64(f.p99) / float64(b.p99)
	case f.p99 > 0:
		p99Ratio = math.Inf(1)
	}
	if !math.IsInf(p99Ratio, 0) {
		r.Extra["p99_ratio"] = p99Ratio
	}
	// Whether each side kept up with the paced phase's offered load.
	for _, w := range figs {
		bestOf(r.Extra, "paced_deliveries_per_s", w.paced.m.rate())
	}
	for _, w := range bases {
		bestOf(r.Extra, "baseline_paced_deliveries_per_s", w.paced.m.rate())
	}
	// CPU per delivery, client and server together (they share the
	// process): steadier than the rates on a busy machine.
	r.Extra["cpu_us_per_delivery"] = cpuPerDelivery(figs)
	r.Extra["baseline_cpu_us_per_delivery"] = cpuPerDelivery(bases)
	var gaps, dups, baseGaps, baseDups, early int
	for _, w := range figs {
		gaps, dups, early = gaps+w.gaps, dups+w.dups, early+w.paced.early+w.unpaced.early
	}
	for _, w := range bases {
		baseGaps, baseDups = baseGaps+w.gaps, baseDups+w.dups
	}
	r.Extra["gaps"], r.Extra["duplicates"] = float64(gaps), float64(dups)
	r.Extra["baseline_gaps"], r.Extra["baseline_duplicates"] = float64(baseGaps), float64(baseDups)
	// A stream can read an event that committed while Append was still
	// returning to its writer: a receipt before the recorded commit time.
	// Those count as zero latency.
	r.Extra["early_receipts"] = float64(early)

	rss, err := watchIdleRSS(ctx, p, dir)
	if err != nil {
		return r, fmt.Errorf("watch: idle memory: %w", err)
	}
	r.Extra["rss_idle_mib"], r.Extra["rss_before_streams_mib"], r.Extra["rss_peak_mib"] = rss.idle, rss.before, rss.peak
	if rss.idle > 0 && rss.before > 0 {
		r.Extra["rss_per_stream_kib"] = (rss.idle - rss.before) * 1024 / float64(p.streams)
	}

	r.Met = r.Ratio >= r.Target && p99Ratio <= watchP99Target && gaps == 0 && dups == 0 &&
		rss.idle > 0 && rss.idle <= watchRSSTargetMiB
	return r, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// watchPhase is a stretch of every run's log, written at one pace.
type watchPhase struct {
	// events is how many events each run appends in the phase, from
	// sequence first.
	events int
	first  uint64
	// interval is each writer's pace; 0 means back to back.
	interval time.Duration
}

// last is the phase's last sequence.
func (ph watchPhase) last() uint64 { return ph.first + uint64(ph.events) - 1 }

// watchPlan is the work of one side of a round; both sides share it.
type watchPlan struct {
	runs, streams, conns int
	// phases are the warm-up (one event), the paced and the unpaced phase.
	phases []watchPhase
	ids    []string
	// evs[r][seq-2] is run r's event at sequence seq.
	evs [][]*reinv1.Event
}

func newWatchPlan(runs, streams, conns, paced int, interval time.Duration, unpaced int) watchPlan {
	p := watchPlan{runs: runs, streams: max(streams, runs), conns: conns}
	seq := uint64(2) // after run_started
	for _, ph := range []watchPhase{{events: 1}, {events: paced, interval: interval}, {events: unpaced}} {
		ph.first = seq
		seq += uint64(ph.events)
		p.phases = append(p.phases, ph)
	}
	at := benchTime()
	p.ids = make([]string, p.runs)
	p.evs = make([][]*reinv1.Event, p.runs)
	for i := range p.ids {
		// Created in this order, so the IDs sort by creation time.
		p.ids[i] = fmt.Sprintf("run_bench_watch_%04d", i)
		p.evs[i] = make([]*reinv1.Event, p.last()-1)
		for k := range p.evs[i] {
			p.evs[i][k] = stepEvent(p.ids[i], uint64(k+2), at, true)
		}
	}
	return p
}

// last is the sequence of every run's last event.
func (p *watchPlan) last() uint64 { return p.phases[len(p.phases)-1].last() }

// watchRunStarted is run_started for a run of the local admin's tenant, the
// caller of a server without tokens.
func watchRunStarted(runID string) *reinv1.Event {
	ev := runStarted(runID, benchTime())
	rs := ev.GetRunStarted()
	rs.Tenant, rs.Principal = server.LocalPrincipal.Tenant, server.LocalPrincipal.ID
	return ev
}

// watchSide is one side's server: its address and how it commits an event,
// returning the commit time (after the event is durable, before the
// watchers are told).
type watchSide struct {
	addr   string
	commit func(ctx context.Context, run int, ev *reinv1.Event) (time.Time, error)
}

// watchRound is what one side of a round measured.
type watchRound struct {
	paced, unpaced phaseStats
	gaps, dups     int
}

// phaseStats are one phase's deliveries, from its first commit to its last
// receipt, and their commit-to-receipt latencies.
type phaseStats struct {
	m             measure
	p50, p99, max time.Duration
	early         int
	// cpu is the CPU time the whole process (server and streams) used
	// during the phase.
	cpu time.Duration
}

// cpuPerDelivery is the mean CPU time per delivery of the unpaced phase
// over rounds, in µs, or -1 when unknown.
func cpuPerDelivery(ws []watchRound) float64 {
	var cpu time.Duration
	var n float64
	for _, w := range ws {
		if w.unpaced.cpu <= 0 {
			return -1
		}
		cpu += w.unpaced.cpu
		n += w.unpaced.m.units
	}
	if n == 0 {
		return -1
	}
	return float64(cpu.Microseconds()) / n
}

func byPacedP99(a, b watchRound) int { return int(a.paced.p99 - b.paced.p99) }

func bestPaced(ws []watchRound) phaseStats {
	if len(ws) == 0 {
		return phaseStats{}
	}
	return slices.MinFunc(ws, byPacedP99).paced
}

func worstPaced(ws []watchRound) phaseStats {
	if len(ws) == 0 {
		return phaseStats{}
	}
	return slices.MaxFunc(ws, byPacedP99).paced
}

// watchFigure serves a fresh server.Node on loopback TCP, creates the runs
// in its store (untimed), and drives the streams.
func watchFigure(ctx context.Context, p watchPlan, path string) (watchRound, error) {
	defer os.Remove(path)
	node, err := server.Open(ctx, server.Config{DBPath: path})
	if err != nil {
		return watchRound{}, err
	}
	defer node.Close()
	for _, id := range p.ids {
		if _, _, err := node.Store.Create(ctx, watchRunStarted(id)); err != nil {
			return watchRound{}, err
		}
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return watchRound{}, err
	}
	served := make(chan error, 1)
	go func() { served <- node.GRPC.Serve(lis) }()
	defer func() {
		node.Close()
		<-served
	}()
	side := watchSide{
		addr: lis.Addr().String(),
		commit: func(ctx context.Context, run int, ev *reinv1.Event) (time.Time, error) {
			seq := ev.GetSequence()
			if err := node.Store.Append(ctx, p.ids[run], seq-1, []*reinv1.Event{ev}); err != nil {
				return time.Time{}, err
			}
			t := time.Now()
			node.Hub.Keep(p.ids[run], []*reinv1.Event{ev}) // as the engine does
			node.Hub.Notify(p.ids[run], seq)
			return t, nil
		},
	}
	return driveWatch(ctx, p, side)
}

// watcher is one stream's record: the receipt time of each event (index
// seq-2), since the round's base time.
type watcher struct {
	run        int
	received   []time.Duration
	gaps, dups int
}

// driveWatch opens the streams, then runs each phase of p: every run's
// writer commits the phase's events at its pace, and the phase ends when
// every stream has received its last event. It returns the paced and
// unpaced phases' figures.
func driveWatch(ctx context.Context, p watchPlan, side watchSide) (watchRound, error) {
	ctx, cancel := context.WithTimeout(ctx, watchTimeout)
	defer cancel()
	conns, err := dialConns(side.addr, p.conns)
	if err != nil {
		return watchRound{}, err
	}
	defer closeConns(conns)

	base := time.Now()
	last := p.last()
	ws := make([]*watcher, p.streams)
	// reached[j] is done once every stream received phase j's last event
	// (or ended).
	reached := make([]sync.WaitGroup, len(p.phases))
	var streams sync.WaitGroup
	defer func() {
		cancel() // ends the streams still open, after a failure
		streams.Wait()
	}()
	errc := make(chan error, p.streams)
	for i := range ws {
		w := &watcher{run: i % p.runs, received: make([]time.Duration, last-1)}
		ws[i] = w
		for j := range reached {
			reached[j].Add(1)
		}
		streams.Add(1)
		go func() {
			defer streams.Done()
			next := 0 // the phase whose end this stream waits for
			defer func() {
				for ; next < len(reached); next++ {
					reached[next].Done()
				}
			}()
			sctx, stop := context.WithCancel(ctx)
			defer stop() // cancels the stream
			client := reinv1.NewRunServiceClient(conns[i%len(conns)])
			stream, err := client.WatchRun(sctx, &reinv1.WatchRunRequest{RunId: p.ids[w.run], AfterSequence: 1})
			if err != nil {
				errc <- fmt.Errorf("stream %d: %w", i, err)
				return
			}
			prev := uint64(1)
			for {
				res, err := stream.Recv()
				if err != nil {
					errc <- fmt.Errorf("stream %d (run %s) after sequence %d: %w", i, p.ids[w.run], prev, err)
					return
				}
				at := time.Since(base)
				seq := res.GetEvent().GetSequence()
				switch {
				case seq <= prev:
					w.dups++
					continue
				case seq > prev+1:
					w.gaps += int(seq - prev - 1)
				}
				prev = seq
				if seq <= last {
					w.received[seq-2] = at
				}
				for ; next < len(p.phases) && seq >= p.phases[next].last(); next++ {
					reached[next].Done()
				}
				if seq >= last {
					return
				}
			}
		}()
	}

	// commits[r][seq-2] is when run r's event seq committed, since base.
	commits := make([][]time.Duration, p.runs)
	for r := range commits {
		commits[r] = make([]time.Duration, last-1)
	}
	var out watchRound
	cpu := make([]time.Duration, len(p.phases))
	for j, ph := range p.phases {
		if j > 0 {
			// Each timed phase starts without the garbage of the one
			// before, on either side.
			runtime.GC()
		}
		cpu0 := cpuTime()
		if err := runPhase(ctx, p, side, ph, commits, base); err != nil {
			return out, err
		}
		all := make(chan struct{})
		go func() {
			reached[j].Wait()
			close(all)
		}()
		select {
		case <-all:
		case err := <-errc:
			return out, err
		case <-ctx.Done():
			return out, fmt.Errorf("the streams did not receive every event up to sequence %d: %w", ph.last(), ctx.Err())
		}
		select {
		case err := <-errc:
			return out, err
		default:
		}
		if cpu0 >= 0 {
			cpu[j] = cpuTime() - cpu0
		}
	}
	for _, w := range ws {
		out.gaps += w.gaps
		out.dups += w.dups
	}
	var err1, err2 error
	out.paced, err1 = phaseFigures(p.phases[1], ws, commits)
	out.unpaced, err2 = phaseFigures(p.phases[2], ws, commits)
	out.paced.cpu, out.unpaced.cpu = cpu[1], cpu[2]
	return out, errors.Join(err1, err2)
}

// cpuTime is the CPU time this process has used (user and system, from
// /proc/self/stat, in clock ticks of 10ms), or -1 when it cannot tell.
func cpuTime() time.Duration {
	data, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return -1
	}
	// The command name, in parentheses, may hold spaces: fields count from
	// the last ')'. utime and stime are the 14th and 15th fields.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return -1
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	const tick = 10 * time.Millisecond // USER_HZ is 100 on Linux
	return time.Duration(utime+stime) * tick
}

// runPhase runs one writer per run: run r commits the phase's k-th event at
// start + k×interval + r×interval/runs (at once when it is late), or, with
// no interval, right after the previous one.
func runPhase(ctx context.Context, p watchPlan, side watchSide, ph watchPhase, commits [][]time.Duration, base time.Time) error {
	start := time.Now()
	var writers sync.WaitGroup
	var failOnce sync.Once
	var failed error
	for r := range p.runs {
		writers.Add(1)
		go func() {
			defer writers.Done()
			offset := time.Duration(r) * ph.interval / time.Duration(p.runs)
			for k := range ph.events {
				if ph.interval > 0 {
					if wait := time.Until(start.Add(offset + time.Duration(k)*ph.interval)); wait > 0 {
						select {
						case <-time.After(wait):
						case <-ctx.Done():
							return
						}
					}
				}
				seq := ph.first + uint64(k)
				t, err := side.commit(ctx, r, p.evs[r][seq-2])
				if err != nil {
					failOnce.Do(func() { failed = fmt.Errorf("commit sequence %d to %s: %w", seq, p.ids[r], err) })
					return
				}
				commits[r][seq-2] = t.Sub(base)
			}
		}()
	}
	writers.Wait()
	if failed != nil {
		return failed
	}
	return ctx.Err()
}

// phaseFigures are a phase's deliveries per second, from its first commit to
// its last receipt, and its latencies.
func phaseFigures(ph watchPhase, ws []*watcher, commits [][]time.Duration) (phaseStats, error) {
	var out phaseStats
	lat := make([]time.Duration, 0, len(ws)*ph.events)
	first, lastRecv := time.Duration(math.MaxInt64), time.Duration(0)
	for r := range commits {
		first = min(first, commits[r][ph.first-2])
	}
	for _, w := range ws {
		for seq := ph.first; seq <= ph.last(); seq++ {
			at := w.received[seq-2]
			if at == 0 {
				continue // a gap, counted by the stream
			}
			d := at - commits[w.run][seq-2]
			if d < 0 {
				out.early++
				d = 0
			}
			lat = append(lat, d)
			lastRecv = max(lastRecv, at)
		}
	}
	if len(lat) == 0 {
		return out, errors.New("no event was delivered")
	}
	slices.Sort(lat)
	out.p50, out.p99, out.max = quantile(lat, 0.50), quantile(lat, 0.99), lat[len(lat)-1]
	out.m = measure{units: float64(len(lat)), elapsed: lastRecv - first}
	return out, nil
}

// quantile is the q-quantile of sorted (nearest rank).
func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func dialConns(addr string, n int) ([]*grpc.ClientConn, error) {
	conns := make([]*grpc.ClientConn, 0, n)
	for range n {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			closeConns(conns)
			return nil, err
		}
		conns = append(conns, cc)
	}
	return conns, nil
}

func closeConns(conns []*grpc.ClientConn) {
	for _, cc := range conns {
		cc.Close()
	}
}
