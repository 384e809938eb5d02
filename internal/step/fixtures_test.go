package step

// Helpers of the package's unit tests. The tests that run a step end to end
// need an engine to drive it, and are internal/engine's.

import (
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

func testContract(script ...*reinv1.ScriptedReply) *reinv1.TaskContract {
	return &reinv1.TaskContract{
		Goal: "find the invoice total",
		Tools: []*reinv1.ToolGrant{
			{Name: "search", Tier: reinv1.ToolTier_TOOL_TIER_READ},
			{Name: "send_email", Tier: reinv1.ToolTier_TOOL_TIER_WRITE},
			{Name: "ask_manager", Tier: reinv1.ToolTier_TOOL_TIER_ASK_HUMAN},
		},
		Model: &reinv1.ModelSpec{Provider: "script", Name: "test", Script: script},
	}
}

func mustStruct(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatalf("struct %v: %v", m, err)
	}
	return s
}

func askReply(question string) *reinv1.ScriptedReply {
	return &reinv1.ScriptedReply{
		Reply: &reinv1.ScriptedReply_Decision{Decision: &reinv1.Decision{Action: &reinv1.Decision_AskHuman{AskHuman: &reinv1.AskHuman{Question: question}}}},
		Usage: &reinv1.Usage{InputTokens: 10, OutputTokens: 5},
	}
}

func callDecision(tool, callID string, args *structpb.Struct) *reinv1.Decision {
	return &reinv1.Decision{Action: &reinv1.Decision_ToolCall{ToolCall: &reinv1.ToolCall{Tool: tool, CallId: callID, Arguments: args}}}
}
