//go:build reinbench

package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/store/seal"
)

// stateCeiling is the bolt ceiling offering the state puts too: each is
// kept, in order per run, and its events put through the bolt ceiling's
// log. fail, set, is what the put after the first few returns.
type stateCeiling struct {
	Ceiling
	mu    sync.Mutex
	puts  map[int][]stateCommit
	fail  error
	calls int
}

func (c *stateCeiling) CreateStateLog(path string, runIDs []string) (func(int, uint64, [][]byte, []byte, map[string][]byte) error, func() error, error) {
	put, closeLog, err := c.CreateLog(path, runIDs)
	if err != nil {
		return nil, nil, err
	}
	c.mu.Lock()
	c.puts = map[int][]stateCommit{}
	c.mu.Unlock()
	return func(run int, first uint64, data [][]byte, snapshot []byte, blobs map[string][]byte) error {
		c.mu.Lock()
		c.calls++
		if c.fail != nil && c.calls > 3 {
			c.mu.Unlock()
			return c.fail
		}
		c.puts[run] = append(c.puts[run], stateCommit{first, data, snapshot, blobs})
		c.mu.Unlock()
		runs, seqs := make([]int, len(data)), make([]uint64, len(data))
		for i := range data {
			runs[i], seqs[i] = run, first+uint64(i)
		}
		return put(runs, seqs, data)
	}, closeLog, nil
}

// TestStepsAgainstTheSameBytes: on a backend whose ceiling is a
// StateCeiling, the steps scenarios' baseline commits what the figure's
// engine committed: each run's events sealed, from sequence 1 on, in its
// appends' groups (two events a step's commit), each with the run's
// snapshot folded to its end and the blobs of its model call's input;
// the ratio against the events alone is reported beside. The twin: a
// ceiling whose put fails fails the scenario with its error.
func TestStepsAgainstTheSameBytes(t *testing.T) {
	for _, runs := range []int{1, 3} {
		c := &stateCeiling{Ceiling: boltBackend().Ceiling}
		o := small(t, 0.002)
		o.Rounds, o.Runs, o.Backend.Ceiling = 1, runs, c
		scenario := Steps
		if runs > 1 {
			scenario = StepsRuns
		}
		r, err := scenario(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		if x := r.Extra; !(x["events_baseline"] > 0) || x["events_ratio"] != r.Figure/x["events_baseline"] {
			t.Errorf("%d runs: events alone %v, ratio %v; want a rate and figure/rate", runs, x["events_baseline"], x["events_ratio"])
		}
		if len(c.puts) != runs {
			t.Fatalf("%d runs: the ceiling was given %d runs' commits", runs, len(c.puts))
		}
		for run, puts := range c.puts {
			var st runstate.State
			next, blobs := uint64(1), 0
			for i, p := range puts {
				if p.first != next || (i > 1 && len(p.events) != 2) {
					t.Fatalf("run %d commit %d: %d events from %d, want the events from %d as the engine groups them", run, i, len(p.events), p.first, next)
				}
				for _, data := range p.events {
					ev := mustOpen[*reinv1.Event](t, data)
					if ev.GetSequence() != next {
						t.Fatalf("run %d commit %d holds event %d, want %d", run, i, ev.GetSequence(), next)
					}
					var err error
					if st, err = runstate.Apply(st, ev); err != nil {
						t.Fatal(err)
					}
					for _, h := range ev.GetModelRequested().GetInputBlobs() {
						if store.BlobHash(p.blobs[h]) != h {
							t.Errorf("run %d event %d names blob %.12s…, which its commit does not bring", run, next, h)
						}
						blobs++
					}
					next++
				}
				if snap := mustOpen[*reinv1.Run](t, p.snapshot); !proto.Equal(snap, st.Proto(false)) {
					t.Fatalf("run %d commit %d: its snapshot is not the run folded to event %d", run, i, next-1)
				}
			}
			if st.Status != reinv1.RunStatus_RUN_STATUS_COMPLETED || blobs == 0 {
				t.Errorf("run %d: the commits end %s with %d blobs named; want completed, and the model calls' input", run, runstate.StatusName(st.Status), blobs)
			}
		}
	}

	boom := errors.New("boom")
	o := small(t, 0.002)
	o.Rounds, o.Backend.Ceiling = 1, &stateCeiling{Ceiling: boltBackend().Ceiling, fail: boom}
	if _, err := Steps(context.Background(), o); !errors.Is(err, boom) || !strings.Contains(err.Error(), "baseline") {
		t.Errorf("steps on a failing ceiling: %v, want its error, in the baseline", err)
	}
}

// TestStateCommitsRefuseAGap: appends that do not cover a log one after
// the other are an error naming the run and the sequences, not a baseline
// that puts other bytes than the figure's.
func TestStateCommitsRefuseAGap(t *testing.T) {
	at := benchTime()
	var log [][]byte
	for seq := uint64(1); seq <= 7; seq++ {
		ev := runStarted("run_x", at)
		if seq > 1 {
			ev = stepEvent("run_x", seq, at, true)
		}
		b, err := proto.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		log = append(log, b)
	}
	whole := []recordedAppend{{first: 2, n: 2}, {first: 4, n: 2}, {first: 6, n: 2}}
	got, err := stateCommits("run_x", log, whole)
	if err != nil || len(got) != 4 || got[3].first != 6 {
		t.Fatalf("stateCommits of a whole log: %d commits, %v; want 4", len(got), err)
	}
	for name, appends := range map[string][]recordedAppend{
		"a gap":      {{first: 2, n: 2}, {first: 5, n: 3}},
		"an overlap": {{first: 2, n: 3}, {first: 4, n: 4}},
		"short":      {{first: 2, n: 2}, {first: 4, n: 2}},
		"too long":   {{first: 2, n: 2}, {first: 4, n: 9}},
	} {
		if _, err := stateCommits("run_x", log, appends); err == nil || !strings.Contains(err.Error(), "run_x") {
			t.Errorf("%s: %v, want an error naming the run", name, err)
		}
	}
}

// mustOpen is the message of type M sealed in v.
func mustOpen[M proto.Message](t *testing.T, v []byte) M {
	t.Helper()
	data, problem := seal.Open(v)
	if problem != "" {
		t.Fatalf("a sealed value: %s", problem)
	}
	var m M
	m = m.ProtoReflect().Type().New().Interface().(M)
	if err := proto.Unmarshal(data, m); err != nil {
		t.Fatal(fmt.Errorf("a sealed value: %w", err))
	}
	return m
}
