package remote_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/engine"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store/mem"
	"github.com/reinhq/rein/internal/tools/remote"
)

// A service that stops in the middle of a run, reached by a Dial'ed
// client: the read made while it is down is an observation that says the
// call may be tried again, and the run goes on; once the service is back
// on its address, the next read works on the same client, which nobody
// told to reconnect.
func TestServiceDownMidRunIsRedialed(t *testing.T) {
	ctx := testCtx(t)
	lis := listen(t, "")
	addr := lis.Addr().String()
	var gs *grpc.Server
	serveWith(t, lis, func(s *grpc.Server) reinv1.ToolServiceServer { gs = s; return remote.NewServer(billing(t, "")) })
	c := dial(t, addr)
	s := mem.New()
	e := engine.New(engine.Config{Store: s, Tools: c})
	t.Cleanup(e.Close)

	decide := func(tool, id string, args map[string]any) *reinv1.ScriptedReply {
		a, err := structpb.NewStruct(args)
		if err != nil {
			t.Fatal(err)
		}
		return &reinv1.ScriptedReply{Reply: &reinv1.ScriptedReply_Decision{Decision: &reinv1.Decision{Action: &reinv1.Decision_ToolCall{
			ToolCall: &reinv1.ToolCall{Tool: tool, CallId: id, Arguments: a}}}}, Usage: &reinv1.Usage{InputTokens: 10, OutputTokens: 5}}
	}
	invoice := map[string]any{"invoice_id": "INV-42"}
	question := map[string]any{"question": "go on?"}
	st, _, err := e.Start(ctx, engine.StartRequest{RequestID: "req-1", Principal: "alice", Tenant: "acme", Contract: &reinv1.TaskContract{
		Goal: "Read invoice INV-42.",
		Tools: []*reinv1.ToolGrant{{Name: "invoices.get", Tier: reinv1.ToolTier_TOOL_TIER_READ},
			{Name: "ask", Tier: reinv1.ToolTier_TOOL_TIER_ASK_HUMAN}},
		Model: &reinv1.ModelSpec{Provider: "script", Name: "test", Script: []*reinv1.ScriptedReply{
			decide("invoices.get", "c1", invoice),
			decide("ask", "c2", question),
			decide("invoices.get", "c3", invoice),
			decide("ask", "c4", question),
			decide("invoices.get", "c5", invoice),
			{Reply: &reinv1.ScriptedReply_Decision{Decision: &reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{
				FinalAnswer: &reinv1.FinalAnswer{Text: "Read."}}}}, Usage: &reinv1.Usage{InputTokens: 10, OutputTokens: 5}},
		}},
	}})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	rest := func(want reinv1.RunStatus) []*reinv1.Event {
		t.Helper()
		if err := e.Wait(ctx, st.RunID); err != nil {
			t.Fatalf("Wait: %v", err)
		}
		got, err := s.Load(ctx, st.RunID)
		if err != nil {
			t.Fatal(err)
		}
		evs, err := s.Events(ctx, st.RunID, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != want {
			t.Fatalf("run is %s (%s), want %s; log: %s", runstate.StatusName(got.Status), got.LastError, runstate.StatusName(want), names(evs))
		}
		return evs
	}
	returned := func(evs []*reinv1.Event, id string) *reinv1.ToolReturned {
		t.Helper()
		for _, ev := range evs {
			if tr := ev.GetToolReturned(); tr != nil && tr.GetCallId() == id {
				return tr
			}
		}
		t.Fatalf("no tool_returned for %s; log: %s", id, names(evs))
		return nil
	}
	evs := rest(reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT)
	if tr := returned(evs, "c1"); tr.GetError() != "" {
		t.Fatalf("the read with the service up: %s", tr.GetError())
	}

	gs.Stop()
	if _, err := e.ProvideInput(ctx, st.RunID, "yes", "alice"); err != nil {
		t.Fatalf("ProvideInput: %v", err)
	}
	evs = rest(reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT)
	msg := returned(evs, "c3").GetError()
	for _, want := range []string{"the tool server billing at " + addr + " is unreachable", "rein re-dials it, so the call may be tried again"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the read with the service down: %q, want it to say %q", msg, want)
		}
	}

	serve(t, listen(t, addr), remote.NewServer(billing(t, "")))
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for _, err := c.List(ctx); err != nil; _, err = c.List(ctx) {
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("the client never reached the service again: %v", err)
		}
	}
	if _, err := e.ProvideInput(ctx, st.RunID, "yes", "alice"); err != nil {
		t.Fatalf("ProvideInput: %v", err)
	}
	evs = rest(reinv1.RunStatus_RUN_STATUS_COMPLETED)
	if tr := returned(evs, "c5"); tr.GetError() != "" || tr.GetOutput() == nil {
		t.Errorf("the read after the service came back: %v, want the invoice", tr)
	}
}
