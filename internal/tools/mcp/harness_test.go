package mcp_test

// Runs through rein's harness with MCP tools: the contract's grant, not the
// server's annotations, decides what runs and how.

import (
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/engine"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store/mem"
	reinmcp "github.com/reinhq/rein/internal/tools/mcp"
)

// engine is a harness engine over an in-memory store with c as its tools.
func newEngine(t *testing.T, c *reinmcp.Client) (*engine.Engine, *mem.Store) {
	t.Helper()
	s := mem.New()
	e := engine.New(engine.Config{Store: s, Tools: c})
	t.Cleanup(e.Close)
	return e, s
}

func callReply(tool, callID string, a *structpb.Struct) *reinv1.ScriptedReply {
	return &reinv1.ScriptedReply{Reply: &reinv1.ScriptedReply_Decision{Decision: &reinv1.Decision{
		Action: &reinv1.Decision_ToolCall{ToolCall: &reinv1.ToolCall{Tool: tool, CallId: callID, Arguments: a}},
	}}, Usage: &reinv1.Usage{InputTokens: 10, OutputTokens: 5}}
}

func finalReply(text string) *reinv1.ScriptedReply {
	return &reinv1.ScriptedReply{Reply: &reinv1.ScriptedReply_Decision{Decision: &reinv1.Decision{
		Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: text}},
	}}, Usage: &reinv1.Usage{InputTokens: 10, OutputTokens: 5}}
}

func contract(grants []*reinv1.ToolGrant, script ...*reinv1.ScriptedReply) *reinv1.TaskContract {
	return &reinv1.TaskContract{
		Goal:  "tidy the records",
		Tools: grants,
		Model: &reinv1.ModelSpec{Provider: "script", Name: "test", Script: script},
	}
}

// runToRest starts c and waits until the run pauses or ends; it returns the
// stored state and log.
func runToRest(t *testing.T, e *engine.Engine, s *mem.Store, c *reinv1.TaskContract) (runstate.State, []*reinv1.Event) {
	t.Helper()
	ctx := testCtx(t)
	st, _, err := e.Start(ctx, engine.StartRequest{RequestID: "req-" + t.Name(), Contract: c, Principal: "alice", Tenant: "acme"})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	return rest(t, e, s, st.RunID)
}

// rest waits until the run's driver exits, and returns its state and log.
func rest(t *testing.T, e *engine.Engine, s *mem.Store, runID string) (runstate.State, []*reinv1.Event) {
	t.Helper()
	ctx := testCtx(t)
	if err := e.Wait(ctx, runID); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	st, err := s.Load(ctx, runID)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	evs, err := s.Events(ctx, runID, 0, 1<<20)
	if err != nil {
		t.Fatalf("Events: %v", err)
	}
	return st, evs
}

func ofType(evs []*reinv1.Event, name string) []*reinv1.Event {
	var out []*reinv1.Event
	for _, ev := range evs {
		if runstate.PayloadName(ev) == name {
			out = append(out, ev)
		}
	}
	return out
}

func names(evs []*reinv1.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = runstate.PayloadName(ev)
	}
	return out
}

// An MCP tool the contract does not grant never runs, though the server
// calls it read-only; the granted one beside it runs, once.
func TestUngrantedToolNeverRuns(t *testing.T) {
	eachTransport(t, func(t *testing.T, c *reinmcp.Client) {
		e, s := newEngine(t, c)
		key := args(t, map[string]any{"key": "k1"})
		st, evs := runToRest(t, e, s, contract(
			[]*reinv1.ToolGrant{{Name: "srv.lookup", Tier: reinv1.ToolTier_TOOL_TIER_READ}},
			callReply("srv.delete", "c1", key),
			callReply("srv.lookup", "c2", key),
			finalReply("done"),
		))
		if st.Status != reinv1.RunStatus_RUN_STATUS_COMPLETED {
			t.Fatalf("run is %s (%s), want completed; log: %v", runstate.StatusName(st.Status), st.LastError, names(evs))
		}
		refused := ofType(evs, "tool_refused")
		if len(refused) != 1 || refused[0].GetToolRefused().GetTool() != "srv.delete" {
			t.Errorf("tool_refused events %v, want one for srv.delete; log: %v", refused, names(evs))
		}
		returned := ofType(evs, "tool_returned")
		if len(returned) != 1 || returned[0].GetToolReturned().GetTool() != "srv.lookup" ||
			returned[0].GetToolReturned().GetOutput().GetStringValue() != "record k1\nstatus: active" {
			t.Errorf("tool_returned events %v, want srv.lookup's output once", returned)
		}
		if n := count(t, c, "delete"); n != 0 {
			t.Errorf("the ungranted srv.delete ran %d times on the server, want 0", n)
		}
		if n := count(t, c, "lookup"); n != 1 {
			t.Errorf("the granted srv.lookup ran %d times, want 1", n)
		}
	})
}

// A tool granted as a write is proposed and waits for approval although the
// server calls it read-only: nothing reaches the server until a person
// approves, and then the call runs once, with its operation ID.
func TestWriteGrantWaitsDespiteReadOnlyHint(t *testing.T) {
	eachTransport(t, func(t *testing.T, c *reinmcp.Client) {
		e, s := newEngine(t, c)
		st, evs := runToRest(t, e, s, contract(
			[]*reinv1.ToolGrant{{Name: "srv.delete", Tier: reinv1.ToolTier_TOOL_TIER_WRITE}},
			callReply("srv.delete", "c1", args(t, map[string]any{"key": "k1"})),
			finalReply("deleted"),
		))
		if st.Status != reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL {
			t.Fatalf("run is %s (%s), want needs_approval; log: %v", runstate.StatusName(st.Status), st.LastError, names(evs))
		}
		if n := count(t, c, "delete"); n != 0 {
			t.Fatalf("srv.delete ran %d times before approval, want 0", n)
		}
		p := st.Pending.GetProposal()
		preview := p.GetPreview().GetStructValue().AsMap()
		if preview["note"] != reinmcp.NoDryRunNote || preview["tool"] != "delete" {
			t.Errorf("the proposal's preview is %v, want the call described with the no-dry-run note", preview)
		}

		// The twin: approval runs it, once.
		ctx := testCtx(t)
		if _, err := e.DecideApproval(ctx, engine.Verdict{RunID: st.RunID, ProposalID: p.GetProposalId(),
			ProposalHash: p.GetHash(), Approve: true, Principal: "bob"}); err != nil {
			t.Fatalf("DecideApproval: %v", err)
		}
		st, evs = rest(t, e, s, st.RunID)
		if st.Status != reinv1.RunStatus_RUN_STATUS_COMPLETED {
			t.Fatalf("run is %s (%s), want completed; log: %v", runstate.StatusName(st.Status), st.LastError, names(evs))
		}
		committed := ofType(evs, "write_committed")
		if len(committed) != 1 {
			t.Fatalf("%d write_committed events, want 1; log: %v", len(committed), names(evs))
		}
		op := committed[0].GetWriteCommitted().GetOperationId()
		got := counts(t, c)
		if got["delete"] != 1.0 || !equalJSON(got["operations"], []any{op}) {
			t.Errorf("after approval the server has %v, want delete once with operation %s", got, op)
		}
	})
}
