package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
)

// Sizes of the reads scenario at scale 1.
const (
	readsRuns        = 10000
	readsWriters     = 16
	readsReaders     = 16
	readsPage        = 100
	readsLatencyRuns = 64
	readsWatchers    = 8
	readsListPage    = 50
	readsRound       = 3 * time.Second
	// readsListEvery and readsWatchEvery pace the latency phase's readers:
	// a console refreshing its list, watchers polling their runs.
	readsListEvery  = 10 * time.Millisecond
	readsWatchEvery = 2 * time.Millisecond
)

// Reads measures reads beside writes on one durable store of 10,000 runs.
// Its figure is the commits a second of 16 runs appending 3-event steps
// while 16 readers page through every run (List, 100 a page, over and
// over); its baseline, the same appends with no reader: the ratio is what
// readers cost the writer. Beside it (Extra), with 64 runs appending: how
// long a ListRuns page (the newest 50 runs, one every 10 ms) takes, and a
// watcher's catch-up read (the events of a run after the last it saw, 8
// watchers each reading every 2 ms), p50 and p99.
func Reads(ctx context.Context, o Options) (Result, error) {
	r := Result{Scenario: "reads", Unit: "commits/s", Target: 0.5, Extra: map[string]float64{}}
	be, err := o.backend(r.Scenario)
	if err != nil {
		return r, err
	}
	runs := o.scaled(readsRuns, readsLatencyRuns)
	round := time.Duration(float64(readsRound) * o.scale())
	if round < 200*time.Millisecond {
		round = 200 * time.Millisecond
	}
	r.Runs = runs
	r.Extra["readers"] = readsReaders
	r.Extra["writers"] = readsWriters
	r.Extra["round_seconds"] = round.Seconds()

	dir, err := tempDir(o, "reads")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "reads.db")
	ids, err := readsFixture(ctx, be, path, runs)
	if err != nil {
		return r, err
	}
	s, err := be.Open(path, false)
	if err != nil {
		return r, err
	}
	defer s.Close()
	w := &readsWriter{s: s, versions: map[string]uint64{}}

	var pages []float64
	figure := func(int) (measure, error) {
		var read atomic.Int64
		before := w.events.Load()
		m, err := w.run(ctx, ids[:readsWriters], round, func(ctx context.Context) error {
			return pageAll(ctx, s, &read)
		}, readsReaders)
		pages = append(pages, float64(read.Load())/m.elapsed.Seconds())
		// Events is what a round appends: the most any figure round did.
		r.Events = max(r.Events, int(w.events.Load()-before))
		return m, err
	}
	baseline := func(int) (measure, error) {
		return w.run(ctx, ids[:readsWriters], round, nil, 0)
	}
	if err := alternateOrder(ctx, &r, o.rounds(), true, figure, baseline); err != nil {
		return r, err
	}
	r.Extra["pages_per_s"] = meanOf(pages)

	// The latencies, with 64 runs appending.
	var list, watch []float64
	for range o.rounds() {
		var mu sync.Mutex
		lat := func(into *[]float64, d time.Duration) {
			mu.Lock()
			*into = append(*into, float64(d.Microseconds())/1000)
			mu.Unlock()
		}
		follow := ids[len(ids)-readsLatencyRuns:]
		listOnce := func(ctx context.Context) error {
			tick := time.NewTicker(readsListEvery)
			defer tick.Stop()
			for ; ctx.Err() == nil; <-tick.C {
				t0 := time.Now()
				if _, err := s.List(ctx, store.Filter{Limit: readsListPage}); err != nil {
					return err
				}
				lat(&list, time.Since(t0))
			}
			return nil
		}
		var next atomic.Int64
		watchOnce := func(ctx context.Context) error {
			seen := map[string]uint64{}
			tick := time.NewTicker(readsWatchEvery)
			defer tick.Stop()
			for ; ctx.Err() == nil; <-tick.C {
				id := follow[int(next.Add(1))%len(follow)]
				t0 := time.Now()
				evs, err := s.Events(ctx, id, seen[id], 256)
				if err != nil {
					return err
				}
				lat(&watch, time.Since(t0))
				if len(evs) > 0 {
					seen[id] = evs[len(evs)-1].GetSequence()
				}
			}
			return nil
		}
		readers := []func(context.Context) error{listOnce}
		for range readsWatchers {
			readers = append(readers, watchOnce)
		}
		m, err := w.runEach(ctx, follow, round, readers)
		if err != nil {
			return r, fmt.Errorf("reads: latency: %w", err)
		}
		bestOf(r.Extra, "latency_commits_per_s", m.rate())
	}
	r.Extra["list_ms_p50"], r.Extra["list_ms_p99"] = percentile(list, 0.5), percentile(list, 0.99)
	r.Extra["watch_read_ms_p50"], r.Extra["watch_read_ms_p99"] = percentile(watch, 0.5), percentile(watch, 0.99)
	r.Extra["list_reads"], r.Extra["watch_reads"] = float64(len(list)), float64(len(watch))
	return r, nil
}

// readsFixture creates runs runs in a fresh store at path, without syncs,
// and returns their IDs, oldest first.
func readsFixture(ctx context.Context, be Backend, path string, runs int) ([]string, error) {
	s, err := be.Open(path, true)
	if err != nil {
		return nil, err
	}
	ids := make([]string, runs)
	at := benchTime()
	for i := range ids {
		ids[i] = fmt.Sprintf("run_bench_reads_%06d", i)
	}
	errs := make(chan error, 64)
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < runs; i += 64 {
				if _, _, err := s.Create(ctx, runStarted(ids[i], at)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	err = <-errs
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("reads: create %d runs: %w", runs, err)
	}
	return ids, nil
}

// pageAll lists every run, a page at a time, over and over until ctx is
// done, counting the pages in read.
func pageAll(ctx context.Context, s Store, read *atomic.Int64) error {
	after := ""
	for ctx.Err() == nil {
		p, err := s.List(ctx, store.Filter{Limit: readsPage, After: after})
		if err != nil {
			return err
		}
		read.Add(1)
		after = p.Next
	}
	return nil
}

// readsWriter appends steps to runs of one store, each at the version it
// last left it at.
type readsWriter struct {
	s        Store
	mu       sync.Mutex
	versions map[string]uint64
	events   atomic.Int64 // appended, in all
}

// run appends to ids, one goroutine a run, for d, while n goroutines run
// reader (none when reader is nil). It returns the writer's commits over
// the time they took.
func (w *readsWriter) run(ctx context.Context, ids []string, d time.Duration, reader func(context.Context) error, n int) (measure, error) {
	var readers []func(context.Context) error
	for range n {
		readers = append(readers, reader)
	}
	return w.runEach(ctx, ids, d, readers)
}

// runEach is run with one goroutine for each of readers.
func (w *readsWriter) runEach(ctx context.Context, ids []string, d time.Duration, readers []func(context.Context) error) (measure, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, len(ids)+len(readers))
	for _, read := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := read(ctx); err != nil && !errors.Is(err, context.Canceled) {
				errs <- fmt.Errorf("reader: %w", err)
			}
		}()
	}
	at := benchTime()
	before := w.s.Commits()
	t0 := time.Now()
	stop := time.After(d)
	var done atomic.Bool
	go func() { <-stop; done.Store(true) }()
	var writers sync.WaitGroup
	for _, id := range ids {
		writers.Add(1)
		go func() {
			defer writers.Done()
			w.mu.Lock()
			version, ok := w.versions[id]
			w.mu.Unlock()
			if !ok {
				version = 1
			}
			for !done.Load() {
				batch := make([]*reinv1.Event, 3)
				for j := range batch {
					batch[j] = stepEvent(id, version+1+uint64(j), at, false)
				}
				if _, err := w.s.Append(ctx, id, version, batch); err != nil {
					errs <- fmt.Errorf("append to %s: %w", id, err)
					break
				}
				version += uint64(len(batch))
				w.events.Add(int64(len(batch)))
			}
			w.mu.Lock()
			w.versions[id] = version
			w.mu.Unlock()
		}()
	}
	writers.Wait()
	elapsed := time.Since(t0)
	commits := w.s.Commits() - before
	cancel()
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return measure{}, err
	}
	return measure{units: float64(commits), elapsed: elapsed}, nil
}
