package bench

// The watch scenario: its sizes and targets, the plan both sides of a round
// share, and the figure's side, a server.Node. How a side is driven and
// measured is in watch_round.go; the baseline's side in watch_baseline.go.

import (
	"context"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"time"

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
// server process (Options.WatchServer) with every stream open and idle.
func Watch(ctx context.Context, o Options) (Result, error) {
	r := Result{Scenario: "watch", Unit: "deliveries/s", Target: 0.7, Extra: map[string]float64{}}
	be, err := o.backend(r.Scenario)
	if err != nil {
		return r, err
	}
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
		w, err := watchFigure(ctx, be, p, filepath.Join(dir, fmt.Sprintf("figure-%d.db", round)))
		if err != nil {
			return measure{}, err
		}
		figs = append(figs, w)
		return w.unpaced.m, nil
	}
	baseline := func(round int) (measure, error) {
		w, err := watchBaseline(ctx, be, p, filepath.Join(dir, fmt.Sprintf("baseline-%d.db", round)))
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

	rss, err := watchIdleRSS(ctx, o, be, p, dir)
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
	rs.Tenant, rs.Principal = server.LocalPrincipal().Tenant, server.LocalPrincipal().ID
	return ev
}

// watchFigure serves a fresh server.Node on loopback TCP, creates the runs
// in its store (untimed), and drives the streams.
func watchFigure(ctx context.Context, be Backend, p watchPlan, path string) (watchRound, error) {
	defer os.Remove(path)
	st, err := be.Open(path, false)
	if err != nil {
		return watchRound{}, err
	}
	node, err := server.Open(ctx, server.Config{Store: st})
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
			if _, err := node.Store.Append(ctx, p.ids[run], seq-1, []*reinv1.Event{ev}); err != nil {
				return time.Time{}, err
			}
			t := time.Now()
			node.Hub.Published(p.ids[run], []*reinv1.Event{ev}) // as the engine does
			return t, nil
		},
	}
	return driveWatch(ctx, p, side)
}
