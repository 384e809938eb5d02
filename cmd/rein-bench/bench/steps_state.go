package bench

import (
	"context"
	"fmt"
	"maps"
	"sync"

	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/store/seal"
)

// The steps scenarios on a backend whose ceiling is a StateCeiling measure
// against commits of the same bytes as the store's: each append the
// figure's engine made, as it made it (its events, the run's snapshot
// after it, the blobs it brought), put raw. The figure's first round
// records its appends (appendRecorder); stateCommits turns them, with the
// events read back, into each run's commits before any baseline is timed.

// appendRecorder is a figure's store that records each append it stores:
// which events of which run went in one commit, and the blobs with them.
type appendRecorder struct {
	Store
	mu      sync.Mutex
	appends map[string][]recordedAppend
}

// recordedAppend is one stored append: n events from sequence first, and
// the blobs it brought.
type recordedAppend struct {
	first uint64
	n     int
	blobs map[string][]byte
}

func recordAppends(s Store) *appendRecorder {
	return &appendRecorder{Store: s, appends: map[string][]recordedAppend{}}
}

func (a *appendRecorder) Append(ctx context.Context, runID string, expected uint64, events []*reinv1.Event, opts ...store.AppendOption) (runstate.State, error) {
	st, err := a.Store.Append(ctx, runID, expected, events, opts...)
	if err != nil || len(events) == 0 {
		return st, err
	}
	blobs := store.Options(opts).Blobs
	a.mu.Lock()
	a.appends[runID] = append(a.appends[runID], recordedAppend{first: expected + 1, n: len(events), blobs: maps.Clone(blobs)})
	a.mu.Unlock()
	return st, nil
}

// stateCommit is one commit of the same-bytes baseline: a run's events
// from sequence first and the run's snapshot after them, sealed as a store
// seals them, and the blobs that came with them.
type stateCommit struct {
	first    uint64
	events   [][]byte
	snapshot []byte
	blobs    map[string][]byte
}

// figureCommits is stateCommits of each run of a figure's round: encoded
// and appends hold run i's at i.
func figureCommits(encoded [][][]byte, appends [][]recordedAppend) ([][]stateCommit, error) {
	if len(appends) != len(encoded) {
		return nil, fmt.Errorf("the figure recorded the appends of %d runs of %d", len(appends), len(encoded))
	}
	ids := benchRunIDs(len(encoded))
	out := make([][]stateCommit, len(encoded))
	for i, run := range encoded {
		var err error
		if out[i], err = stateCommits(ids[i], run, appends[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// stateCommits is a run's commits for the same-bytes baseline: its
// creation (run_started alone), then each of its appends, in order. encoded
// is its log as stored (marshalled events from sequence 1); each snapshot
// is its state folded to the end of that commit. Events and snapshots are
// sealed (seal.Seal), as every store seals them. An append log that does
// not cover the events one after the other is an error.
func stateCommits(runID string, encoded [][]byte, appends []recordedAppend) ([]stateCommit, error) {
	if len(encoded) == 0 {
		return nil, fmt.Errorf("run %s: no events to commit", runID)
	}
	var st runstate.State
	commit := func(first uint64, n int, blobs map[string][]byte) (stateCommit, error) {
		events := make([][]byte, n)
		for i, data := range encoded[first-1 : first-1+uint64(n)] {
			seq := first + uint64(i)
			ev := &reinv1.Event{}
			if err := proto.Unmarshal(data, ev); err != nil {
				return stateCommit{}, fmt.Errorf("run %s event %d: %w", runID, seq, err)
			}
			var err error
			if st, err = runstate.Apply(st, ev); err != nil {
				return stateCommit{}, fmt.Errorf("run %s event %d: %w", runID, seq, err)
			}
			if events[i], err = seal.Seal(ev); err != nil {
				return stateCommit{}, fmt.Errorf("run %s event %d: %w", runID, seq, err)
			}
		}
		snapshot, err := seal.Seal(st.Proto(false))
		if err != nil {
			return stateCommit{}, fmt.Errorf("run %s: seal its snapshot: %w", runID, err)
		}
		return stateCommit{first: first, events: events, snapshot: snapshot, blobs: blobs}, nil
	}
	c, err := commit(1, 1, nil)
	if err != nil {
		return nil, err
	}
	out := []stateCommit{c}
	next := uint64(2)
	for _, a := range appends {
		if a.first != next || a.first-1+uint64(a.n) > uint64(len(encoded)) {
			return nil, fmt.Errorf("run %s: an append of %d events from sequence %d, where its log of %d events goes on from %d",
				runID, a.n, a.first, len(encoded), next)
		}
		if c, err = commit(a.first, a.n, a.blobs); err != nil {
			return nil, err
		}
		out = append(out, c)
		next += uint64(a.n)
	}
	if next != uint64(len(encoded))+1 {
		return nil, fmt.Errorf("run %s: its appends end at sequence %d, its log at %d", runID, next-1, len(encoded))
	}
	return out, nil
}

// stateBaseline writes each run's commits (plans[i] is run i's) raw into a
// fresh store of the ceiling, one writer per run, as the figure's engine
// committed them. It reports steps per second and how many commits it made.
func stateBaseline(c StateCeiling, path string, plans [][]stateCommit, steps float64) (measure, int, error) {
	put, closeLog, err := c.CreateStateLog(path, benchRunIDs(len(plans)))
	if err != nil {
		return measure{}, 0, err
	}
	defer func() { _ = closeLog() }()
	puts := 0
	for _, plan := range plans {
		puts += len(plan)
	}
	elapsed, err := writeRuns(len(plans), func(run int) error {
		for _, c := range plans[run] {
			if err := put(run, c.first, c.events, c.snapshot, c.blobs); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return measure{}, 0, err
	}
	return measure{units: steps, elapsed: elapsed}, puts, nil
}
