package slackapp

import (
	"encoding/json"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// PauseOf is the Pause of run when it waits for approval (ok is false
// otherwise), with a link to consoleURL. The run's proposal is as the API
// gives it: arguments and preview already bounded and redacted.
func PauseOf(run *reinv1.Run, consoleURL string) (p Pause, ok bool) {
	prop := run.GetPending().GetProposal()
	if run.GetStatus() != reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL || prop == nil {
		return Pause{}, false
	}
	p = Pause{
		RunID: run.GetRunId(), Tenant: run.GetTenant(), ProposalID: prop.GetProposalId(), ProposalHash: prop.GetHash(),
		Tool: prop.GetTool(), Arguments: ArgumentsOf(prop.GetArguments().AsMap()), Question: prop.GetPolicyMessage(),
		AskedBy: run.GetPrincipal(), Approvals: int(prop.GetApprovals()), ApprovedBy: prop.GetApprovedBy(), ConsoleURL: consoleURL,
	}
	if prop.GetExpiresAt() != nil {
		p.ExpiresAt = prop.GetExpiresAt().AsTime()
	}
	if pv := prop.GetPreview(); pv != nil {
		if data, err := json.MarshalIndent(pv.AsInterface(), "", "  "); err == nil {
			p.Preview = string(data)
		}
	}
	return p, true
}
