package engine

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// TestStepWhileRunningLogsWhatDriversLog runs one run through an engine with
// drivers and through a synchronous one, with the same clock and IDs: the
// two logs are the same, event for event. Until StepWhileRunning is called, the
// synchronous engine steps nothing.
func TestStepWhileRunningLogsWhatDriversLog(t *testing.T) {
	c := testContract(callReply("search", "c1", mustStruct(t, map[string]any{"q": "invoice"})), askReply("which one?"), finalReply("done"))
	id := func(prefix string, _ time.Time) string { return prefix + "same" }

	async, s1 := setup(t, Config{Tools: searchTools(t), NewID: id})
	st := startRun(t, async, c)
	waitRun(t, async, st.RunID)
	if _, err := async.ProvideInput(testCtx(t), st.RunID, "the first", "bob"); err != nil {
		t.Fatal(err)
	}
	waitRun(t, async, st.RunID)
	_, want := stored(t, s1, st.RunID)

	s2, _ := openStore(t)
	se := NewSync(Config{Store: s2, Tools: searchTools(t), NewID: id, Clock: newClock(t0, time.Second).Now})
	t.Cleanup(se.Close)
	ctx := testCtx(t)
	st = startRun(t, se, c)
	if _, evs := stored(t, s2, st.RunID); len(evs) != 1 {
		t.Fatalf("a synchronous engine stepped the run before StepWhileRunning: %s", dump(evs))
	}
	if err := se.StepWhileRunning(ctx, st.RunID); err != nil {
		t.Fatal(err)
	}
	if _, err := se.ProvideInput(ctx, st.RunID, "the first", "bob"); err != nil {
		t.Fatal(err)
	}
	if err := se.StepWhileRunning(ctx, st.RunID); err != nil {
		t.Fatal(err)
	}
	got, evs := stored(t, s2, st.RunID)
	wantStatus(t, got, evs, statusCompleted, "final_answer")
	if len(evs) != len(want) {
		t.Fatalf("%d events, want %d:\n%s", len(evs), len(want), dump(evs))
	}
	for i := range want {
		// The durations each run measured are its own.
		if !proto.Equal(untimed(evs[i]), untimed(want[i])) {
			t.Errorf("event %d: %v, want %v", i+1, evs[i], want[i])
		}
	}
}

// TestStepWhileRunningNeedsSyncEngine is the twin: an engine that starts its own
// drivers refuses StepWhileRunning, which would race them.
func TestStepWhileRunningNeedsSyncEngine(t *testing.T) {
	e, _ := setup(t, Config{Tools: searchTools(t)})
	st := startRun(t, e, testContract(finalReply("done")))
	waitRun(t, e, st.RunID)
	if err := e.StepWhileRunning(testCtx(t), st.RunID); !errors.Is(err, errNotSync) {
		t.Fatalf("StepWhileRunning on an engine with drivers: %v, want errNotSync", err)
	}
}

// untimed is a copy of ev without the durations a run measures (a model
// call's, a tool's, a write's, the checks'): two runs of the same steps
// record the same events but their own figures.
func untimed(ev *reinv1.Event) *reinv1.Event {
	ev = proto.CloneOf(ev)
	switch p := ev.GetPayload().(type) {
	case *reinv1.Event_ModelReturned:
		p.ModelReturned.Duration = nil
	case *reinv1.Event_ToolReturned:
		p.ToolReturned.Duration = nil
	case *reinv1.Event_WriteCommitted:
		p.WriteCommitted.Duration = nil
	case *reinv1.Event_ChecksCompleted:
		p.ChecksCompleted.Duration = nil
	}
	return ev
}
