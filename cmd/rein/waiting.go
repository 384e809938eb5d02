package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/reinhq/rein/client"
	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
)

// mayWait reports whether ev may leave its run waiting for a person: a
// status change to a pause, a write whose outcome is unknown (the proposal
// waits again), one approval of a proposal that needs more, or a revised
// proposal. Every run that waits for a person has one of these last in its
// log.
func mayWait(ev *reinv1.Event) bool {
	return runstate.Paused(ev.GetStatusChanged().GetTo()) || ev.GetWriteOutcomeUnknown() != nil ||
		ev.GetApprovalGiven() != nil || ev.GetProposalRevised() != nil
}

// waitsAt reads the run and reports whether it waits for a person with
// nothing recorded after sequence seq: a pause that holds now, not one the
// log replays or that someone answered already (the events after it are
// on their way). It returns the run as read.
func waitsAt(ctx context.Context, c *client.Client, runID string, seq uint64) (*reinv1.Run, bool, error) {
	var got *reinv1.GetRunResponse
	if err := c.Retry(ctx, func(ctx context.Context) (err error) {
		got, err = c.Runs.GetRun(ctx, &reinv1.GetRunRequest{RunId: runID})
		return err
	}); err != nil {
		return nil, false, err
	}
	run := got.GetRun()
	return run, run.GetVersion() == seq && client.WaitsForPerson(run), nil
}

// proposalStep says what answers a run paused on proposal p, as the end
// of a line: the command to give it next and, for a proposal that needs
// several approvals, how many more and who may not give them.
func proposalStep(run *reinv1.Run, p *reinv1.Proposal) string {
	id, pid := run.GetRunId(), p.GetProposalId()
	needed, by := runstate.Needed(p), p.GetApprovedBy()
	if needed < 2 {
		return fmt.Sprintf("; review the write, then rein approve %s %s (or rein deny)", id, pid)
	}
	not := "not " + run.GetPrincipal() + ", who started the run"
	if len(by) == 0 {
		return fmt.Sprintf("; review the write, then rein approve %s %s (or rein deny): it needs %d approvers with the approver role, %s",
			id, pid, needed, not)
	}
	more, people := needed-len(by), "people"
	if more == 1 {
		people = "person"
	}
	return fmt.Sprintf("; proposal %s has %d of the %d approvals it needs: %d more %s with the approver role must approve it (rein approve %s %s), %s, nor %s, who approved it",
		pid, len(by), needed, more, people, id, pid, not, strings.Join(by, ", "))
}

// pauseEnds says when a pause ends if no one acts and what ends it
// (pending.ends_at and ends_by, which the server derives), as a phrase;
// "" when nothing ends it.
func pauseEnds(p *reinv1.PendingAction) string {
	at := p.GetEndsAt()
	if at == nil {
		return ""
	}
	t := at.AsTime().UTC().Format(time.RFC3339)
	switch p.GetEndsBy() {
	case runstate.EndsByRunDeadline:
		return "ends " + t + ", the run's deadline (it then ends budget_exhausted)"
	case runstate.EndsByProposalTTL:
		return "ends " + t + ", when the proposal expires (the run then ends expired)"
	case runstate.EndsByRaiseTTL:
		return "ends " + t + ", when the pause for a raise expires (the run then ends expired)"
	}
	return "ends " + t
}

// pauseLine is the line a follow prints under the event that paused run:
// when the pause ends.
func pauseLine(run *reinv1.Run) string {
	if s := pauseEnds(run.GetPending()); s != "" {
		return fmt.Sprintf("%17s the pause %s", "┊", s)
	}
	return ""
}
