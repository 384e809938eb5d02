package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/engine"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/server"
)

// admissionRuns is how many runs one round of the admission scenario
// starts, at scale 1; admissionSlots is the limit the figure queues them
// under, the engine's workers, so that both sides step as many runs at
// once.
const (
	admissionRuns  = 2000
	admissionSlots = 64
	// admissionTarget is the ratio of runs/s through a full queue to the
	// same runs started without a limit that the scenario must reach.
	admissionTarget = 0.8
)

// Admission measures what a queue costs: admissionRuns one-step runs
// (a scripted final answer, no delay), durable, through a server node.
// The figure queues them all under --max-running admissionSlots: every
// run is created queued and started by the admission passes as slots
// free. The baseline starts the same runs without a limit, as many
// stepping at once (the engine's workers). Both are timed from the first
// start to the last run's end.
//
// Extra reports the time from a slot freeing (a run's end committed) to
// the next queued run's start (its run_admitted), p50 and p99 in
// milliseconds, over every admission that waited for a slot.
func Admission(ctx context.Context, o Options) (Result, error) {
	r := Result{Scenario: "admission", Unit: "runs/s", Target: admissionTarget, Runs: admissionSlots, Extra: map[string]float64{}}
	be, err := o.backend(r.Scenario)
	if err != nil {
		return r, err
	}
	dir, err := tempDir(o, r.Scenario)
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	n := o.scaled(admissionRuns, admissionSlots*2)
	var latencies []float64
	side := func(name string, queued bool) func(int) (measure, error) {
		return func(round int) (measure, error) {
			path := filepath.Join(dir, fmt.Sprintf("%s-%d.db", name, round))
			defer os.Remove(path)
			m, lat, err := admissionRound(ctx, be, path, n, queued)
			latencies = append(latencies, lat...)
			return m, err
		}
	}
	if err := alternateOrder(ctx, &r, o.rounds(), true, side("figure", true), side("baseline", false)); err != nil {
		return r, err
	}
	r.Events = n
	r.Extra["runs"] = float64(n)
	r.Extra["slots"] = admissionSlots
	r.Extra["slot_to_start_ms_p50"] = percentile(latencies, 0.5)
	r.Extra["slot_to_start_ms_p99"] = percentile(latencies, 0.99)
	return r, nil
}

func admissionRound(ctx context.Context, be Backend, path string, n int, queued bool) (measure, []float64, error) {
	s, err := be.Open(path, false)
	if err != nil {
		return measure{}, nil, err
	}
	cfg := server.Config{Store: s, Resume: false}
	if queued {
		cfg.Admission = &server.AdmissionConfig{Tenant: func(string) (int, float64) { return 0, 1 }, MaxRunning: admissionSlots, Every: time.Second}
	}
	node, err := server.Open(ctx, cfg)
	if err != nil {
		_ = s.Close()
		return measure{}, nil, err
	}
	defer node.Close()
	c := &reinv1.TaskContract{Goal: "answer", Model: &reinv1.ModelSpec{Provider: "script", Name: "bench",
		Script: []*reinv1.ScriptedReply{scripted(finalDecision("done"))}}}
	ids := make([]string, 0, n)
	start := time.Now()
	for i := range n {
		st, _, err := node.Engine.Start(ctx, engine.StartRequest{RequestID: fmt.Sprintf("run-%d", i), Contract: c, Principal: "bench", Queued: queued})
		if err != nil {
			return measure{}, nil, err
		}
		ids = append(ids, st.RunID)
	}
	if err := allEnded(ctx, node.Store, n); err != nil {
		return measure{}, nil, err
	}
	m := measure{units: float64(n), elapsed: time.Since(start)}
	if !queued {
		return m, nil, nil
	}
	lat, err := slotToStart(ctx, node.Store, ids)
	return m, lat, err
}

// allEnded waits until n runs of st have completed.
func allEnded(ctx context.Context, st store.Store, n int) error {
	for {
		done := 0
		f := store.Filter{Statuses: []reinv1.RunStatus{reinv1.RunStatus_RUN_STATUS_COMPLETED}, Limit: 1000}
		for {
			page, err := st.List(ctx, f)
			if err != nil {
				return err
			}
			done += len(page.Runs)
			if page.Next == "" {
				break
			}
			f.After = page.Next
		}
		if done >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// slotToStart is, for each run admitted after waiting for a slot (one
// admitted after a run had ended), the milliseconds from the last run's
// end before its start to its start, by the events' times.
func slotToStart(ctx context.Context, st store.Store, ids []string) ([]float64, error) {
	var ends, starts []time.Time
	for _, id := range ids {
		evs, err := st.Events(ctx, id, 0, 100)
		if err != nil {
			return nil, err
		}
		for _, ev := range evs {
			switch {
			case ev.GetRunAdmitted() != nil:
				starts = append(starts, ev.GetRecordedAt().AsTime())
			case runstate.Terminal(ev.GetStatusChanged().GetTo()):
				ends = append(ends, ev.GetRecordedAt().AsTime())
			}
		}
	}
	slices.SortFunc(ends, time.Time.Compare)
	var out []float64
	for _, s := range starts {
		i, _ := slices.BinarySearchFunc(ends, s, time.Time.Compare)
		if i == 0 {
			continue // started before any slot freed
		}
		out = append(out, float64(s.Sub(ends[i-1]))/float64(time.Millisecond))
	}
	return out, nil
}
