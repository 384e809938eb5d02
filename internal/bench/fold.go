package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bbolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store/bolt"
)

// Sizes of the fold scenario at scale 1.
const (
	foldEvents = 1_000_000
	foldBatch  = 10_000
)

// Fold measures rebuilding a run's state from its log: bolt.Store.ScanEvents
// over a foldEvents-event run with runstate.Apply on each event (scan,
// decode, fold). The run is built first, untimed, by appending big batches of
// model_requested/model_returned pairs. The baseline is a bbolt cursor scan
// of the same file with proto.Unmarshal of each event and no fold. Both read
// a file the OS has cached.
func Fold(ctx context.Context, o Options) (Result, error) {
	r := Result{Scenario: "fold", Unit: "events/s", Target: 0.8, Runs: 1, Extra: map[string]float64{}}
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
	size, err := buildFoldRun(ctx, path, runID, n)
	if err != nil {
		return r, err
	}
	r.Extra["build_seconds"] = time.Since(t0).Seconds()
	r.Extra["event_bytes"] = float64(size) / float64(n)
	if info, err := os.Stat(path); err == nil {
		r.Extra["file_bytes"] = float64(info.Size())
	}

	figure := func(int) (measure, error) { return foldFigure(path, runID, n) }
	baseline := func(int) (measure, error) { return foldBaseline(path, runID, n) }
	if err := alternate(ctx, &r, o.rounds(), figure, baseline); err != nil {
		return r, err
	}
	return r, nil
}

// buildFoldRun creates a run of n events in a new store at path and closes
// it. It returns the events' total marshalled size.
func buildFoldRun(ctx context.Context, path, runID string, n int) (int, error) {
	s, err := bolt.Open(path, bolt.Options{})
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
	batch := make([]*reinv1.Event, 0, foldBatch)
	for seq := uint64(2); seq <= uint64(n); {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		batch = batch[:0]
		for ; seq <= uint64(n) && len(batch) < foldBatch; seq++ {
			ev := stepEvent(runID, seq, at, true)
			size += proto.Size(ev)
			batch = append(batch, ev)
		}
		if err := s.Append(ctx, runID, batch[0].GetSequence()-1, batch); err != nil {
			return 0, fmt.Errorf("build the run: %w", err)
		}
	}
	return size, s.Close()
}

// foldFigure opens the store (not timed) and times the rebuild of the run's
// state from event 0.
func foldFigure(path, runID string, n int) (measure, error) {
	s, err := bolt.Open(path, bolt.Options{})
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

// foldBaseline opens the file read-only with bbolt (not timed) and times a
// cursor scan of the run's events, decoding each into one reused Event as
// ScanEvents does, with no fold.
func foldBaseline(path, runID string, n int) (measure, error) {
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return measure{}, err
	}
	defer db.Close()
	t0 := time.Now()
	count := 0
	var last uint64
	err = db.View(func(tx *bbolt.Tx) error {
		b, err := rawEvents(tx, runID, false)
		if err != nil {
			return err
		}
		c := b.Cursor()
		ev := &reinv1.Event{}
		for k, v := c.Seek(seqKey(1)); k != nil; k, v = c.Next() {
			ev.Reset()
			if len(v) >= 6 && v[0] == 0 {
				v = v[6:] // the store's seal (0x00, version, CRC-32C): the baseline decodes without checking it
			}
			if err := proto.Unmarshal(v, ev); err != nil {
				return fmt.Errorf("decode event %d: %w", binary.BigEndian.Uint64(k), err)
			}
			last = ev.GetSequence()
			count++
		}
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
