// Package taskcontract owns the task contract's rules: what a valid contract
// is (Validate, which answers a *FieldError naming the field), the bounds
// it is held to (MaxBytes, MaxApprovals, MaxRules), the defaults a run
// starts with (WithDefaults) and the warnings about a valid contract that
// may surprise its writer (Warnings). The step loop (internal/step), the
// engine and the server import it; it imports none of them.
package taskcontract

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/tools"
)

// Defaults applied to a contract's zero budget fields at start, so the run's
// log holds the limits it ran under.
const (
	DefaultMaxSteps       = 25
	DefaultMaxOutputBytes = 64 << 10
	// DefaultMaxContextChars is the context size past which older
	// observations are compacted.
	DefaultMaxContextChars = 200_000
	DefaultProposalTTL     = 24 * time.Hour
	// DefaultCheckTimeout bounds a completion check with no timeout.
	DefaultCheckTimeout = 60 * time.Second
)

// FieldError says which field of a request is wrong and why. The server
// answers it with InvalidArgument and a BadRequest detail naming the field.
type FieldError struct {
	Field       string
	Description string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Description }

// MaxBytes bounds a contract's encoded size. A run's every read
// carries its contract (GetRun, a list page), so one near the 4 MiB message
// limit would leave its run unreadable once its state grew; large inputs
// belong in the workspace or a tool, read when needed.
const MaxBytes = 2 << 20

// Validate checks a contract before a run starts. It returns a
// *FieldError for the first problem found.
func Validate(c *reinv1.TaskContract) error {
	if c == nil {
		return &FieldError{"contract", "required: a run needs a task contract"}
	}
	if n := proto.Size(c); n > MaxBytes {
		return &FieldError{"contract", fmt.Sprintf("the contract is %d bytes, over the %d rein accepts: put large inputs in the workspace or behind a tool, and read them when needed", n, MaxBytes)}
	}
	if c.GetGoal() == "" {
		return &FieldError{"contract.goal", "required: say what the run must achieve"}
	}
	seen := map[string]bool{}
	for i, t := range c.GetTools() {
		f := fmt.Sprintf("contract.tools[%d]", i)
		if err := tools.CheckName(t.GetName()); err != nil {
			return &FieldError{f + ".name", fmt.Sprintf("%q is not a tool name: %v", t.GetName(), err)}
		}
		switch {
		case seen[t.GetName()]:
			return &FieldError{f + ".name", fmt.Sprintf("tool %q is granted twice", t.GetName())}
		case t.GetTier() == reinv1.ToolTier_TOOL_TIER_UNSPECIFIED:
			return &FieldError{f + ".tier", "required: TOOL_TIER_READ, TOOL_TIER_WRITE or TOOL_TIER_ASK_HUMAN"}
		}
		if _, ok := reinv1.ToolTier_name[int32(t.GetTier())]; !ok {
			return &FieldError{f + ".tier", fmt.Sprintf("unknown tier %d", t.GetTier())}
		}
		if err := checkRules(f, t); err != nil {
			return err
		}
		seen[t.GetName()] = true
	}
	if err := checkSchemas(c.GetTools()); err != nil {
		return err
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
	if d := c.GetBudget().GetRaiseTtl(); d != nil {
		if err := d.CheckValid(); err != nil || d.AsDuration() <= 0 {
			return &FieldError{"contract.budget.raise_ttl", "must be a positive duration, such as \"3600s\""}
		}
	}
	if err := validateChecks(c.GetChecks()); err != nil {
		return err
	}
	if c.GetModel() == nil {
		return &FieldError{"contract.model", "required: name the model that drives the run (provider \"script\" runs offline)"}
	}
	return validateDelegation(c)
}

// validateChecks checks the contract's completion checks: each is named
// (uniquely), has a command, a working directory relative to the workspace
// root that does not climb out of it, and a positive timeout if one is set.
func validateChecks(checks []*reinv1.Check) error {
	seen := map[string]bool{}
	for i, ch := range checks {
		f := fmt.Sprintf("contract.checks[%d]", i)
		switch {
		case ch.GetName() == "":
			return &FieldError{f + ".name", "required: name the check, such as \"tests\""}
		case seen[ch.GetName()]:
			return &FieldError{f + ".name", fmt.Sprintf("check %q is defined twice", ch.GetName())}
		case len(ch.GetArgv()) == 0 || ch.GetArgv()[0] == "":
			return &FieldError{f + ".argv", "required: the command and its arguments, such as [\"go\", \"test\", \"./...\"] (no shell)"}
		}
		if d := ch.GetDir(); d != "" {
			clean := filepath.Clean(d)
			switch {
			case filepath.IsAbs(d) || strings.HasPrefix(d, "/") || strings.HasPrefix(d, `\`):
				return &FieldError{f + ".dir", fmt.Sprintf("%q is absolute: give a directory relative to the workspace root", d)}
			case clean == ".." || strings.HasPrefix(clean, ".."+string(filepath.Separator)):
				return &FieldError{f + ".dir", fmt.Sprintf("%q climbs out of the workspace root with \"..\": a check runs inside the workspace", d)}
			case clean != d && clean+"/" != d:
				return &FieldError{f + ".dir", fmt.Sprintf("%q is not a clean path: write it as %q", d, clean)}
			}
		}
		if d := ch.GetTimeout(); d != nil {
			if err := d.CheckValid(); err != nil || d.AsDuration() <= 0 {
				return &FieldError{f + ".timeout", "must be a positive duration, such as \"60s\""}
			}
		}
		for j, name := range ch.GetEnv() {
			if name == "" || strings.ContainsAny(name, "=\x00") {
				return &FieldError{fmt.Sprintf("%s.env[%d]", f, j), fmt.Sprintf("%q is not an environment variable name", name)}
			}
		}
		seen[ch.GetName()] = true
	}
	return nil
}

// WithDefaults returns a copy of c with the budget's zero fields set.
func WithDefaults(c *reinv1.TaskContract) *reinv1.TaskContract {
	c = cloneContract(c)
	if c.Budget == nil {
		c.Budget = &reinv1.Budget{}
	}
	if c.Budget.MaxSteps == 0 {
		c.Budget.MaxSteps = DefaultMaxSteps
	}
	if c.Budget.MaxOutputBytes == 0 {
		c.Budget.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if c.Budget.MaxContextChars == 0 {
		c.Budget.MaxContextChars = DefaultMaxContextChars
	}
	for _, ch := range c.Checks {
		if ch.Timeout == nil {
			ch.Timeout = durationpb.New(DefaultCheckTimeout)
		}
	}
	if c.Approval == nil {
		c.Approval = &reinv1.ApprovalPolicy{}
	}
	if c.Approval.ProposalTtl == nil {
		c.Approval.ProposalTtl = durationpb.New(DefaultProposalTTL)
	}
	if d := c.Delegation; d != nil {
		if d.MaxDepth == 0 {
			d.MaxDepth = 1
		}
		if d.MaxShare == 0 {
			d.MaxShare = DefaultMaxShare
		}
	}
	return c
}

// cloneContract deep-copies a contract, except its model's script, which
// the copy shares: rein never changes a script, and a long one would be
// most of the copy's cost.
func cloneContract(c *reinv1.TaskContract) *reinv1.TaskContract {
	out := cloneExcept(c, "model").(*reinv1.TaskContract)
	if m := c.GetModel(); m != nil {
		out.Model = cloneExcept(m, "script").(*reinv1.ModelSpec)
		out.Model.Script = m.GetScript()
	}
	return out
}

// cloneExcept deep-copies m without the field named skip.
func cloneExcept(m proto.Message, skip protoreflect.Name) proto.Message {
	src := m.ProtoReflect()
	shallow := src.New()
	src.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Name() != skip {
			shallow.Set(fd, v)
		}
		return true
	})
	return proto.Clone(shallow.Interface())
}
