package taskcontract

import (
	"fmt"
	"math"
	"slices"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// DefaultMaxShare is the share of its remaining budget a run may lend one
// child when its delegation policy names none.
const DefaultMaxShare = 0.5

// validateDelegation checks a contract's delegation policy against its
// grants.
func validateDelegation(c *reinv1.TaskContract) error {
	d := c.GetDelegation()
	if d == nil {
		return nil
	}
	if s := d.GetMaxShare(); math.IsNaN(s) || s < 0 || s > 1 {
		return &FieldError{"contract.delegation.max_share", fmt.Sprintf("%v is not a share: give one in (0, 1], such as 0.5", s)}
	}
	for i, name := range d.GetTools() {
		if !slices.ContainsFunc(c.GetTools(), func(g *reinv1.ToolGrant) bool { return g.GetName() == name }) {
			return &FieldError{fmt.Sprintf("contract.delegation.tools[%d]", i), fmt.Sprintf(
				"%q is not granted to the run: a child may only be given tools the run has; grant it, or remove it here", name)}
		}
	}
	for i, m := range d.GetChildModels() {
		if m.GetProvider() == "" {
			return &FieldError{fmt.Sprintf("contract.delegation.child_models[%d].provider", i), "required: name the provider (\"script\" runs offline)"}
		}
	}
	return nil
}
