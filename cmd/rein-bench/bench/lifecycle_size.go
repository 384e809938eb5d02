package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	"github.com/reinhq/rein/internal/archive"
	"github.com/reinhq/rein/internal/lifecycle"
	"github.com/reinhq/rein/internal/store"
)

// SizeSeries is the live store's file size over a steady workload: each
// round (an hour of the bench's clock) starts RunsPerRound runs and waits
// until they finished, then the size of the store's file is read. It runs
// on two stores: one with no lifecycle, and one whose keeper sweeps after
// each round, archiving the runs that ended at once and deleting them
// RetainRounds rounds after they ended (each sweep that deletes rewrites
// the file without them: bolt's Scrub). The stores skip fsync (sizes only
// are measured); the archive syncs as always.
type SizeSeries struct {
	RunsPerRound int `json:"runs_per_round"`
	RetainRounds int `json:"retain_rounds"`
	// Series are the two stores', the one with no lifecycle first.
	Series []Series `json:"series"`
}

// Series is one store's size before the first round and after each.
type Series struct {
	Name string `json:"name"`
	// Lifecycle is whether its store had one.
	Lifecycle bool    `json:"lifecycle"`
	Bytes     []int64 `json:"bytes"`
	// Archived and Deleted are how many runs its keeper archived and
	// deleted over the rounds.
	Archived int `json:"archived"`
	Deleted  int `json:"deleted"`
	// Scrubs is how many times its keeper rewrote the file after deleting
	// runs (bolt's Scrub, once per sweep that deleted), ScrubMs their
	// median duration and ScrubMaxMs the longest: what erasure costs. No
	// step pays anything for it.
	Scrubs     int     `json:"scrubs"`
	ScrubMs    float64 `json:"scrub_ms"`
	ScrubMaxMs float64 `json:"scrub_max_ms"`
}

// timedScrubs is a backend whose Scrub is timed.
type timedScrubs struct {
	lifecycle.Backend
	took []float64 // ms, one a scrub
}

func (t *timedScrubs) Scrub(ctx context.Context) error {
	s, ok := t.Backend.(lifecycle.Scrubber)
	if !ok {
		return nil
	}
	t0 := time.Now()
	err := s.Scrub(ctx)
	t.took = append(t.took, ms(time.Since(t0)))
	return err
}

// Names of the two series.
const (
	seriesNone      = "no lifecycle"
	seriesLifecycle = "archived at once, retained %d rounds"
)

// sizeSeries runs the steady workload on a store with no lifecycle, then
// on one with a lifecycle archiving to arch.
func sizeSeries(ctx context.Context, o Options, be Backend, dir string, arch *archive.Archive) (SizeSeries, error) {
	out := SizeSeries{RunsPerRound: o.scaled(lifecycleSizeRuns, 2), RetainRounds: lifecycleRetainRounds}
	rounds := o.scaled(lifecycleSizeRounds, lifecycleRetainRounds+2)
	for _, withLifecycle := range []bool{false, true} {
		s, err := steadyWorkload(ctx, be, filepath.Join(dir, fmt.Sprintf("size-%v.db", withLifecycle)), arch, withLifecycle, rounds, out.RunsPerRound)
		if err != nil {
			return out, err
		}
		out.Series = append(out.Series, s)
	}
	return out, nil
}

// steadyWorkload runs rounds rounds of runs finished on a fresh store at
// path, with the lifecycle or without, and samples the file's size. With
// the lifecycle it ends with a sweep past every run's retention, also when
// it fails, so that it leaves no object in the archive.
func steadyWorkload(ctx context.Context, be Backend, path string, arch *archive.Archive, withLifecycle bool, rounds, runs int) (out Series, _ error) {
	out = Series{Name: seriesNone, Lifecycle: withLifecycle}
	defer os.Remove(path)
	b, err := openLifecycleStore(be, path, true)
	if err != nil {
		return out, err
	}
	defer b.Close()
	// The bench's clock is the real one, an hour later each round: a run
	// that ended in round r is RetainRounds hours old at the sweep of
	// round r+RetainRounds.
	var offset atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	var s store.Store = b
	var k *lifecycle.Keeper
	if withLifecycle {
		out.Name = fmt.Sprintf(seriesLifecycle, lifecycleRetainRounds)
		timed := &timedScrubs{Backend: b}
		defer func() {
			out.Scrubs, out.ScrubMs = len(timed.took), median(timed.took)
			if len(timed.took) > 0 {
				out.ScrubMaxMs = slices.Max(timed.took)
			}
		}()
		ls := lifecycle.NewStore(timed, arch)
		policy := lifecycle.Policy{ArchiveOn: true, RetainOn: true, Retain: lifecycleRetainRounds * time.Hour}
		k = &lifecycle.Keeper{Store: ls, Policy: func(string) lifecycle.Policy { return policy }, Clock: clock}
		s = ls
	}
	e := lifecycleEngine(s, clock)
	defer e.Close()
	emptied := false
	defer func() {
		if k != nil && !emptied {
			offset.Store(int64(rounds+lifecycleRetainRounds) * int64(time.Hour))
			_, _ = k.Sweep(context.WithoutCancel(ctx))
		}
	}()
	size := func() error {
		n, err := storeSize(be, path)
		if err != nil {
			return fmt.Errorf("the live store's size: %w", err)
		}
		out.Bytes = append(out.Bytes, n)
		return nil
	}
	if err := size(); err != nil {
		return out, err
	}
	sweep := func() error {
		got, err := k.Sweep(ctx)
		out.Archived += got.Archived
		out.Deleted += got.Deleted
		if err == nil && got.Failed > 0 {
			err = fmt.Errorf("%d runs failed to archive or delete", got.Failed)
		}
		return err
	}
	for round := range rounds {
		offset.Store(int64(round) * int64(time.Hour))
		if _, err := finishRuns(ctx, e, fmt.Sprintf("size-%d", round), runs); err != nil {
			return out, err
		}
		if k != nil {
			if err := sweep(); err != nil {
				return out, fmt.Errorf("store size: the sweep after round %d: %w", round+1, err)
			}
		}
		if err := size(); err != nil {
			return out, err
		}
	}
	if k != nil {
		// Past every run's retention, so that the archive is left empty
		// (not sampled).
		offset.Store(int64(rounds+lifecycleRetainRounds) * int64(time.Hour))
		archived, deleted := out.Archived, out.Deleted
		emptied = true
		if err := sweep(); err != nil {
			return out, fmt.Errorf("store size: the last sweep: %w", err)
		}
		out.Archived, out.Deleted = archived, deleted
	}
	return out, nil
}

// storeSize is the bytes the store at path takes on disk.
func storeSize(be Backend, path string) (int64, error) {
	if be.Size != nil {
		return be.Size(path)
	}
	info, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return info.Size(), nil
}
