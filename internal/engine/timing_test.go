package engine

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/tools"
)

// slowTools makes every read, proposal and commit of its inner executor
// take at least d.
type slowTools struct {
	tools.Executor
	d time.Duration
}

func (s slowTools) Read(ctx context.Context, c tools.Call) (*structpb.Value, error) {
	if err := s.work(ctx); err != nil {
		return nil, err
	}
	return s.Executor.Read(ctx, c)
}

func (s slowTools) Commit(ctx context.Context, c tools.Call, op string) (*structpb.Value, error) {
	if err := s.work(ctx); err != nil {
		return nil, err
	}
	return s.Executor.Commit(ctx, c, op)
}

// work is the call's own time: d, or less if ctx ends first, as a tool
// that honours its context does.
func (s slowTools) work(ctx context.Context) error {
	t := time.NewTimer(s.d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestLogRecordsDurations: model_returned, tool_returned and
// write_committed record how long the call they record took, measured by
// rein on the monotonic clock (the run's own clock here is a test clock
// that moves a second a reading, which no duration follows). A duration is
// never shorter than the time the call was made to take.
func TestLogRecordsDurations(t *testing.T) {
	const slow = 30 * time.Millisecond
	e, s := setup(t, Config{Tools: slowTools{searchTools(t), slow}})
	read := callReply("search", "c1", nil)
	read.DelayMs = uint32(slow / time.Millisecond)
	st := startRun(t, e, testContract(read, callReply("send_email", "c2", nil), finalReply("done")))
	waitRun(t, e, st.RunID)
	st, evs := stored(t, s, st.RunID)
	if st.Pending.GetProposal() == nil {
		t.Fatalf("run is %v, want it paused for approval:\n%s", st.Status, dump(evs))
	}
	if _, err := e.DecideApproval(testCtx(t), Verdict{RunID: st.RunID, ProposalID: st.Pending.GetProposal().GetProposalId(),
		ProposalHash: st.Pending.GetProposal().GetHash(), Approve: true, Principal: "alice"}); err != nil {
		t.Fatal(err)
	}
	waitRun(t, e, st.RunID)
	_, evs = stored(t, s, st.RunID)
	var model, tool, write []time.Duration
	for _, ev := range evs {
		switch p := ev.GetPayload().(type) {
		case *reinv1.Event_ModelReturned:
			model = append(model, p.ModelReturned.GetDuration().AsDuration())
		case *reinv1.Event_ToolReturned:
			tool = append(tool, p.ToolReturned.GetDuration().AsDuration())
		case *reinv1.Event_WriteCommitted:
			write = append(write, p.WriteCommitted.GetDuration().AsDuration())
		}
	}
	if len(model) != 3 || len(tool) != 1 || len(write) != 1 {
		t.Fatalf("%d model_returned, %d tool_returned, %d write_committed; want 3, 1, 1:\n%s", len(model), len(tool), len(write), dump(evs))
	}
	if model[0] < slow || tool[0] < slow || write[0] < slow {
		t.Fatalf("durations model %v, tool %v, write %v; each call took at least %v", model[0], tool[0], write[0], slow)
	}
	for i, d := range model[1:] {
		if d <= 0 || d >= time.Hour {
			t.Errorf("model call %d took %v by the log", i+2, d)
		}
	}
}

// The twin: a result no tool produced (the call was cut because the run
// was cancelled while the tool hung) records no duration, rather than a
// figure for a call that never answered.
func TestInterruptedCallRecordsNoDuration(t *testing.T) {
	started := make(chan struct{})
	e, s := setup(t, Config{Tools: hangingTools{searchTools(t), started}})
	st := startRun(t, e, testContract(callReply("search", "c1", nil), finalReply("done")))
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the tool was never called")
	}
	if _, err := e.Cancel(testCtx(t), st.RunID, "stop", "alice"); err != nil {
		t.Fatal(err)
	}
	waitRun(t, e, st.RunID)
	_, evs := stored(t, s, st.RunID)
	for _, ev := range evs {
		if tr := ev.GetToolReturned(); tr != nil && tr.GetDuration() != nil {
			t.Fatalf("interrupted call recorded a duration: %v", tr)
		}
	}
}

// hangingTools' reads never answer until their context ends.
type hangingTools struct {
	tools.Executor
	started chan struct{}
}

func (h hangingTools) Read(ctx context.Context, _ tools.Call) (*structpb.Value, error) {
	close(h.started)
	<-ctx.Done()
	return nil, ctx.Err()
}
