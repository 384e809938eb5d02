package taskcontract

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// valid is a contract Validate accepts: a goal, a model and one tool.
func valid() *reinv1.TaskContract {
	return &reinv1.TaskContract{
		Goal:  "find the invoice total",
		Tools: []*reinv1.ToolGrant{{Name: "search", Tier: reinv1.ToolTier_TOOL_TIER_READ}},
		Model: &reinv1.ModelSpec{Provider: "script", Name: "test"},
	}
}

// TestValidate: a valid contract passes; each broken one is refused with
// a *FieldError naming the field at fault.
func TestValidate(t *testing.T) {
	if err := Validate(valid()); err != nil {
		t.Fatalf("Validate(a valid contract): %v", err)
	}
	schema, err := structpb.NewStruct(map[string]any{"type": "thing"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		edit  func(c *reinv1.TaskContract) *reinv1.TaskContract
		field string
	}{
		{"nil", func(*reinv1.TaskContract) *reinv1.TaskContract { return nil }, "contract"},
		{"too large", func(c *reinv1.TaskContract) *reinv1.TaskContract { c.Goal = strings.Repeat("g", MaxBytes); return c }, "contract"},
		{"no goal", func(c *reinv1.TaskContract) *reinv1.TaskContract { c.Goal = ""; return c }, "contract.goal"},
		{"no tier", func(c *reinv1.TaskContract) *reinv1.TaskContract { c.Tools[0].Tier = 0; return c }, "contract.tools[0].tier"},
		{"granted twice", func(c *reinv1.TaskContract) *reinv1.TaskContract {
			c.Tools = append(c.Tools, c.Tools[0])
			return c
		}, "contract.tools[1].name"},
		{"too many approvals", func(c *reinv1.TaskContract) *reinv1.TaskContract { c.Tools[0].Approvals = MaxApprovals + 1; return c }, "contract.tools[0].approvals"},
		{"a schema that does not compile", func(c *reinv1.TaskContract) *reinv1.TaskContract { c.Tools[0].InputSchema = schema; return c }, "contract.tools[0].input_schema"},
		{"no timeout", func(c *reinv1.TaskContract) *reinv1.TaskContract {
			c.Budget = &reinv1.Budget{Timeout: durationpb.New(0)}
			return c
		}, "contract.budget.timeout"},
		{"a check defined twice", func(c *reinv1.TaskContract) *reinv1.TaskContract {
			c.Checks = []*reinv1.Check{{Name: "tests", Argv: []string{"true"}}, {Name: "tests", Argv: []string{"true"}}}
			return c
		}, "contract.checks[1].name"},
		{"a check out of the workspace", func(c *reinv1.TaskContract) *reinv1.TaskContract {
			c.Checks = []*reinv1.Check{{Name: "tests", Argv: []string{"true"}, Dir: "../up"}}
			return c
		}, "contract.checks[0].dir"},
		{"no model", func(c *reinv1.TaskContract) *reinv1.TaskContract { c.Model = nil; return c }, "contract.model"},
		{"a delegated tool not granted", func(c *reinv1.TaskContract) *reinv1.TaskContract {
			c.Delegation = &reinv1.DelegationPolicy{Tools: []string{"send_email"}}
			return c
		}, "contract.delegation.tools[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fe *FieldError
			if err := Validate(tc.edit(valid())); !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("Validate: %v, want a FieldError on %s", err, tc.field)
			}
		})
	}
}

// TestWithDefaults: a contract without budget, approval or check timeouts
// gets the defaults; one that sets them keeps its own.
func TestWithDefaults(t *testing.T) {
	c := valid()
	c.Checks = []*reinv1.Check{{Name: "tests", Argv: []string{"true"}}}
	c.Delegation = &reinv1.DelegationPolicy{}
	d := WithDefaults(c)
	if b := d.GetBudget(); b.GetMaxSteps() != DefaultMaxSteps || b.GetMaxOutputBytes() != DefaultMaxOutputBytes || b.GetMaxContextChars() != DefaultMaxContextChars {
		t.Errorf("budget %v, want the defaults", b)
	}
	if got := d.GetApproval().GetProposalTtl().AsDuration(); got != DefaultProposalTTL {
		t.Errorf("proposal_ttl %v, want %v", got, DefaultProposalTTL)
	}
	if got := d.GetChecks()[0].GetTimeout().AsDuration(); got != DefaultCheckTimeout {
		t.Errorf("check timeout %v, want %v", got, DefaultCheckTimeout)
	}
	if got := d.GetDelegation(); got.GetMaxDepth() != 1 || got.GetMaxShare() != DefaultMaxShare {
		t.Errorf("delegation %v, want max_depth 1 and max_share %v", got, DefaultMaxShare)
	}
	// The twin: what the contract sets, it keeps.
	c.Budget = &reinv1.Budget{MaxSteps: 3}
	c.Approval = &reinv1.ApprovalPolicy{ProposalTtl: durationpb.New(time.Minute)}
	if d := WithDefaults(c); d.GetBudget().GetMaxSteps() != 3 || d.GetApproval().GetProposalTtl().AsDuration() != time.Minute {
		t.Errorf("WithDefaults replaced what the contract set: %v", d)
	}
}

// TestWarnings: a proposal_ttl that outlives the run's timeout is warned
// of; one within it is not.
func TestWarnings(t *testing.T) {
	c := valid()
	c.Budget = &reinv1.Budget{Timeout: durationpb.New(time.Minute)}
	c.Approval = &reinv1.ApprovalPolicy{ProposalTtl: durationpb.New(time.Hour)}
	if w := Warnings(c); len(w) != 1 || !strings.Contains(w[0], "proposal_ttl") {
		t.Errorf("Warnings(ttl over timeout) = %q, want one about proposal_ttl", w)
	}
	c.Approval.ProposalTtl = durationpb.New(time.Second)
	if w := Warnings(c); len(w) != 0 {
		t.Errorf("Warnings(ttl within timeout) = %q, want none", w)
	}
}
