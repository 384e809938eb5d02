// Package slackapp is rein's Slack face for approvals (docs/chat-approvals.md):
// the Block Kit message of a run paused for approval, with Approve and Deny
// buttons (Render), and the handler of the clicks Slack posts back to
// POST /hooks/slack/actions (Handler).
//
// A click is taken only when it is Slack's: its signature (Slack's signing
// secret over the timestamp and the body) is checked before the body is
// read as anything, a timestamp more than five minutes off is refused, and
// so is a signature seen already in that window. Its Slack user is mapped to
// a rein principal by the users file (Users); an unmapped user decides
// nothing. The decision is the API's own (server.Node.DecideApprovalAs) as
// that principal, with the proposal's hash from the button, so every rule of
// a decision holds: the approver role, the tenant, several approvers, not
// the run's starter, and a click on a message older than the proposal is
// refused. The outcome replaces the message's buttons through the click's
// response_url, which must be Slack's (Options.ResponseURLs).
package slackapp
