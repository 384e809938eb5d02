package bench

// One side of a watch round: the streams and the writers that drive it
// (driveWatch, runPhase), and the bookkeeping of what it measured: each
// stream's receipts, each phase's latencies, rate and CPU time, and the
// summaries Watch takes of them over rounds.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

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
