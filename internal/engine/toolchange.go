package engine

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/step"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/storeformat"
	"github.com/reinhq/rein/internal/tools"
)

// A run holds the digests of its granted tools' definitions from its
// start (internal/step/tooldef.go, docs/upgrading.md, "When a tool changes under a run"). The engine's
// part: it records them at the start, checks a pending proposal's tool
// before the proposal is committed, and moves a run paused on a change to
// the new definitions when a person resumes it.

// toolDigestsFormat is the store format that brought tool digests and the
// events of a tool's change (internal/storeformat's History).
const toolDigestsFormat storeformat.Format = 7

// startDigests fills in started the digests of the granted tools'
// definitions, as this engine's executors serve them now, and of the
// server's policy rules. Tools that cannot be listed now (a tool server
// down) leave the run without digests, logged: its tools are not checked.
// A fork keeps the digests its parent started with (Fork sets them). So
// does a run started while the store's active format is older than the
// one that holds tool digests (a cluster mid-upgrade, whose older
// replicas could not fold them): the policy digest, which no fold reads,
// is recorded all the same.
func (e *Engine) startDigests(ctx context.Context, c *reinv1.TaskContract, started *reinv1.RunStarted) {
	started.PolicyDigest = e.cfg.Policy.Digest()
	if started.GetParentRunId() != "" {
		return
	}
	if e.cfg.Formats != nil && !e.cfg.Formats.Allows("tool digests", toolDigestsFormat) {
		return
	}
	served := false
	for _, g := range c.GetTools() {
		served = served || g.GetTier() != reinv1.ToolTier_TOOL_TIER_ASK_HUMAN
	}
	if !served {
		return
	}
	defs, err := step.Definitions(ctx, e.executor(), e.cfg.ToolTimeout)
	if err != nil {
		e.cfg.Logger.Warn("listing the tools failed at a run's start; its tools' definitions are not recorded, nor checked",
			"request_id", started.GetRequestId(), "error", err)
		return
	}
	started.ToolDigests = step.GrantedDigests(c.GetTools(), defs)
}

// proposalTool compares the definition of the pending proposal's tool
// with the one the proposal was previewed on (the run's, or the one a
// preview again after a change names), before an approval of it counts.
// With no change (or when it cannot be told: the tools cannot be listed,
// the run holds no digest), it returns the tool_adopted a proposal
// previewed again needs to be committed, if any, and changed is false.
// When the tool changed, the proposal is never committed on its hash: the
// change is met as the server's OnToolChange says (previewAgain), and
// changed is true with the state and error to answer.
func (e *Engine) proposalTool(ctx context.Context, st runstate.State, v Verdict) (adopt *reinv1.Event, changed bool, next runstate.State, err error) {
	p := st.Pending.GetProposal()
	held := st.ToolDigest(p.GetTool())
	if held == nil {
		return nil, false, st, nil
	}
	defs, lerr := step.Definitions(ctx, e.executor(), e.cfg.ToolTimeout)
	if lerr != nil {
		return nil, false, st, nil // as before digests: the write's outcome is settled by lookup
	}
	found := defs[p.GetTool()]
	if found == nil {
		// No executor serves the tool now: checkProvided refuses the
		// approval unless the run fails on a change.
		if e.cfg.OnToolChange != step.ToolChangeFail {
			return nil, false, st, nil
		}
	}
	if p.GetToolDigest() != "" && found != nil && found.GetDigest() == p.GetToolDigest() {
		if found.GetDigest() == held.GetDigest() {
			return nil, false, st, nil
		}
		// Previewed again on the definition served now: approving it
		// moves the run there.
		return &reinv1.Event{Payload: &reinv1.Event_ToolAdopted{ToolAdopted: &reinv1.ToolAdopted{
			Tool: p.GetTool(), Held: held, Adopted: found, Changes: tools.Changes(held, found), By: "resume",
		}}}, false, st, nil
	}
	c := step.FindToolChange(st, p.GetTool(), defs)
	if c == nil && p.GetToolDigest() == "" {
		return nil, false, st, nil
	}
	if c == nil {
		// Previewed again on a definition that changed once more, back to
		// the run's: preview it again on that one.
		c = &step.ToolChange{Tool: p.GetTool(), Held: held, Found: found, Changes: []string{"definition"}}
	}
	next, err = e.previewAgain(ctx, st, v, c)
	return nil, true, next, err
}

// previewAgain meets a change of the pending proposal's tool, found by
// v's approval: the proposal is never committed. With OnToolChange fail
// the run ends failed; else the proposal is previewed again on the new
// definition as a new proposal (proposal_revised by the harness, naming
// the definition), after tool_changed (pause: the run moves to the new
// definition when the new proposal is approved) or tool_adopted (adopt).
// The approver is told, with ErrNotWaiting, and approves the new one.
func (e *Engine) previewAgain(ctx context.Context, st runstate.State, v Verdict, c *step.ToolChange) (runstate.State, error) {
	old := st.Pending.GetProposal()
	actor := "principal:" + v.Principal
	if e.cfg.OnToolChange == step.ToolChangeFail {
		next, err := e.commit(ctx, st, actor, []*reinv1.Event{
			{Payload: &reinv1.Event_ToolChanged{ToolChanged: c.Changed(step.ToolChangeFail, "", old.GetProposalId())}},
			{Actor: "harness", Payload: &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{
				From: st.Status, To: reinv1.RunStatus_RUN_STATUS_FAILED, Reason: runstate.ReasonToolChanged,
				Error: fmt.Sprintf("tool %q changed since proposal %s was previewed (%s), and this server fails such runs (--on-tool-change fail); nothing was committed", c.Tool, old.GetProposalId(), c.What()),
			}}},
		})
		if err != nil {
			return st, err
		}
		e.disarm(st.RunID)
		return next, fmt.Errorf("%w: tool %q changed since proposal %s was previewed (%s); nothing was committed, and the run failed (--on-tool-change fail)",
			ErrNotWaiting, c.Tool, old.GetProposalId(), c.What())
	}
	if st.WriteOperationID != "" {
		return st, fmt.Errorf("%w: tool %q changed (%s) while the outcome of proposal %s's write is unknown, and nothing was recorded: check the system of record for operation %s, then reject the proposal or cancel the run",
			ErrNotWaiting, c.Tool, c.What(), old.GetProposalId(), st.WriteOperationID)
	}
	whole, err := step.WholeProposal(ctx, e.cfg.Store, st.RunID, old)
	if err != nil {
		return st, err
	}
	why, checked, err := step.CheckArguments(ctx, e.executor(), st.Contract.GetTools(), old.GetTool(), whole.GetArguments(), e.cfg.ToolTimeout)
	if err != nil {
		return st, err
	}
	if why != "" {
		return st, fmt.Errorf("%w: tool %q changed since proposal %s was previewed (%s), and its arguments no longer match the tool's input schema, so it was not committed and nothing was recorded: %s; revise the proposal, reject it, or cancel the run",
			ErrNotWaiting, c.Tool, old.GetProposalId(), c.What(), why)
	}
	preview := old.GetPreview()
	if old.GetTier() != reinv1.ToolTier_TOOL_TIER_READ {
		call := tools.Call{RunID: st.RunID, CallID: old.GetCallId(), Tool: old.GetTool(), Args: whole.GetArguments(),
			Index: int(st.CallsByTool[old.GetTool()]) - 1}
		pctx, cancel := context.WithTimeoutCause(ctx, e.cfg.ToolTimeout, e.toolTimedOut("preview"))
		defer cancel()
		preview, err = step.Await(pctx, e.stepped, func(ctx context.Context) (*structpb.Value, error) { return e.executor().Propose(ctx, call) })
		if err != nil {
			return st, fmt.Errorf("%w: tool %q changed since proposal %s was previewed (%s), and could not preview it again, so it was not committed and nothing was recorded: %v; reject it, or cancel the run",
				ErrNotWaiting, c.Tool, old.GetProposalId(), c.What(), err)
		}
	}
	now := e.cfg.Clock()
	p := &reinv1.Proposal{
		ProposalId: e.newID("prop_", now),
		Tool:       old.GetTool(),
		Arguments:  whole.GetArguments(),
		Preview:    preview,
		ExpiresAt:  timestamppb.New(now.Add(st.Contract.GetApproval().GetProposalTtl().AsDuration())),
		RunVersion: st.Version,
		CallId:     old.GetCallId(),
		Approvals:  old.GetApprovals(),
		Tier:       old.GetTier(),
		PolicyRule: old.GetPolicyRule(), PolicyMessage: old.GetPolicyMessage(),
		UncheckedArguments: !checked,
		RevisionReason:     fmt.Sprintf("tool %q changed since proposal %s was previewed (%s): previewed again on the new definition", c.Tool, old.GetProposalId(), c.What()),
		ToolDigest:         c.Found.GetDigest(),
	}
	blobs := step.InlineProposal(p)
	p.Hash = step.ProposalHash(p)
	var opts []store.AppendOption
	if blobs != nil {
		opts = append(opts, store.WithBlobs(blobs))
	}
	// Both stamped with the instant the new proposal's expiry counts from,
	// as a revision is, so a replay reaches the same expiry.
	first := &reinv1.Event{RecordedAt: timestamppb.New(now), Payload: &reinv1.Event_ToolChanged{ToolChanged: c.Changed(step.ToolChangePause, "", old.GetProposalId())}}
	if e.cfg.OnToolChange == step.ToolChangeAdopt {
		first = &reinv1.Event{RecordedAt: timestamppb.New(now), Payload: &reinv1.Event_ToolAdopted{ToolAdopted: c.Adopted(true)}}
	}
	next, err := e.commit(ctx, st, actor, []*reinv1.Event{first, {Actor: "harness", RecordedAt: timestamppb.New(now), Payload: &reinv1.Event_ProposalRevised{ProposalRevised: &reinv1.ProposalRevised{
		SupersededProposalId: old.GetProposalId(), Proposal: p, Changes: step.ArgumentChanges(whole.GetArguments(), p.GetArguments()), Reason: p.GetRevisionReason(),
	}}}}, opts...)
	if err != nil {
		return st, err
	}
	e.Arm(next) // the new proposal expires on its own
	return next, fmt.Errorf("%w: tool %q changed since proposal %s was previewed (%s), so it was not committed: it was previewed again on the new definition as proposal %s (hash %s); review it and approve that one",
		ErrNotWaiting, c.Tool, old.GetProposalId(), c.What(), p.GetProposalId(), p.GetHash())
}

// adoptOnResume are the tool_adopted events that move a run paused on a
// tool change (needs_input, tool_changed) to the definitions served now,
// as the person who resumes it does: one for each granted tool whose
// definition differs from the run's.
func (e *Engine) adoptOnResume(ctx context.Context, st runstate.State) ([]*reinv1.Event, error) {
	if st.StatusReason != runstate.ReasonToolChanged {
		return nil, nil
	}
	defs, err := step.Definitions(ctx, e.executor(), e.cfg.ToolTimeout)
	if err != nil {
		return nil, fmt.Errorf("%w: run %s paused because a tool changed, and this server's tools cannot be listed now to resume it on their definitions: %v; nothing was recorded: retry once the tool server answers",
			ErrToolsUnavailable, st.RunID, err)
	}
	var out []*reinv1.Event
	for _, d := range st.ToolDigests {
		if c := step.FindToolChange(st, d.GetName(), defs); c != nil {
			out = append(out, &reinv1.Event{Payload: &reinv1.Event_ToolAdopted{ToolAdopted: c.Adopted(false)}})
		}
	}
	return out, nil
}
