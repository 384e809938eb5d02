package replay

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/engine"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/step"
	"github.com/reinhq/rein/internal/store/mem"
	"github.com/reinhq/rein/internal/tools"
)

// redeployed is an executor whose tools' listed schemas a test changes,
// as a deploy of a tool service does.
type redeployed struct {
	tools.Executor
	mu      sync.Mutex
	schemas map[string]*structpb.Struct
}

func (r *redeployed) List(ctx context.Context) ([]tools.Spec, error) {
	specs, err := r.Executor.List(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range specs {
		if s, ok := r.schemas[specs[i].Name]; ok {
			specs[i].InputSchema = s
		}
	}
	return specs, err
}

func (r *redeployed) redeploy(tool string) {
	s, _ := structpb.NewStruct(map[string]any{"type": "object", "properties": map[string]any{"id": map[string]any{"type": "string"}, "amount": map[string]any{"type": "number"}}})
	r.mu.Lock()
	defer r.mu.Unlock()
	r.schemas[tool] = s
}

// recordToolChange records a run through the real engine under action: it
// pauses (a question, or a refund's approval), its tool is redeployed,
// and a person carries it on, as person does, until it rests. It returns
// the engine, store and the run.
func recordToolChange(t *testing.T, action step.ToolChangeAction, script []*reinv1.ScriptedReply, person func(ctx context.Context, e *engine.Engine, st runstate.State, ex *redeployed) error) (*engine.Engine, *mem.Store, string) {
	t.Helper()
	ctx := context.Background()
	ex := &redeployed{schemas: map[string]*structpb.Struct{}, Executor: tools.NewFixtures(map[string][]tools.FixtureResult{
		"get":    {{Output: structpb.NewStringValue("invoice INV-42: open, 1200 EUR")}, {Output: structpb.NewStringValue("invoice INV-42: refunded")}},
		"refund": {{Preview: structpb.NewStringValue("refund 1200 EUR"), Receipt: structpb.NewStringValue("re_1")}},
	})}
	s := mem.New()
	clock := &fakeClock{now: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	e := engine.New(engine.Config{Store: s, Tools: ex, Clock: clock.Now, NoTimers: true, Workers: 1, NewID: seededIDs(t.Name()), OnToolChange: action})
	t.Cleanup(e.Close)
	c := contract(nil, script...)
	c.Tools = c.Tools[:2] // get, refund
	run, _, err := e.Start(ctx, engine.StartRequest{RequestID: "tool-change", Contract: c, Principal: "alice", Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if err := e.Wait(ctx, run.RunID); err != nil {
			t.Fatal(err)
		}
		st, err := s.Load(ctx, run.RunID)
		if err != nil {
			t.Fatal(err)
		}
		if !runstate.Paused(st.Status) || i > 4 {
			break
		}
		if err := person(ctx, e, st, ex); err != nil {
			t.Fatal(err)
		}
	}
	return e, s, run.RunID
}

// TestReplayAcrossToolChange: runs that met a changed tool (adopted at a
// call, paused at a call and resumed by a person, a proposal previewed
// again and approved, a run failed) replay event for event, and a fork of
// such a run carries on. The twin: the same recording with the digests
// taken out of run_started (a run recorded before rein kept them) parts
// from the replay where the change was met, as no check is made.
func TestReplayAcrossToolChange(t *testing.T) {
	get := call("get", "r1", map[string]any{"id": "INV-42"})
	refund := call("refund", "w1", map[string]any{"amount": 1200})
	answer := func(ctx context.Context, e *engine.Engine, st runstate.State, ex *redeployed) error {
		if st.StatusReason == "question" {
			ex.redeploy("get")
			ex.redeploy("refund")
		}
		_, err := e.ProvideInput(ctx, st.RunID, "INV-42", "bob")
		return err
	}
	approveAll := func(ctx context.Context, e *engine.Engine, st runstate.State, ex *redeployed) error {
		p := st.Pending.GetProposal()
		if p.GetToolDigest() == "" {
			ex.redeploy("refund")
		}
		_, err := e.DecideApproval(ctx, engine.Verdict{RunID: st.RunID, ProposalID: p.GetProposalId(), ProposalHash: p.GetHash(), Approve: true, Principal: "carol", Reason: "ok"})
		if errors.Is(err, engine.ErrNotWaiting) {
			return nil // previewed again, or failed: the next round sees which
		}
		return err
	}
	for _, tc := range []struct {
		name   string
		action step.ToolChangeAction
		script []*reinv1.ScriptedReply
		person func(context.Context, *engine.Engine, runstate.State, *redeployed) error
		want   reinv1.RunStatus
		kind   string // an event the recording must hold
	}{
		{"adopt at a call", step.ToolChangeAdopt, []*reinv1.ScriptedReply{ask("which invoice?"), get, final("open")}, answer, reinv1.RunStatus_RUN_STATUS_COMPLETED, "tool_adopted"},
		{"pause at a call", step.ToolChangePause, []*reinv1.ScriptedReply{ask("which invoice?"), get, get, final("open")}, answer, reinv1.RunStatus_RUN_STATUS_COMPLETED, "tool_changed"},
		{"pause under a proposal", step.ToolChangePause, []*reinv1.ScriptedReply{refund, final("refunded")}, approveAll, reinv1.RunStatus_RUN_STATUS_COMPLETED, "tool_adopted"},
		{"adopt under a proposal", step.ToolChangeAdopt, []*reinv1.ScriptedReply{refund, final("refunded")}, approveAll, reinv1.RunStatus_RUN_STATUS_COMPLETED, "tool_adopted"},
		{"fail under a proposal", step.ToolChangeFail, []*reinv1.ScriptedReply{refund, final("refunded")}, approveAll, reinv1.RunStatus_RUN_STATUS_FAILED, "tool_changed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			e, s, runID := recordToolChange(t, tc.action, tc.script, tc.person)
			recorded, err := s.Events(ctx, runID, 0, 1000)
			if err != nil {
				t.Fatal(err)
			}
			last, _ := runstate.ApplyAll(runstate.State{}, recorded)
			if last.Status != tc.want || len(ofKind(recorded, tc.kind)) == 0 {
				t.Fatalf("the recorded run is %s with %d %s, want %s with one:\n%v", runstate.StatusName(last.Status), len(ofKind(recorded, tc.kind)), tc.kind, runstate.StatusName(tc.want), recorded)
			}
			res, err := Run(ctx, recorded, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Divergence != nil {
				t.Fatalf("diverged: %v", res.Divergence)
			}

			// The twin: without digests, the change is not met.
			old := make([]*reinv1.Event, len(recorded))
			copy(old, recorded)
			first := *recorded[0].GetRunStarted()
			first.ToolDigests = nil
			old[0] = &reinv1.Event{RunId: recorded[0].GetRunId(), Sequence: 1, RecordedAt: recorded[0].GetRecordedAt(), Actor: recorded[0].GetActor(),
				Payload: &reinv1.Event_RunStarted{RunStarted: &first}}
			res, err = Run(ctx, old, Options{})
			if err == nil && res.Divergence == nil {
				t.Fatal("a recording without digests replayed equal, want it to part where the change was met")
			}

			// A fork of the run carries on, from the event before its end.
			if tc.want != reinv1.RunStatus_RUN_STATUS_COMPLETED {
				return
			}
			at := uint64(len(recorded)) - 1
			for at > 1 && recorded[at-1].GetModelReturned() != nil {
				at--
			}
			fork, _, err := e.Fork(ctx, engine.ForkRequest{RunID: runID, AtSequence: at, RequestID: "fork", Principal: "alice", Tenant: "acme"})
			if err != nil {
				t.Fatalf("fork at %d: %v", at, err)
			}
			if err := e.Wait(ctx, fork.RunID); err != nil {
				t.Fatal(err)
			}
			got, err := s.Load(ctx, fork.RunID)
			if err != nil {
				t.Fatal(err)
			}
			if runstate.Terminal(got.Status) && got.Status != reinv1.RunStatus_RUN_STATUS_COMPLETED {
				t.Errorf("the fork is %s (%s): %s, want it to carry on", runstate.StatusName(got.Status), got.StatusReason, got.LastError)
			}
			wantHeld := last.ToolDigests
			evs, _ := s.Events(ctx, fork.RunID, 0, 1000)
			if held, _ := runstate.ApplyAll(runstate.State{}, evs[:at]); len(held.ToolDigests) != len(wantHeld) || held.ToolDigest("get").GetDigest() != last.ToolDigest("get").GetDigest() {
				t.Errorf("the fork holds %v at its parent's sequence, want its parent's %v", held.ToolDigests, wantHeld)
			}
		})
	}
}

func ofKind(evs []*reinv1.Event, kind string) []*reinv1.Event {
	var out []*reinv1.Event
	for _, ev := range evs {
		if runstate.PayloadName(ev) == kind {
			out = append(out, ev)
		}
	}
	return out
}
