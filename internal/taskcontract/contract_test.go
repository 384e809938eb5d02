package taskcontract

import (
	"testing"

	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// TestCloneContractIsDeepButTheScript: the copy equals the original; every
// part of it but the model's script is its own, so WithDefaults may set
// fields without touching the caller's contract.
func TestCloneContractIsDeepButTheScript(t *testing.T) {
	c := &reinv1.TaskContract{
		Goal:  "find the invoice total",
		Tools: []*reinv1.ToolGrant{{Name: "search", Tier: reinv1.ToolTier_TOOL_TIER_READ}},
		Model: &reinv1.ModelSpec{Provider: "script", Name: "test", Script: []*reinv1.ScriptedReply{{
			Reply: &reinv1.ScriptedReply_Decision{Decision: &reinv1.Decision{Action: &reinv1.Decision_AskHuman{AskHuman: &reinv1.AskHuman{Question: "which one?"}}}},
		}}},
	}
	c.Budget = &reinv1.Budget{MaxSteps: 3}
	c.Labels = map[string]string{"team": "infra"}
	c.Checks = []*reinv1.Check{{Name: "tests", Argv: []string{"true"}}}
	cp := cloneContract(c)
	if !proto.Equal(cp, c) {
		t.Fatalf("the copy differs:\n%v\n%v", cp, c)
	}
	d := WithDefaults(c)
	if c.GetBudget().GetMaxOutputBytes() != 0 || c.GetApproval() != nil || c.GetChecks()[0].GetTimeout() != nil {
		t.Fatalf("WithDefaults changed the caller's contract: %v", c)
	}
	if d.GetBudget().GetMaxOutputBytes() == 0 || d.GetChecks()[0].GetTimeout() == nil {
		t.Fatalf("WithDefaults set no defaults: %v", d)
	}
	cp.Goal, cp.Budget.MaxSteps, cp.Labels["team"], cp.Tools[0].Name, cp.Model.Name = "x", 9, "x", "x", "x"
	if c.GetGoal() == "x" || c.GetBudget().GetMaxSteps() == 9 || c.GetLabels()["team"] == "x" || c.GetTools()[0].GetName() == "x" || c.GetModel().GetName() == "x" {
		t.Fatalf("the copy shares parts with the original: %v", c)
	}
	if &cp.Model.Script[0] != &c.Model.Script[0] {
		t.Fatal("the script was copied; it is meant to be shared")
	}
}
