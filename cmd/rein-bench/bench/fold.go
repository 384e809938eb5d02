package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
)

// Sizes of the fold scenario at scale 1.
const (
	foldEvents = 1_000_000
	foldBatch  = 10_000
)

// Fold measures rebuilding a run's state from its log: the store's
// ScanEvents over a foldEvents-event run with runstate.Apply on each event
// (scan, decode, fold). The run is built first, untimed, by appending big
// batches of model_requested/model_returned pairs (foldBatch, or the
// backend's MaxAppendEvents). The baseline is the
// backend's raw scan of the same file (Ceiling.Scan, for bbolt a cursor)
// with proto.Unmarshal of each event and no fold. Both read a file the OS
// has cached.
func Fold(ctx context.Context, o Options) (Result, error) {
	r := Result{Scenario: "fold", Unit: "events/s", Target: o.target(0.8), Runs: 1, Extra: map[string]float64{}}
	be, err := o.ceiling(r.Scenario)
	if err != nil {
		return r, err
	}
	n := o.scaled(foldEvents, 2)
	r.Events = n

	dir, err := tempDir(o, "fold")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "fold.db")
	const runID = "run_bench_fold"

	t0 := time.Now()
	size, err := buildFoldRun(ctx, be, path, runID, n)
	if err != nil {
		return r, err
	}
	r.Extra["build_seconds"] = time.Since(t0).Seconds()
	r.Extra["event_bytes"] = float64(size) / float64(n)
	if info, err := os.Stat(path); err == nil {
		r.Extra["file_bytes"] = float64(info.Size())
	}

	figure := func(int) (measure, error) { return foldFigure(be, path, runID, n) }
	baseline := func(int) (measure, error) { return foldBaseline(be.Ceiling, path, runID, n) }
	if err := alternate(ctx, &r, o.rounds(), figure, baseline); err != nil {
		return r, err
	}
	return r, nil
}

// buildFoldRun creates a run of n events in a new store at path and closes
// it. It returns the events' total marshalled size.
func buildFoldRun(ctx context.Context, be Backend, path, runID string, n int) (int, error) {
	s, err := be.Open(path, false)
	if err != nil {
		return 0, err
	}
	defer s.Close()
	at := benchTime()
	first := runStarted(runID, at)
	if _, _, err := s.Create(ctx, first); err != nil {
		return 0, err
	}
	size := proto.Size(first)
	per := foldBatch
	if be.MaxAppendEvents > 0 {
		per = min(per, be.MaxAppendEvents)
	}
	batch := make([]*reinv1.Event, 0, per)
	for seq := uint64(2); seq <= uint64(n); {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		batch = batch[:0]
		for ; seq <= uint64(n) && len(batch) < per; seq++ {
			ev := stepEvent(runID, seq, at, true)
			size += proto.Size(ev)
			batch = append(batch, ev)
		}
		if _, err := s.Append(ctx, runID, batch[0].GetSequence()-1, batch); err != nil {
			return 0, fmt.Errorf("build the run: %w", err)
		}
	}
	return size, s.Close()
}

// foldFigure opens the store (not timed) and times the rebuild of the run's
// state from event 0.
func foldFigure(be Backend, path, runID string, n int) (measure, error) {
	s, err := be.Open(path, false)
	if err != nil {
		return measure{}, err
	}
	defer s.Close()
	t0 := time.Now()
	var st runstate.State
	err = s.ScanEvents(runID, 0, func(ev *reinv1.Event) error {
		var err error
		st, err = runstate.Apply(st, ev)
		return err
	})
	elapsed := time.Since(t0)
	if err != nil {
		return measure{}, err
	}
	if st.Version != uint64(n) {
		return measure{}, fmt.Errorf("the fold reached version %d of %d", st.Version, n)
	}
	return measure{units: float64(n), elapsed: elapsed}, nil
}

// foldBaseline times a raw scan of the run's events through the backend's
// ceiling (which opens the file read-only), decoding each into one reused
// Event as ScanEvents does, with no fold. The clock starts at the first
// event, so the opening is not timed (as the figure's is not).
func foldBaseline(c Ceiling, path, runID string, n int) (measure, error) {
	var t0 time.Time
	count := 0
	var last uint64
	ev := &reinv1.Event{}
	err := c.Scan(path, runID, func(seq uint64, data []byte) error {
		if count == 0 {
			t0 = time.Now()
		}
		ev.Reset()
		if err := proto.Unmarshal(data, ev); err != nil {
			return fmt.Errorf("decode event %d: %w", seq, err)
		}
		last = ev.GetSequence()
		count++
		return nil
	})
	elapsed := time.Since(t0)
	if err != nil {
		return measure{}, err
	}
	if count != n || last != uint64(n) {
		return measure{}, fmt.Errorf("the scan read %d events, the last %d; expected %d", count, last, n)
	}
	return measure{units: float64(n), elapsed: elapsed}, nil
}
