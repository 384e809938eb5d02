package harness

import (
	"fmt"
	"regexp"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// Defaults applied to a contract's zero budget fields at start, so the run's
// log holds the limits it ran under.
const (
	DefaultMaxSteps       = 25
	DefaultMaxOutputBytes = 64 << 10
	DefaultProposalTTL    = 24 * time.Hour
)

// FieldError says which field of a request is wrong and why. The server
// answers it with InvalidArgument and a BadRequest detail naming the field.
type FieldError struct {
	Field       string
	Description string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Description }

var toolName = regexp.MustCompile(`^[A-Za-z0-9_.\-]{1,64}$`)

// ValidateContract checks a contract before a run starts. It returns a
// *FieldError for the first problem found.
func ValidateContract(c *reinv1.TaskContract) error {
	if c == nil {
		return &FieldError{"contract", "required: a run needs a task contract"}
	}
	if c.GetGoal() == "" {
		return &FieldError{"contract.goal", "required: say what the run must achieve"}
	}
	seen := map[string]bool{}
	for i, t := range c.GetTools() {
		f := fmt.Sprintf("contract.tools[%d]", i)
		switch {
		case !toolName.MatchString(t.GetName()):
			return &FieldError{f + ".name", fmt.Sprintf("%q is not a tool name: use 1-64 letters, digits, '_', '.' or '-'", t.GetName())}
		case seen[t.GetName()]:
			return &FieldError{f + ".name", fmt.Sprintf("tool %q is granted twice", t.GetName())}
		case t.GetTier() == reinv1.ToolTier_TOOL_TIER_UNSPECIFIED:
			return &FieldError{f + ".tier", "required: TOOL_TIER_READ, TOOL_TIER_WRITE or TOOL_TIER_ASK_HUMAN"}
		}
		if _, ok := reinv1.ToolTier_name[int32(t.GetTier())]; !ok {
			return &FieldError{f + ".tier", fmt.Sprintf("unknown tier %d", t.GetTier())}
		}
		seen[t.GetName()] = true
	}
	if d := c.GetBudget().GetTimeout(); d != nil {
		if err := d.CheckValid(); err != nil || d.AsDuration() <= 0 {
			return &FieldError{"contract.budget.timeout", "must be a positive duration, such as \"300s\""}
		}
	}
	if d := c.GetApproval().GetProposalTtl(); d != nil {
		if err := d.CheckValid(); err != nil || d.AsDuration() <= 0 {
			return &FieldError{"contract.approval.proposal_ttl", "must be a positive duration, such as \"3600s\""}
		}
	}
	if len(c.GetChecks()) > 0 {
		return &FieldError{"contract.checks", "completion checks are not supported by this rein yet; remove them"}
	}
	if c.GetModel() == nil {
		return &FieldError{"contract.model", "required: name the model that drives the run (provider \"script\" runs offline)"}
	}
	return nil
}

// withDefaults returns a copy of c with the budget's zero fields set.
func withDefaults(c *reinv1.TaskContract) *reinv1.TaskContract {
	c = proto.Clone(c).(*reinv1.TaskContract)
	if c.Budget == nil {
		c.Budget = &reinv1.Budget{}
	}
	if c.Budget.MaxSteps == 0 {
		c.Budget.MaxSteps = DefaultMaxSteps
	}
	if c.Budget.MaxOutputBytes == 0 {
		c.Budget.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if c.Approval == nil {
		c.Approval = &reinv1.ApprovalPolicy{}
	}
	if c.Approval.ProposalTtl == nil {
		c.Approval.ProposalTtl = durationpb.New(DefaultProposalTTL)
	}
	return c
}
