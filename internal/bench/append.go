package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	bbolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store/bolt"
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
// is the disk's ceiling for that layout: the same events put straight into
// bbolt by one goroutine, 64 events per fsync'd Update, one into each run's
// events bucket, in a fresh file. For context, Extra also reports a second
// baseline with a whole step of every run (192 events) per Update, the most
// a group commit of these appends can gather, and the bytes each commit
// writes on either side.
func Append(ctx context.Context, o Options) (Result, error) {
	r := Result{Scenario: "append", Unit: "events/s", Target: 0.7, Runs: appendRuns, Extra: map[string]float64{}}
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
		m, n, perCommit, err := appendFigure(ctx, path, ids, evs)
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
		m, err := appendBaseline(path, ids, evs, appendBaselineTx)
		if err != nil {
			return m, err
		}
		baseBytes = append(baseBytes, perCommit(w.bytes(), float64(r.Events)/appendBaselineTx))
		// The same again with a whole step of every run in each Update (the
		// most a group commit of these appends can gather), for context.
		path2 := filepath.Join(dir, fmt.Sprintf("ceiling-%d.db", round))
		defer os.Remove(path2)
		w = startWrites()
		c, err := appendBaseline(path2, ids, evs, appendRuns*appendEventsPerReq)
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
// appends took (read from bbolt's transaction ID afterwards) and the bytes
// written per commit (-1 when unknown).
func appendFigure(ctx context.Context, path string, ids []string, evs [][][]*reinv1.Event) (m measure, commits uint64, bytesPerCommit float64, err error) {
	s, err := bolt.Open(path, bolt.Options{})
	if err != nil {
		return measure{}, 0, 0, err
	}
	at := benchTime()
	for _, id := range ids {
		if _, _, err := s.Create(ctx, runStarted(id, at)); err != nil {
			s.Close()
			return measure{}, 0, 0, err
		}
	}
	if err := s.Close(); err != nil {
		return measure{}, 0, 0, err
	}
	s, before, err := openCounted(path)
	if err != nil {
		return measure{}, 0, 0, err
	}

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
				if err := s.Append(ctx, id, version, batch); err != nil {
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
	if err := s.Close(); err != nil {
		return measure{}, 0, 0, err
	}
	if err := <-errs; err != nil {
		return measure{}, 0, 0, err
	}
	after, err := txID(path)
	if err != nil {
		return measure{}, 0, 0, err
	}
	n := 0
	for _, run := range evs {
		for _, batch := range run {
			n += len(batch)
		}
	}
	commits = after - before
	return measure{units: float64(n), elapsed: elapsed}, commits, perCommit(written, float64(commits)), nil
}

// appendBaseline puts the same events straight into a fresh bbolt file from
// one goroutine, perTx events per fsync'd Update, taken round-robin over the
// runs (with perTx = appendBaselineTx, one event into each run's bucket).
func appendBaseline(path string, ids []string, evs [][][]*reinv1.Event, perTx int) (measure, error) {
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		return measure{}, err
	}
	defer db.Close()
	if err := db.Update(func(tx *bbolt.Tx) error {
		for _, id := range ids {
			if _, err := rawEvents(tx, id, true); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return measure{}, err
	}
	// The events in the order the baseline writes them: step by step, and
	// within a step event by event, round-robin over the runs.
	type put struct {
		run int
		ev  *reinv1.Event
	}
	var order []put
	for s := range evs[0] {
		for j := range evs[0][s] {
			for i := range ids {
				order = append(order, put{i, evs[i][s][j]})
			}
		}
	}
	t0 := time.Now()
	buf := make([][]byte, perTx)
	for lo := 0; lo < len(order); lo += perTx {
		chunk := order[lo:min(lo+perTx, len(order))]
		for k, p := range chunk {
			if buf[k], err = proto.Marshal(p.ev); err != nil {
				return measure{}, err
			}
		}
		if err := db.Update(func(tx *bbolt.Tx) error {
			runs := tx.Bucket(bucketRuns)
			for k, p := range chunk {
				b := runs.Bucket([]byte(ids[p.run])).Bucket(bucketEvents)
				b.FillPercent = fillPercent
				if err := b.Put(seqKey(p.ev.GetSequence()), buf[k]); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return measure{}, err
		}
	}
	return measure{units: float64(len(order)), elapsed: time.Since(t0)}, nil
}

// openCounted opens the store at path and returns the bbolt transaction ID
// it starts from, so that txID after closing it tells how many commits were
// made in between.
func openCounted(path string) (*bolt.Store, uint64, error) {
	before := uint64(0)
	if _, err := os.Stat(path); err == nil {
		if before, err = txID(path); err != nil {
			return nil, 0, err
		}
	}
	s, err := bolt.Open(path, bolt.Options{})
	if err != nil {
		return nil, 0, err
	}
	// Open's initialising Update is not one of the commits to count.
	return s, before + 1, nil
}

// txID is the ID of the last committed write transaction of a bbolt file: it
// grows by one per commit.
func txID(path string) (uint64, error) {
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var id uint64
	err = db.View(func(tx *bbolt.Tx) error {
		id = uint64(tx.ID())
		return nil
	})
	return id, err
}
