package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// Sizes of the append scenario at scale 1.
const (
	appendRuns         = 64
	appendStepsPerRun  = 1000
	appendEventsPerReq = 3
	// appendBaselineTx is how many events the baseline puts in one Update.
	appendBaselineTx = 64
)

// Append measures durable appends through the store: appendRuns goroutines,
// one per run, each appending 3-event steps of ~300-byte events at its
// version and waiting for each to be durable before the next. The baseline
// is the disk's ceiling for that layout (the backend's Ceiling): the same
// events put raw by one goroutine, 64 events per durable commit, one into
// each run's log, in a fresh file. For context, Extra also reports a second
// baseline with a whole step of every run (192 events) per commit, the most
// a group commit of these appends can gather, and the bytes each commit
// writes on either side.
func Append(ctx context.Context, o Options) (Result, error) {
	r := Result{Scenario: "append", Unit: "events/s", Target: o.target(0.7), Runs: appendRuns, Extra: map[string]float64{}}
	be, err := o.ceiling(r.Scenario)
	if err != nil {
		return r, err
	}
	steps := o.scaled(appendStepsPerRun, 1)
	r.Events = appendRuns * steps * appendEventsPerReq
	r.Extra["steps_per_run"] = float64(steps)
	r.Extra["events_per_append"] = appendEventsPerReq
	r.Extra["baseline_events_per_commit"] = appendBaselineTx

	dir, err := tempDir(o, "append")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)

	// The events, built once: runs[i] appends evs[i][s] at step s.
	at := benchTime()
	ids := make([]string, appendRuns)
	evs := make([][][]*reinv1.Event, appendRuns)
	total := 0
	for i := range ids {
		ids[i] = fmt.Sprintf("run_bench_append_%02d", i)
		evs[i] = make([][]*reinv1.Event, steps)
		seq := uint64(2)
		for s := range evs[i] {
			batch := make([]*reinv1.Event, appendEventsPerReq)
			for j := range batch {
				batch[j] = stepEvent(ids[i], seq, at, false)
				total += proto.Size(batch[j])
				seq++
			}
			evs[i][s] = batch
		}
	}
	r.Extra["event_bytes"] = float64(total) / float64(r.Events)

	var commits, figBytes, baseBytes, ceilBytes []float64
	figure := func(round int) (measure, error) {
		path := filepath.Join(dir, fmt.Sprintf("figure-%d.db", round))
		defer os.Remove(path)
		m, n, perCommit, err := appendFigure(ctx, be, path, ids, evs)
		if err != nil {
			return m, err
		}
		commits = append(commits, float64(n))
		figBytes = append(figBytes, perCommit)
		return m, nil
	}
	baseline := func(round int) (measure, error) {
		path := filepath.Join(dir, fmt.Sprintf("baseline-%d.db", round))
		defer os.Remove(path)
		w := startWrites()
		m, err := appendBaseline(be.Ceiling, path, ids, evs, appendBaselineTx)
		if err != nil {
			return m, err
		}
		baseBytes = append(baseBytes, perCommit(w.bytes(), float64(r.Events)/appendBaselineTx))
		// The same again with a whole step of every run in each Update (the
		// most a group commit of these appends can gather), for context.
		path2 := filepath.Join(dir, fmt.Sprintf("ceiling-%d.db", round))
		defer os.Remove(path2)
		w = startWrites()
		c, err := appendBaseline(be.Ceiling, path2, ids, evs, appendRuns*appendEventsPerReq)
		if err != nil {
			return m, err
		}
		ceilBytes = append(ceilBytes, perCommit(w.bytes(), float64(r.Events)/(appendRuns*appendEventsPerReq)))
		bestOf(r.Extra, "step_batched_baseline", c.rate())
		return m, nil
	}
	if err := alternate(ctx, &r, o.rounds(), figure, baseline); err != nil {
		return r, err
	}
	r.Extra["commits"] = meanOf(commits)
	if c := meanOf(commits); c > 0 {
		r.Extra["events_per_commit"] = float64(r.Events) / c
	}
	r.Extra["bytes_written_per_commit"] = meanOf(figBytes)
	r.Extra["baseline_bytes_written_per_commit"] = meanOf(baseBytes)
	r.Extra["step_batched_events_per_commit"] = appendRuns * appendEventsPerReq
	r.Extra["step_batched_bytes_written_per_commit"] = meanOf(ceilBytes)
	if c := r.Extra["step_batched_baseline"]; c > 0 {
		r.Extra["step_batched_ratio"] = r.Figure / c
	}
	return r, nil
}

// appendFigure creates the runs (not timed), then times every run's appends
// from its own goroutine. It returns the time, the number of commits the
// appends took and the bytes written per commit (-1 when unknown).
func appendFigure(ctx context.Context, be Backend, path string, ids []string, evs [][][]*reinv1.Event) (m measure, commits uint64, bytesPerCommit float64, err error) {
	s, err := be.Open(path, false)
	if err != nil {
		return measure{}, 0, 0, err
	}
	defer func() {
		if cerr := s.Close(); err == nil {
			err = cerr
		}
	}()
	at := benchTime()
	for _, id := range ids {
		if _, _, err := s.Create(ctx, runStarted(id, at)); err != nil {
			return measure{}, 0, 0, err
		}
	}
	before := s.Commits()

	start := make(chan struct{})
	errs := make(chan error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			version := uint64(1)
			for _, batch := range evs[i] {
				if _, err := s.Append(ctx, id, version, batch); err != nil {
					errs <- err
					return
				}
				version += uint64(len(batch))
			}
		}()
	}
	w := startWrites()
	t0 := time.Now()
	close(start)
	wg.Wait()
	elapsed := time.Since(t0)
	written := w.bytes()
	close(errs)
	if err := <-errs; err != nil {
		return measure{}, 0, 0, err
	}
	n := 0
	for _, run := range evs {
		for _, batch := range run {
			n += len(batch)
		}
	}
	commits = s.Commits() - before
	return measure{units: float64(n), elapsed: elapsed}, commits, perCommit(written, float64(commits)), nil
}

// appendBaseline puts the same events raw into a fresh store of the
// backend's ceiling from one goroutine, perTx events per durable commit,
// taken round-robin over the runs (with perTx = appendBaselineTx, one event
// into each run's log).
func appendBaseline(c Ceiling, path string, ids []string, evs [][][]*reinv1.Event, perTx int) (measure, error) {
	put, closeLog, err := c.CreateLog(path, ids)
	if err != nil {
		return measure{}, err
	}
	defer func() { _ = closeLog() }()
	// The events in the order the baseline writes them: step by step, and
	// within a step event by event, round-robin over the runs.
	type order struct {
		runs []int
		evs  []*reinv1.Event
	}
	var all order
	for s := range evs[0] {
		for j := range evs[0][s] {
			for i := range ids {
				all.runs = append(all.runs, i)
				all.evs = append(all.evs, evs[i][s][j])
			}
		}
	}
	t0 := time.Now()
	buf := make([][]byte, perTx)
	seqs := make([]uint64, perTx)
	for lo := 0; lo < len(all.evs); lo += perTx {
		hi := min(lo+perTx, len(all.evs))
		for k, ev := range all.evs[lo:hi] {
			if buf[k], err = proto.Marshal(ev); err != nil {
				return measure{}, err
			}
			seqs[k] = ev.GetSequence()
		}
		n := hi - lo
		if err := put(all.runs[lo:hi], seqs[:n], buf[:n]); err != nil {
			return measure{}, err
		}
	}
	return measure{units: float64(len(all.evs)), elapsed: time.Since(t0)}, nil
}
