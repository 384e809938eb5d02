package replay

import (
	"context"
	"fmt"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/engine"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
)

// runLog is the in-memory log a replay writes: one run's events, validated as
// a store validates them (each append is folded onto the run's state with
// runstate.ApplyAll and refused whole if an event does not apply, and it is
// fenced by the expected version and the lease epoch), and compared, as it
// is appended, with the recorded event of the same sequence.
//
// It is the engine.Store of one synchronous engine (engine.NewSync), so it
// is used from one goroutine and takes no lock. It keeps the events it is
// given without copying them: the engine never changes an event once it is
// appended, and each is compared when it is appended, so what is compared is
// what a durable store would have written.
type runLog struct {
	runID    string
	recorded []*reinv1.Event
	st       runstate.State
	events   []*reinv1.Event
	// blobs are those the engine appended WithBlobs, and the recording's.
	blobs map[string][]byte
	epoch uint64
	// diverged is the first event where the logs part, nil while they match.
	diverged *Divergence
	// children are the recorded logs of the runs it delegated to and
	// their states: read, never written. A child's state is its log's
	// fold up to the raise it was lent next (childView): a child paused
	// on its budget stays paused until the replay lends it the raise the
	// recording did.
	children    map[string][]*reinv1.Event
	childStates map[string]runstate.State
	// childOpen is each ended child as it was just before it ended: the
	// replay shows it so until the recording's parent takes its report
	// next (child).
	childOpen map[string]runstate.State
	// lent counts the raises the replayed log lent each child.
	lent map[string]int
}

var _ engine.Store = (*runLog)(nil)

// addChildren gives the log its children's recorded logs, each folded.
func (l *runLog) addChildren(children map[string][]*reinv1.Event) error {
	l.children, l.childStates, l.childOpen, l.lent = children, map[string]runstate.State{}, map[string]runstate.State{}, map[string]int{}
	for id := range children {
		if err := l.childView(id); err != nil {
			return err
		}
	}
	return nil
}

// childView folds child id's recorded log up to the raise it was lent
// next, or whole when the replay lent it every raise it was given.
func (l *runLog) childView(id string) error {
	evs, raises := l.children[id], 0
	for i, ev := range evs {
		if ev.GetBudgetRaised() != nil {
			if raises == l.lent[id] {
				evs = evs[:i]
				break
			}
			raises++
		}
	}
	var open runstate.State
	st := runstate.State{}
	for _, ev := range evs {
		next, err := runstate.Apply(st, ev)
		if err != nil {
			return fmt.Errorf("%w: child run %s's recorded log does not fold: %v", ErrUnsupported, id, err)
		}
		if runstate.Terminal(next.Status) && !runstate.Terminal(st.Status) {
			open = st
		}
		st = next
	}
	l.childStates[id], l.childOpen[id] = st, open
	return nil
}

// child is child id as the replayed parent finds it now. An ended child
// is shown ended only when the recording's parent reports it next: a
// live parent takes its children's reports in the order it found them
// ended, which their clocks need not tell (a child's last clock reading
// is taken before its commit, so one that read the clock first can
// commit second, after its parent woke for the other).
func (l *runLog) child(id string) (runstate.State, bool) {
	st, ok := l.childStates[id]
	if !ok || !runstate.Terminal(st.Status) {
		return st, ok
	}
	if v := int(l.st.Version); v < len(l.recorded) && l.recorded[v].GetDelegationReturned().GetRunId() == id {
		return st, true
	}
	return l.childOpen[id], true
}

func newRunLog(recorded []*reinv1.Event, blobs map[string][]byte) *runLog {
	l := &runLog{
		runID:    recorded[0].GetRunId(),
		recorded: recorded,
		events:   make([]*reinv1.Event, 0, len(recorded)),
		blobs:    map[string][]byte{},
	}
	for h, b := range blobs {
		l.blobs[h] = b
	}
	return l
}

// Create implements engine.Store for the one run a replay makes.
func (l *runLog) Create(_ context.Context, started *reinv1.Event) (runstate.State, bool, error) {
	if len(l.events) > 0 && started.GetRunStarted().GetDelegatedBy().GetParentRunId() == l.runID {
		// A child: it exists, as recorded.
		st, ok := l.child(started.GetRunId())
		if !ok {
			return runstate.State{}, false, fmt.Errorf("%w: run %s delegated to run %s, whose recording was not given: replay a tree from rein export --tree",
				ErrUnsupported, l.runID, started.GetRunId())
		}
		return st, false, nil
	}
	if len(l.events) > 0 {
		if rs := started.GetRunStarted(); rs.GetTenant() == l.st.Tenant && rs.GetRequestId() == l.st.RequestID {
			return l.st, false, nil // as a store: the request was made
		}
		return runstate.State{}, false, fmt.Errorf("create run %s: a replay log holds one run: %w", started.GetRunId(), store.ErrConflict)
	}
	st, err := runstate.Apply(runstate.State{}, started)
	if err != nil {
		return runstate.State{}, false, err
	}
	if st.RunID != l.runID {
		return runstate.State{}, false, fmt.Errorf("create run %s: the recording is run %s: %w", st.RunID, l.runID, store.ErrConflict)
	}
	l.keep(started)
	l.st = st
	return st, true, nil
}

// Append implements engine.Store: it returns the state it folded.
func (l *runLog) Append(_ context.Context, runID string, expected uint64, events []*reinv1.Event, opts ...store.AppendOption) (runstate.State, error) {
	if err := l.has(runID); err != nil {
		return runstate.State{}, err
	}
	o := store.Options(opts)
	if epoch := o.Epoch; epoch != 0 && epoch != l.epoch {
		return runstate.State{}, fmt.Errorf("append to run %s with lease epoch %d: the run's owner is now at epoch %d: %w", runID, epoch, l.epoch, store.ErrFenced)
	}
	if l.st.Version != expected {
		return runstate.State{}, fmt.Errorf("append to run %s at version %d: the run is at version %d: %w", runID, expected, l.st.Version, store.ErrConflict)
	}
	next, err := runstate.ApplyAll(l.st, events)
	if err != nil {
		return runstate.State{}, fmt.Errorf("append to run %s: %w", runID, err)
	}
	for _, ev := range events {
		l.keep(ev)
		if id := ev.GetBudgetRaised().GetChildRunId(); id != "" && l.children[id] != nil {
			// The child has the raise now, as it had when recorded.
			l.lent[id]++
			if err := l.childView(id); err != nil {
				return runstate.State{}, err
			}
		}
	}
	for h, b := range o.Blobs {
		l.blobs[h] = b
	}
	l.st = next
	l.steered()
	return next, nil
}

// steered appends the people's messages (run_steered) the recording has
// next, as they came in when it was made: after the event before them,
// whatever the driver does next. Its next commit then finds the run moved
// and takes them in, as a live driver does.
func (l *runLog) steered() {
	for l.diverged == nil && int(l.st.Version) < len(l.recorded) {
		rec := l.recorded[l.st.Version]
		if rec.GetRunSteered() == nil {
			return
		}
		next, err := runstate.Apply(l.st, rec)
		if err != nil {
			return // the comparison says where the logs part
		}
		l.keep(rec)
		l.st = next
	}
}

// Blobs implements engine.Store: a blob appended with the log's events, or
// one of the recording's.
func (l *runLog) Blobs(_ context.Context, _ string, hashes []string) (map[string][]byte, error) {
	out := make(map[string][]byte, len(hashes))
	for _, h := range hashes {
		b, ok := l.blobs[h]
		if !ok {
			return nil, fmt.Errorf("blob %s: %w", h, store.ErrNoBlob)
		}
		out[h] = b
	}
	return out, nil
}

// Acquire implements engine.Store.
func (l *runLog) Acquire(_ context.Context, runID, _ string) (uint64, error) {
	if err := l.has(runID); err != nil {
		return 0, err
	}
	l.epoch++
	return l.epoch, nil
}

// Load implements engine.Store. The state's pointers are never changed
// (runstate.State), so it is returned as it is.
func (l *runLog) Load(_ context.Context, runID string) (runstate.State, error) {
	if st, ok := l.child(runID); ok {
		return st, nil
	}
	return l.st, l.has(runID)
}

// List implements engine.Store: the log's one run, when it passes f.
func (l *runLog) List(_ context.Context, f store.Filter) (store.Page, error) {
	if l.st.Version == 0 || !f.Matches(l.st) {
		return store.Page{}, nil
	}
	return store.Page{Runs: []runstate.State{l.st}}, nil
}

// Import implements engine.Store: a replay imports nothing.
func (l *runLog) Import(context.Context, []*reinv1.Event, map[string][]byte) (runstate.State, error) {
	return runstate.State{}, fmt.Errorf("%w: a replay imports no run", ErrUnsupported)
}

// Events implements engine.Store. The slice is the log's own, capped so
// that an append to it cannot reach the log.
func (l *runLog) Events(_ context.Context, runID string, after uint64, limit int) ([]*reinv1.Event, error) {
	if evs, ok := l.children[runID]; ok {
		from := min(int(after), len(evs))
		to := min(from+max(limit, 0), len(evs))
		return evs[from:to:to], nil
	}
	if err := l.has(runID); err != nil {
		return nil, err
	}
	from := min(int(after), len(l.events))
	to := min(from+max(limit, 0), len(l.events))
	return l.events[from:to:to], nil
}

func (l *runLog) has(runID string) error {
	if len(l.events) == 0 || runID != l.runID {
		return fmt.Errorf("run %s: %w", runID, store.ErrNotFound)
	}
	return nil
}

// keep adds an applied event to the log and compares it with the recorded
// event of its sequence.
func (l *runLog) keep(ev *reinv1.Event) {
	l.events = append(l.events, ev)
	if l.diverged != nil {
		return
	}
	i := len(l.events) - 1
	if i >= len(l.recorded) {
		l.diverged = &Divergence{Sequence: uint64(i) + 1, Got: ev}
		return
	}
	keepTiming(ev, l.recorded[i])
	if !equalEvent(l.recorded[i], ev) {
		l.diverged = &Divergence{Sequence: uint64(i) + 1, Expected: l.recorded[i], Got: ev, Field: difference(l.recorded[i], ev)}
	}
}

// divergence is the first event where the logs part, once the replay has
// stopped: a replay that stopped short parts where its log ends.
func (l *runLog) divergence() *Divergence {
	if l.diverged == nil && len(l.events) < len(l.recorded) {
		return &Divergence{Sequence: uint64(len(l.events)) + 1, Expected: l.recorded[len(l.events)]}
	}
	return l.diverged
}
