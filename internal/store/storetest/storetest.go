// Package storetest is the conformance suite for store.Store, written once
// against the interface and run by every backend:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T, dir string) store.Store {
//			s, err := bolt.Open(filepath.Join(dir, "rein.db"))
//			if err != nil {
//				t.Fatal(err)
//			}
//			return s
//		})
//	}
//
// The suite's run IDs sort in creation order ("run-0001", "run-0002", …), as
// the IDs rein makes do (ULIDs): a backend may order List by run ID, so run
// IDs must sort by creation time.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Run runs the conformance suite against the backend that open opens. open
// returns a store over the data in dir; called again on the same dir after
// Close, it must see the same data. The suite closes every store it opens.
func Run(t *testing.T, open func(t *testing.T, dir string) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, h *harness)
	}{
		{"CreateThenLoad", testCreateThenLoad},
		{"CreateRejectsInvalid", testCreateRejectsInvalid},
		{"CreateIdempotent", testCreateIdempotent},
		{"CreateIdempotentConcurrent", testCreateIdempotentConcurrent},
		{"AppendAndEvents", testAppendAndEvents},
		{"EventsPaging", testEventsPaging},
		{"AppendStaleVersion", testAppendStaleVersion},
		{"AppendRejectedByFold", testAppendRejectedByFold},
		{"AppendConflictConcurrent", testAppendConflictConcurrent},
		{"AppendManyRunsConcurrent", testAppendManyRunsConcurrent},
		{"Reopen", testReopen},
		{"NotFound", testNotFound},
		{"List", testList},
		{"ListRejectsBadLimit", testListRejectsBadLimit},
		{"Closed", testClosed},
		{"CloseDuringAppends", testCloseDuringAppends},
		{"Changes", testChanges},
		{"LeaseFencing", testLeaseFencing},
		{"BlobsAppendThenRead", testBlobsAppendThenRead},
		{"BlobsDedup", testBlobsDedup},
		{"BlobsInvalid", testBlobsInvalid},
		{"BlobsRefusedAppend", testBlobsRefusedAppend},
		{"BlobNotFound", testBlobNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := &harness{t: t, dir: t.TempDir(), open: open}
			h.s = open(t, h.dir)
			t.Cleanup(func() {
				if !h.closed {
					if err := h.s.Close(); err != nil {
						t.Errorf("Close: %v", err)
					}
				}
			})
			tc.fn(t, h)
		})
	}
}

// harness holds one subtest's store and the dir it lives in.
type harness struct {
	t      *testing.T
	dir    string
	open   func(t *testing.T, dir string) store.Store
	s      store.Store
	closed bool
}

// close closes the store and fails the test on an error.
func (h *harness) close() {
	h.t.Helper()
	if err := h.s.Close(); err != nil {
		h.t.Fatalf("Close: %v", err)
	}
	h.closed = true
}

// reopen closes the store and opens a new one over the same dir.
func (h *harness) reopen() {
	h.t.Helper()
	if !h.closed {
		h.close()
	}
	h.s = h.open(h.t, h.dir)
	h.closed = false
}

// The events the suite writes. Event seq of a run is recorded at
// epoch + seq seconds.

var epoch = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func at(seq uint64) *timestamppb.Timestamp {
	return timestamppb.New(epoch.Add(time.Duration(seq) * time.Second))
}

func runID(i int) string { return fmt.Sprintf("run-%04d", i) }

// spec describes a run to create.
type spec struct {
	id, tenant, requestID, goal string
	labels                      map[string]string
}

func newSpec(i int) spec {
	return spec{id: runID(i), tenant: "acme", requestID: fmt.Sprintf("req-%d", i), goal: fmt.Sprintf("goal %d", i)}
}

func envelope(id string, seq uint64) *reinv1.Event {
	return &reinv1.Event{RunId: id, Sequence: seq, RecordedAt: at(seq), Actor: "harness"}
}

func runStarted(sp spec) *reinv1.Event {
	e := envelope(sp.id, 1)
	e.Actor = "principal:alice"
	e.Payload = &reinv1.Event_RunStarted{RunStarted: &reinv1.RunStarted{
		Contract:  &reinv1.TaskContract{Goal: sp.goal, Labels: sp.labels},
		Principal: "alice",
		Tenant:    sp.tenant,
		RequestId: sp.requestID,
		Deadline:  timestamppb.New(epoch.Add(time.Hour)),
	}}
	return e
}

func modelRequested(id string, seq uint64, hash string) *reinv1.Event {
	e := envelope(id, seq)
	e.Payload = &reinv1.Event_ModelRequested{ModelRequested: &reinv1.ModelRequested{
		Step: uint32(seq / 2), InputHash: hash, Model: "scripted/test", InputTokens: 10,
	}}
	return e
}

func modelReturned(id string, seq uint64) *reinv1.Event {
	e := envelope(id, seq)
	e.Actor = "model"
	e.Payload = &reinv1.Event_ModelReturned{ModelReturned: &reinv1.ModelReturned{
		Decision: &reinv1.Decision{Action: &reinv1.Decision_ToolCall{ToolCall: &reinv1.ToolCall{
			Tool: "read_file", CallId: fmt.Sprintf("call-%d", seq),
		}}},
		Usage: &reinv1.Usage{InputTokens: 10, OutputTokens: seq},
	}}
	return e
}

func inputRequested(id string, seq uint64) *reinv1.Event {
	e := envelope(id, seq)
	e.Payload = &reinv1.Event_InputRequested{InputRequested: &reinv1.InputRequested{
		Question: &reinv1.Question{Text: "which branch?"},
	}}
	return e
}

func statusChanged(id string, seq uint64, from, to reinv1.RunStatus) *reinv1.Event {
	e := envelope(id, seq)
	sc := &reinv1.StatusChanged{From: from, To: to, Reason: "test"}
	switch to {
	case reinv1.RunStatus_RUN_STATUS_COMPLETED:
		sc.Result = &reinv1.FinalAnswer{Text: "done", Data: structpb.NewBoolValue(true)}
	case reinv1.RunStatus_RUN_STATUS_FAILED:
		sc.Error = "model client: quota"
	}
	e.Payload = &reinv1.Event_StatusChanged{StatusChanged: sc}
	return e
}

// step is the event at seq of a run that only calls the model: even
// sequences request, odd ones return.
func step(id string, seq uint64) *reinv1.Event {
	if seq%2 == 0 {
		return modelRequested(id, seq, fmt.Sprintf("hash-%d", seq))
	}
	return modelReturned(id, seq)
}

// steps is n step events of run id starting at sequence from.
func steps(id string, from uint64, n int) []*reinv1.Event {
	var evs []*reinv1.Event
	for i := range uint64(n) {
		evs = append(evs, step(id, from+i))
	}
	return evs
}

const (
	running   = reinv1.RunStatus_RUN_STATUS_RUNNING
	needsIn   = reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT
	completed = reinv1.RunStatus_RUN_STATUS_COMPLETED
	failed    = reinv1.RunStatus_RUN_STATUS_FAILED
	cancelled = reinv1.RunStatus_RUN_STATUS_CANCELLED
	expired   = reinv1.RunStatus_RUN_STATUS_EXPIRED
)

// all is a limit larger than any run's log in the suite.
const all = 1 << 20

// Helpers that fail the test on an unexpected error.

func mustCreate(t *testing.T, s store.Store, ev *reinv1.Event) runstate.State {
	t.Helper()
	st, created, err := s.Create(t.Context(), ev)
	if err != nil {
		t.Fatalf("Create(%s): %v", ev.GetRunId(), err)
	}
	if !created {
		t.Fatalf("Create(%s): created = false, want true", ev.GetRunId())
	}
	return st
}

func mustAppend(t *testing.T, s store.Store, id string, expected uint64, evs ...*reinv1.Event) {
	t.Helper()
	if err := s.Append(t.Context(), id, expected, evs); err != nil {
		t.Fatalf("Append(%s, %d, %d events): %v", id, expected, len(evs), err)
	}
}

func mustLoad(t *testing.T, s store.Store, id string) runstate.State {
	t.Helper()
	st, err := s.Load(t.Context(), id)
	if err != nil {
		t.Fatalf("Load(%s): %v", id, err)
	}
	return st
}

func mustEvents(t *testing.T, s store.Store, id string, after uint64, limit int) []*reinv1.Event {
	t.Helper()
	evs, err := s.Events(t.Context(), id, after, limit)
	if err != nil {
		t.Fatalf("Events(%s, %d, %d): %v", id, after, limit, err)
	}
	return evs
}

// fold is the state the log evs must produce.
func fold(t *testing.T, evs []*reinv1.Event) runstate.State {
	t.Helper()
	st, err := runstate.ApplyAll(runstate.State{}, evs)
	if err != nil {
		t.Fatalf("fold: %v", err)
	}
	return st
}

// assertState fails when got is not want, comparing every field through the
// Run message.
func assertState(t *testing.T, what string, got, want runstate.State) {
	t.Helper()
	if g, w := got.Proto(true), want.Proto(true); !proto.Equal(g, w) {
		t.Errorf("%s:\n got  %v\n want %v", what, g, w)
	}
}

// assertLog fails unless run id's stored log is exactly want: every event
// equal, sequences 1..N gap-free, and its snapshot the fold of the log.
func assertLog(t *testing.T, s store.Store, id string, want []*reinv1.Event) {
	t.Helper()
	got := mustEvents(t, s, id, 0, all)
	if len(got) != len(want) {
		t.Fatalf("Events(%s): %d events, want %d", id, len(got), len(want))
	}
	for i, ev := range got {
		if ev.GetSequence() != uint64(i+1) {
			t.Fatalf("Events(%s)[%d]: sequence %d, want %d", id, i, ev.GetSequence(), i+1)
		}
		if !proto.Equal(ev, want[i]) {
			t.Fatalf("Events(%s)[%d]:\n got  %v\n want %v", id, i, ev, want[i])
		}
	}
	assertState(t, "Load("+id+")", mustLoad(t, s, id), fold(t, want))
}

func testCreateThenLoad(t *testing.T, h *harness) {
	sp := newSpec(1)
	sp.labels = map[string]string{"team": "infra"}
	ev := runStarted(sp)
	st := mustCreate(t, h.s, ev)
	for what, got := range map[string]runstate.State{"Create": st, "Load": mustLoad(t, h.s, sp.id)} {
		if got.RunID != sp.id || got.Status != running || got.Version != 1 {
			t.Errorf("%s: run %q status %v version %d, want %q running 1", what, got.RunID, got.Status, got.Version, sp.id)
		}
		if !proto.Equal(got.Contract, ev.GetRunStarted().GetContract()) {
			t.Errorf("%s: contract %v, want %v", what, got.Contract, ev.GetRunStarted().GetContract())
		}
		if got.Principal != "alice" || got.Tenant != sp.tenant || got.RequestID != sp.requestID {
			t.Errorf("%s: principal %q tenant %q request %q", what, got.Principal, got.Tenant, got.RequestID)
		}
		if !got.CreatedAt.Equal(at(1).AsTime()) {
			t.Errorf("%s: created at %v, want %v", what, got.CreatedAt, at(1).AsTime())
		}
		assertState(t, what, got, fold(t, []*reinv1.Event{ev}))
	}
	assertLog(t, h.s, sp.id, []*reinv1.Event{ev})
}

func testCreateRejectsInvalid(t *testing.T, h *harness) {
	notStarted := modelRequested(runID(1), 1, "h")
	seqTwo := runStarted(newSpec(2))
	seqTwo.Sequence = 2
	noContract := runStarted(newSpec(3))
	noContract.GetRunStarted().Contract = nil
	for name, ev := range map[string]*reinv1.Event{
		"not_run_started": notStarted,
		"sequence_2":      seqTwo,
		"no_contract":     noContract,
	} {
		if _, _, err := h.s.Create(t.Context(), ev); err == nil {
			t.Errorf("Create(%s): err = nil, want an error", name)
		}
		if _, err := h.s.Load(t.Context(), ev.GetRunId()); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Load after a refused Create(%s): err = %v, want ErrNotFound", name, err)
		}
	}
	assertRuns(t, h.s, store.Filter{Limit: 100}, nil)
	// The twin: a valid run_started is taken.
	mustCreate(t, h.s, runStarted(newSpec(4)))
}

func testCreateIdempotent(t *testing.T, h *harness) {
	first := newSpec(1)
	first.goal = "the first goal"
	mustCreate(t, h.s, runStarted(first))
	mustAppend(t, h.s, first.id, 1, steps(first.id, 2, 2)...)

	again := newSpec(2)
	again.requestID = first.requestID
	again.goal = "another goal"
	got, created, err := h.s.Create(t.Context(), runStarted(again))
	if err != nil {
		t.Fatalf("Create again: %v", err)
	}
	if created {
		t.Errorf("Create again: created = true, want false")
	}
	if got.RunID != first.id {
		t.Errorf("Create again: run %q, want %q", got.RunID, first.id)
	}
	if got.Contract.GetGoal() != "the first goal" {
		t.Errorf("Create again: goal %q, want the first run's", got.Contract.GetGoal())
	}
	if got.Version != 3 {
		t.Errorf("Create again: version %d, want the run's current version 3", got.Version)
	}
	if _, err := h.s.Load(t.Context(), again.id); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Load(%s): err = %v, want ErrNotFound: the second Create must store nothing", again.id, err)
	}
	assertState(t, "Load after Create again", mustLoad(t, h.s, first.id),
		fold(t, append([]*reinv1.Event{runStarted(first)}, steps(first.id, 2, 2)...)))
	assertRuns(t, h.s, store.Filter{Limit: 100}, []string{first.id})

	// The same request ID in another tenant is another run.
	other := newSpec(3)
	other.requestID = first.requestID
	other.tenant = "globex"
	st2, created, err := h.s.Create(t.Context(), runStarted(other))
	if err != nil || !created || st2.RunID != other.id {
		t.Fatalf("Create in another tenant: run %q created %v err %v, want %q true nil", st2.RunID, created, err, other.id)
	}
	// And another request ID in the first tenant is another run.
	mustCreate(t, h.s, runStarted(newSpec(4)))
	assertRuns(t, h.s, store.Filter{Limit: 100}, []string{runID(4), other.id, first.id})
}

func testCreateIdempotentConcurrent(t *testing.T, h *harness) {
	const n = 16
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		created atomic.Int32
		ids     = make([]string, n)
	)
	for i := range n {
		wg.Go(func() {
			sp := newSpec(i + 1)
			sp.requestID = "same"
			<-start
			st, c, err := h.s.Create(t.Context(), runStarted(sp))
			if err != nil {
				t.Errorf("Create %d: %v", i, err)
				return
			}
			if c {
				created.Add(1)
			}
			ids[i] = st.RunID
		})
	}
	close(start)
	wg.Wait()
	if created.Load() != 1 {
		t.Errorf("%d of %d concurrent Creates with one request ID created a run, want 1", created.Load(), n)
	}
	for i, id := range ids {
		if id != ids[0] {
			t.Errorf("Create %d returned run %q, Create 0 %q: want one run", i, id, ids[0])
		}
	}
	page, err := h.s.List(t.Context(), store.Filter{Limit: 100})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(page.Runs) != 1 {
		t.Errorf("List: %d runs, want 1", len(page.Runs))
	}
}

func testAppendAndEvents(t *testing.T, h *harness) {
	sp := newSpec(1)
	log := []*reinv1.Event{runStarted(sp)}
	mustCreate(t, h.s, log[0])

	batches := [][]*reinv1.Event{
		steps(sp.id, 2, 1),
		steps(sp.id, 3, 2),
		steps(sp.id, 5, 5),
		{inputRequested(sp.id, 10), statusChanged(sp.id, 11, running, needsIn)},
		{statusChanged(sp.id, 12, needsIn, running), modelRequested(sp.id, 13, "h13"), modelReturned(sp.id, 14)},
		{statusChanged(sp.id, 15, running, completed)},
	}
	for _, b := range batches {
		mustAppend(t, h.s, sp.id, uint64(len(log)), b...)
		log = append(log, b...)
		if v := mustLoad(t, h.s, sp.id).Version; v != uint64(len(log)) {
			t.Fatalf("version %d after %d events", v, len(log))
		}
	}
	assertLog(t, h.s, sp.id, log)
	st := mustLoad(t, h.s, sp.id)
	if st.Status != completed || st.Result.GetText() != "done" || st.Steps != 5 {
		t.Errorf("final state: status %v result %v steps %d, want completed, done, 5", st.Status, st.Result, st.Steps)
	}
}

func testEventsPaging(t *testing.T, h *harness) {
	sp := newSpec(1)
	log := append([]*reinv1.Event{runStarted(sp)}, steps(sp.id, 2, 12)...)
	mustCreate(t, h.s, log[0])
	mustAppend(t, h.s, sp.id, 1, log[1:]...)
	n := len(log)

	for after := 0; after <= n+1; after++ {
		for limit := 1; limit <= n+1; limit++ {
			got := mustEvents(t, h.s, sp.id, uint64(after), limit)
			want := log[min(after, n):min(after+limit, n)]
			if len(got) != len(want) {
				t.Fatalf("Events(after=%d, limit=%d): %d events, want %d", after, limit, len(got), len(want))
			}
			for i := range got {
				if !proto.Equal(got[i], want[i]) {
					t.Fatalf("Events(after=%d, limit=%d)[%d]: sequence %d, want %d",
						after, limit, i, got[i].GetSequence(), want[i].GetSequence())
				}
			}
		}
	}

	// Paging by the last sequence seen covers the log exactly once.
	for _, limit := range []int{1, 3, 5, n} {
		var seen []*reinv1.Event
		var after uint64
		for range n + 1 {
			page := mustEvents(t, h.s, sp.id, after, limit)
			if len(page) == 0 {
				break
			}
			seen = append(seen, page...)
			after = page[len(page)-1].GetSequence()
		}
		if len(seen) != n {
			t.Errorf("paging by %d: %d events, want %d", limit, len(seen), n)
		}
		for i, ev := range seen {
			if ev.GetSequence() != uint64(i+1) {
				t.Errorf("paging by %d: event %d has sequence %d", limit, i, ev.GetSequence())
				break
			}
		}
	}
}

func testAppendStaleVersion(t *testing.T, h *harness) {
	sp := newSpec(1)
	log := append([]*reinv1.Event{runStarted(sp)}, steps(sp.id, 2, 2)...)
	mustCreate(t, h.s, log[0])
	mustAppend(t, h.s, sp.id, 1, log[1:]...)

	tests := []struct {
		name     string
		expected uint64
		events   []*reinv1.Event
	}{
		// A writer that did not see the last append: its events are the
		// ones it would write at its version.
		{"behind_by_one", 2, steps(sp.id, 3, 1)},
		{"behind_by_two", 1, steps(sp.id, 2, 2)},
		{"zero", 0, []*reinv1.Event{runStarted(sp)}},
		// A writer ahead of the log.
		{"ahead", 4, steps(sp.id, 5, 1)},
		{"far_ahead", 100, steps(sp.id, 101, 1)},
	}
	for _, tc := range tests {
		err := h.s.Append(t.Context(), sp.id, tc.expected, tc.events)
		if !errors.Is(err, store.ErrConflict) {
			t.Errorf("Append(%s, expected %d): err = %v, want ErrConflict", tc.name, tc.expected, err)
		}
		assertLog(t, h.s, sp.id, log)
	}
	// The twin: the right version is taken.
	mustAppend(t, h.s, sp.id, 3, steps(sp.id, 4, 1)...)
}

func testAppendRejectedByFold(t *testing.T, h *harness) {
	sp := newSpec(1)
	log := append([]*reinv1.Event{runStarted(sp)}, steps(sp.id, 2, 2)...)
	mustCreate(t, h.s, log[0])
	mustAppend(t, h.s, sp.id, 1, log[1:]...)
	otherRun := step(runID(2), 4)
	startedAgain := runStarted(sp)
	startedAgain.Sequence = 4

	tests := []struct {
		name   string
		events []*reinv1.Event
		want   error // nil: any error
	}{
		{"illegal_transition", []*reinv1.Event{statusChanged(sp.id, 4, running, expired)}, runstate.ErrIllegalTransition},
		{"wrong_from", []*reinv1.Event{statusChanged(sp.id, 4, needsIn, running)}, runstate.ErrIllegalTransition},
		{"returned_without_request", []*reinv1.Event{modelReturned(sp.id, 4)}, runstate.ErrIllegalTransition},
		{"run_started_again", []*reinv1.Event{startedAgain}, runstate.ErrInvalidEvent},
		{"no_payload", []*reinv1.Event{envelope(sp.id, 4)}, runstate.ErrInvalidEvent},
		{"gap", steps(sp.id, 5, 1), runstate.ErrSequence},
		{"other_run", []*reinv1.Event{otherRun}, nil},
		// All or nothing: the first events apply, the last does not.
		{"bad_last_of_batch", append(steps(sp.id, 4, 3), statusChanged(sp.id, 7, needsIn, running)), runstate.ErrIllegalTransition},
		{"gap_in_batch", append(steps(sp.id, 4, 2), step(sp.id, 7)), runstate.ErrSequence},
	}
	for _, tc := range tests {
		err := h.s.Append(t.Context(), sp.id, 3, tc.events)
		switch {
		case err == nil:
			t.Errorf("Append(%s): err = nil, want an error", tc.name)
		case tc.want != nil && !errors.Is(err, tc.want):
			t.Errorf("Append(%s): err = %v, want %v", tc.name, err, tc.want)
		}
		assertLog(t, h.s, sp.id, log)
	}

	// After a terminal status nothing is taken.
	end := statusChanged(sp.id, 4, running, cancelled)
	mustAppend(t, h.s, sp.id, 3, end)
	log = append(log, end)
	for name, ev := range map[string]*reinv1.Event{
		"model_requested": step(sp.id, 5),
		"status_changed":  statusChanged(sp.id, 5, cancelled, running),
	} {
		if err := h.s.Append(t.Context(), sp.id, 4, []*reinv1.Event{ev}); !errors.Is(err, runstate.ErrTerminal) {
			t.Errorf("Append(%s after cancelled): err = %v, want ErrTerminal", name, err)
		}
	}
	assertLog(t, h.s, sp.id, log)
	if st := mustLoad(t, h.s, sp.id); st.Status != cancelled {
		t.Errorf("status %v, want cancelled", st.Status)
	}
}

func testAppendConflictConcurrent(t *testing.T, h *harness) {
	const writers = 16
	sp := newSpec(1)
	log := append([]*reinv1.Event{runStarted(sp)}, steps(sp.id, 2, 4)...)
	mustCreate(t, h.s, log[0])
	mustAppend(t, h.s, sp.id, 1, log[1:]...)
	expected := uint64(len(log))

	var (
		wg     sync.WaitGroup
		start  = make(chan struct{})
		errs   = make([]error, writers)
		writes = make([][]*reinv1.Event, writers)
	)
	for i := range writers {
		// Each writer's events differ, so the log shows whose won.
		writes[i] = []*reinv1.Event{
			modelRequested(sp.id, expected+1, fmt.Sprintf("writer-%d", i)),
			modelReturned(sp.id, expected+2),
		}
		wg.Go(func() {
			<-start
			errs[i] = h.s.Append(t.Context(), sp.id, expected, writes[i])
		})
	}
	close(start)
	wg.Wait()

	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Errorf("writers %d and %d both appended at version %d", winner, i, expected)
		case err == nil:
			winner = i
		case !errors.Is(err, store.ErrConflict):
			t.Errorf("writer %d: err = %v, want nil or ErrConflict", i, err)
		}
	}
	if winner < 0 {
		t.Fatalf("no writer appended at version %d", expected)
	}
	assertLog(t, h.s, sp.id, append(log, writes[winner]...))
	if v := mustLoad(t, h.s, sp.id).Version; v != expected+2 {
		t.Errorf("version %d, want %d", v, expected+2)
	}
}

func testAppendManyRunsConcurrent(t *testing.T, h *harness) {
	const (
		runs    = 32
		appends = 20
	)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for r := range runs {
		sp := newSpec(r + 1)
		mustCreate(t, h.s, runStarted(sp))
		wg.Go(func() {
			<-start
			for seq := uint64(2); seq < 2+appends; seq++ {
				if err := h.s.Append(t.Context(), sp.id, seq-1, []*reinv1.Event{step(sp.id, seq)}); err != nil {
					t.Errorf("Append(%s, %d): %v", sp.id, seq-1, err)
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if t.Failed() {
		return
	}
	for r := range runs {
		sp := newSpec(r + 1)
		assertLog(t, h.s, sp.id, append([]*reinv1.Event{runStarted(sp)}, steps(sp.id, 2, appends)...))
	}
}

func testReopen(t *testing.T, h *harness) {
	type run struct {
		sp  spec
		log []*reinv1.Event
	}
	var runs []run
	add := func(i int, tenant string, rest func(id string) []*reinv1.Event) {
		sp := newSpec(i)
		sp.tenant = tenant
		sp.labels = map[string]string{"n": fmt.Sprint(i)}
		r := run{sp: sp, log: []*reinv1.Event{runStarted(sp)}}
		mustCreate(t, h.s, r.log[0])
		if more := rest(sp.id); len(more) > 0 {
			mustAppend(t, h.s, sp.id, 1, more...)
			r.log = append(r.log, more...)
		}
		runs = append(runs, r)
	}
	add(1, "acme", func(string) []*reinv1.Event { return nil })
	add(2, "acme", func(id string) []*reinv1.Event { return steps(id, 2, 5) }) // model call in flight
	add(3, "globex", func(id string) []*reinv1.Event {
		return []*reinv1.Event{step(id, 2), step(id, 3), inputRequested(id, 4), statusChanged(id, 5, running, needsIn)}
	})
	add(4, "acme", func(id string) []*reinv1.Event {
		return append(steps(id, 2, 2), statusChanged(id, 4, running, completed))
	})
	add(5, "globex", func(id string) []*reinv1.Event {
		return []*reinv1.Event{step(id, 2), statusChanged(id, 3, running, failed)}
	})

	before, err := h.s.List(t.Context(), store.Filter{Limit: 100})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	for range 2 {
		h.reopen()
		for _, r := range runs {
			assertLog(t, h.s, r.sp.id, r.log)
		}
		after, err := h.s.List(t.Context(), store.Filter{Limit: 100})
		if err != nil {
			t.Fatalf("List after reopen: %v", err)
		}
		if len(after.Runs) != len(before.Runs) {
			t.Fatalf("List after reopen: %d runs, want %d", len(after.Runs), len(before.Runs))
		}
		for i := range after.Runs {
			assertState(t, "List after reopen", after.Runs[i], before.Runs[i])
		}
		// Idempotency keys survive.
		for _, r := range runs {
			dup := newSpec(100)
			dup.tenant, dup.requestID = r.sp.tenant, r.sp.requestID
			st, created, err := h.s.Create(t.Context(), runStarted(dup))
			if err != nil || created || st.RunID != r.sp.id {
				t.Errorf("Create(%s's request ID) after reopen: run %q created %v err %v, want %q false nil",
					r.sp.id, st.RunID, created, err, r.sp.id)
			}
		}
	}

	// The stored snapshot is the one appends build on: the version check and
	// the fold hold after a reopen.
	r := runs[1]
	if err := h.s.Append(t.Context(), r.sp.id, 1, steps(r.sp.id, 2, 1)); !errors.Is(err, store.ErrConflict) {
		t.Errorf("stale Append after reopen: err = %v, want ErrConflict", err)
	}
	if err := h.s.Append(t.Context(), r.sp.id, 6, []*reinv1.Event{modelRequested(r.sp.id, 7, "x")}); !errors.Is(err, runstate.ErrIllegalTransition) {
		t.Errorf("model_requested with a call in flight after reopen: err = %v, want ErrIllegalTransition", err)
	}
	more := step(r.sp.id, 7)
	mustAppend(t, h.s, r.sp.id, 6, more)
	r.log = append(r.log, more)
	h.reopen()
	assertLog(t, h.s, r.sp.id, r.log)
	mustCreate(t, h.s, runStarted(newSpec(6)))
}

func testNotFound(t *testing.T, h *harness) {
	mustCreate(t, h.s, runStarted(newSpec(1)))
	missing := runID(2)
	if _, err := h.s.Load(t.Context(), missing); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Load: err = %v, want ErrNotFound", err)
	}
	if _, err := h.s.Events(t.Context(), missing, 0, 10); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Events: err = %v, want ErrNotFound", err)
	}
	if err := h.s.Append(t.Context(), missing, 1, steps(missing, 2, 1)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Append: err = %v, want ErrNotFound", err)
	}
	if _, err := h.s.Load(t.Context(), missing); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Load after a refused Append: err = %v, want ErrNotFound", err)
	}
	// The twin: the run that exists is found.
	mustLoad(t, h.s, runID(1))
	mustEvents(t, h.s, runID(1), 0, 10)
}

func testClosed(t *testing.T, h *harness) {
	sp := newSpec(1)
	mustCreate(t, h.s, runStarted(sp))
	h.close()
	ctx := t.Context()
	calls := map[string]func() error{
		"Create": func() error { _, _, err := h.s.Create(ctx, runStarted(newSpec(2))); return err },
		"Append": func() error { return h.s.Append(ctx, sp.id, 1, steps(sp.id, 2, 1)) },
		"Load":   func() error { _, err := h.s.Load(ctx, sp.id); return err },
		"Events": func() error { _, err := h.s.Events(ctx, sp.id, 0, 10); return err },
		"List":   func() error { _, err := h.s.List(ctx, store.Filter{Limit: 10}); return err },
		"Blob":   func() error { _, err := h.s.Blob(ctx, store.BlobHash(nil)); return err },
	}
	for _, name := range slices.Sorted(maps.Keys(calls)) {
		if err := calls[name](); !errors.Is(err, store.ErrClosed) {
			t.Errorf("%s after Close: err = %v, want ErrClosed", name, err)
		}
	}
	// Nothing a closed store refused was written.
	h.reopen()
	assertLog(t, h.s, sp.id, []*reinv1.Event{runStarted(sp)})
	assertRuns(t, h.s, store.Filter{Limit: 10}, []string{sp.id})
}

// testCloseDuringAppends closes the store while writers append: every append
// that returned nil is in the log after a reopen, and every one refused
// (ErrClosed) is not.
func testCloseDuringAppends(t *testing.T, h *harness) {
	const writers = 8
	var (
		wg    sync.WaitGroup
		warm  sync.WaitGroup  // done when each writer has appended a few times, or quit
		acked [writers]uint64 // the last version a writer's append acknowledged
	)
	warm.Add(writers)
	for w := range writers {
		sp := newSpec(w + 1)
		mustCreate(t, h.s, runStarted(sp))
		acked[w] = 1
		wg.Go(func() {
			var once sync.Once
			defer once.Do(warm.Done)
			for seq := uint64(2); ; seq++ {
				err := h.s.Append(context.Background(), sp.id, seq-1, []*reinv1.Event{step(sp.id, seq)})
				if err != nil {
					if !errors.Is(err, store.ErrClosed) {
						t.Errorf("Append(%s, %d) during Close: err = %v, want nil or ErrClosed", sp.id, seq-1, err)
					}
					return
				}
				acked[w] = seq
				if seq == 4 {
					once.Do(warm.Done)
				}
			}
		})
	}
	warm.Wait() // every writer has appended a few times and goes on appending
	h.close()
	wg.Wait()
	h.reopen()
	for w := range writers {
		sp := newSpec(w + 1)
		want := append([]*reinv1.Event{runStarted(sp)}, steps(sp.id, 2, int(acked[w]-1))...)
		assertLog(t, h.s, sp.id, want)
	}
}
