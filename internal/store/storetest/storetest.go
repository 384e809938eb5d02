// Package storetest is the conformance suite for store.Store, written once
// against the interface and run by every backend:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T, dir string) store.Store {
//			s, err := bolt.Open(filepath.Join(dir, "rein.db"), bolt.Options{})
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
	"fmt"
	"reflect"
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
		{"LeaseWithAppend", testLeaseWithAppend},
		{"BlobsAppendThenRead", testBlobsAppendThenRead},
		{"BlobsDedup", testBlobsDedup},
		{"BlobsInvalid", testBlobsInvalid},
		{"BlobsRefusedAppend", testBlobsRefusedAppend},
		{"BlobNotFound", testBlobNotFound},
		{"ImportThenRead", testImportThenRead},
		{"ImportRefused", testImportRefused},
		{"ImportConcurrent", testImportConcurrent},
		{"LifecycleEnded", testLifecycleEnded},
		{"LifecycleArchive", testLifecycleArchive},
		{"LifecycleArchiveRefused", testLifecycleArchiveRefused},
		{"LifecycleDelete", testLifecycleDelete},
		{"LifecycleDeleteRefused", testLifecycleDeleteRefused},
		{"LifecycleDeletions", testLifecycleDeletions},
		{"Schedules", testSchedules},
		{"SchedulesConcurrentUpdates", testSchedulesConcurrentUpdates},
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

// mustAppend appends evs to run id at version expected, checks the state
// Append returned (assertAppended), and returns it.
func mustAppend(t *testing.T, s store.Store, id string, expected uint64, evs ...*reinv1.Event) runstate.State {
	t.Helper()
	st, err := s.Append(t.Context(), id, expected, evs)
	if err != nil {
		t.Fatalf("Append(%s, %d, %d events): %v", id, expected, len(evs), err)
	}
	assertAppended(t, s, id, st)
	return st
}

// assertAppended fails unless st, the state an Append to run id returned,
// is the state the store folded and stored: the fold of the run's stored
// log (runstate.ApplyAll over Events from 0), and what Load returns, the
// contract included. It must be called before the run changes again.
func assertAppended(t *testing.T, s store.Store, id string, st runstate.State) {
	t.Helper()
	what := fmt.Sprintf("the state Append(%s) returned, at version %d,", id, st.Version)
	assertState(t, what+" against the fold of the stored log", st, fold(t, mustEvents(t, s, id, 0, all)))
	assertState(t, what+" against Load", st, mustLoad(t, s, id))
}

// assertRefused fails unless an Append that returned st and err was
// refused: an error, and the zero State. (Its caller checks that nothing
// was stored, with assertLog.)
func assertRefused(t *testing.T, what string, st runstate.State, err error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: err = nil, want an error", what)
	}
	if !reflect.DeepEqual(st, runstate.State{}) {
		t.Errorf("%s: refused with %v, yet returned a state: %v", what, err, st.Proto(true))
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
