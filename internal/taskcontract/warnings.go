package taskcontract

import (
	"fmt"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// Warnings are sentences about a valid contract that may surprise
// the person who wrote it (StartRunResponse.warnings): an approval.proposal_ttl
// longer than budget.timeout, where every pending proposal ends with the
// run's deadline, not its own expiry. Only a proposal_ttl the contract sets
// is weighed; the default one is not the writer's promise.
func Warnings(c *reinv1.TaskContract) []string {
	ttl, timeout := c.GetApproval().GetProposalTtl(), c.GetBudget().GetTimeout()
	if ttl == nil || timeout == nil || ttl.AsDuration() <= timeout.AsDuration() {
		return nil
	}
	return []string{fmt.Sprintf("contract.approval.proposal_ttl (%s) outlives contract.budget.timeout (%s): a pending proposal ends at the run's deadline, when the run ends budget_exhausted, not at its own expiry; set proposal_ttl no longer than the timeout, or raise the timeout",
		ttl.AsDuration(), timeout.AsDuration())}
}
