package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/failpoint"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/step"
	"github.com/reinhq/rein/internal/store"
)

// The scheduling of a delegation (docs/design.md §3, the delegate action):
// the step plans it (internal/step: the children's contracts and the
// budgets lent to them, stored in one commit with the decision as
// delegation_started); the engine then creates each child idempotently from
// that event (its request ID is the parent's run ID, the event's sequence
// and the task's index), wakes the parent when a child ends (commit), hands
// it each ended child's report (delegation_returned) on its next step, and
// cancels a parent's open children before the parent.

// startChildren creates the children a delegation_started of parent,
// stored at seq, names (step.Host).
func (e *Engine) startChildren(ctx context.Context, parent runstate.State, seq uint64, children []*reinv1.DelegatedChild) error {
	for i, c := range children {
		if _, err := e.createChild(ctx, parent, seq, i, c); err != nil {
			return err
		}
		failpoint.Inject(failpoint.DelegateAfterChild)
	}
	return nil
}

// createChild creates task i's child of parent from its delegation_started
// (stored at seq), or returns it when it exists: its request ID makes it
// idempotent, so a resumed parent never starts a child twice.
func (e *Engine) createChild(ctx context.Context, parent runstate.State, seq uint64, i int, c *reinv1.DelegatedChild) (runstate.State, error) {
	root, depth := parent.RunID, uint32(1)
	if by := parent.DelegatedBy; by != nil {
		root, depth = by.GetRootRunId(), by.GetDepth()+1
	}
	started := &reinv1.RunStarted{
		Principal: parent.Principal, Tenant: parent.Tenant, RequestId: c.GetRequestId(), TraceId: parent.TraceID,
		DelegatedBy: &reinv1.DelegatedBy{ParentRunId: parent.RunID, Sequence: seq, TaskIndex: uint32(i), RootRunId: root, Depth: depth},
	}
	if !parent.Deadline.IsZero() {
		started.Deadline = timestamppb.New(parent.Deadline)
	}
	st, _, err := e.createAs(ctx, c.GetRunId(), c.GetContract(), started, nil, nil)
	if err != nil {
		return st, fmt.Errorf("start child %d of run %s: %w", i, parent.RunID, err)
	}
	return st, nil
}

// endedChildren creates parent's open children that a crash left
// uncreated, and returns a delegation_returned for each open child that has
// ended, in the order they ended (step.Host).
func (e *Engine) endedChildren(ctx context.Context, parent runstate.State) ([]*reinv1.Event, error) {
	var started *reinv1.Event
	var ended []runstate.State
	for _, c := range parent.Children {
		st, err := e.cfg.Store.Load(ctx, c.RunID)
		if isNotFound(err) {
			if started == nil {
				if started, err = e.delegationStarted(ctx, parent); err != nil {
					return nil, err
				}
			}
			i := slices.IndexFunc(started.GetDelegationStarted().GetChildren(), func(d *reinv1.DelegatedChild) bool { return d.GetRunId() == c.RunID })
			st, err = e.createChild(ctx, parent, started.GetSequence(), i, started.GetDelegationStarted().GetChildren()[i])
		}
		if err != nil {
			return nil, err
		}
		if runstate.Terminal(st.Status) {
			ended = append(ended, st)
		}
	}
	slices.SortStableFunc(ended, func(a, b runstate.State) int { return a.UpdatedAt.Compare(b.UpdatedAt) })
	evs := make([]*reinv1.Event, 0, len(ended))
	for _, st := range ended {
		ev, err := e.returned(ctx, st)
		if err != nil {
			return nil, err
		}
		evs = append(evs, ev)
	}
	return evs, nil
}

// delegationStarted finds parent's last delegation_started in its log.
func (e *Engine) delegationStarted(ctx context.Context, parent runstate.State) (*reinv1.Event, error) {
	var last *reinv1.Event
	for after := uint64(0); after < parent.Version; {
		evs, err := e.cfg.Store.Events(ctx, parent.RunID, after, eventPage)
		if err != nil {
			return nil, err
		}
		if len(evs) == 0 {
			break
		}
		for _, ev := range evs {
			if ev.GetDelegationStarted() != nil {
				last = ev
			}
		}
		after = evs[len(evs)-1].GetSequence()
	}
	if last == nil {
		return nil, fmt.Errorf("%w: run %s has open children but no delegation_started", step.ErrDefect, parent.RunID)
	}
	return last, nil
}

// returned is an ended child's report: how it ended, its answer, what it
// rests on (each tool call it made) and what it spent, its own children's
// loans included (a child that ended with children open is charged their
// whole loans).
func (e *Engine) returned(ctx context.Context, child runstate.State) (*reinv1.Event, error) {
	spent := child.Committed()
	dr := &reinv1.DelegationReturned{
		RunId: child.RunID, Status: child.Status, Reason: child.StatusReason, Answer: child.Result,
		Usage: &reinv1.Usage{InputTokens: child.InputTokens, OutputTokens: child.OutputTokens + (spent.Tokens - child.Tokens()),
			CacheWriteInputTokens: child.CacheWriteTokens, CacheReadInputTokens: child.CacheReadTokens},
		CostUsd: spent.CostUSD, Steps: spent.Steps, ToolCalls: spent.ToolCalls,
	}
	evs, err := e.cfg.Store.Events(ctx, child.RunID, 0, eventPage)
	if err != nil {
		return nil, err
	}
	for _, ev := range evs {
		switch {
		case ev.GetToolReturned() != nil && ev.GetToolReturned().GetError() == "":
			dr.Evidence = append(dr.Evidence, "tool:"+ev.GetToolReturned().GetTool()+"#"+ev.GetToolReturned().GetCallId())
		case ev.GetWriteCommitted() != nil:
			dr.Evidence = append(dr.Evidence, "write:"+ev.GetWriteCommitted().GetOperationId())
		case ev.GetDelegationReturned() != nil:
			dr.Evidence = append(dr.Evidence, "run:"+ev.GetDelegationReturned().GetRunId())
		}
	}
	if child.LastError != "" && child.Status != reinv1.RunStatus_RUN_STATUS_COMPLETED {
		dr.Evidence = append(dr.Evidence, "error: "+step.CutText(child.LastError, 512))
	}
	return &reinv1.Event{Actor: "run:" + child.RunID, Payload: &reinv1.Event_DelegationReturned{DelegationReturned: dr}}, nil
}

// cancelChildren cancels a run's open children (and theirs) before the run
// itself, each recorded in the child's log.
func (e *Engine) cancelChildren(ctx context.Context, runID, actor string) error {
	st, err := e.cfg.Store.Load(ctx, runID)
	if err != nil || !st.Waiting() {
		return nil
	}
	for _, c := range st.Children {
		_, err := e.Cancel(ctx, c.RunID, "cancelled with its parent run "+runID, actor)
		if err != nil && !isNotFound(err) && !isTerminal(err) {
			return fmt.Errorf("cancel child %s of run %s: %w", c.RunID, runID, err)
		}
	}
	return nil
}

// wakeParent schedules the parent of a child that just ended, so it records
// the child's report, or that just paused on its budget, so it pauses for
// it.
func (e *Engine) wakeParent(before, after runstate.State) {
	ended := runstate.Terminal(after.Status) && !runstate.Terminal(before.Status)
	onBudget := after.Status == reinv1.RunStatus_RUN_STATUS_NEEDS_BUDGET && before.Status != after.Status
	if by := after.DelegatedBy; by != nil && (ended || onBudget) {
		e.schedule(by.GetParentRunId())
	}
}

// halt keeps runID from being driven (a cancel cascading to its children)
// until the returned function is called.
func (e *Engine) halt(runID string) func() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.halted == nil {
		e.halted = map[string]int{}
	}
	e.halted[runID]++
	return func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.halted[runID]--; e.halted[runID] <= 0 {
			delete(e.halted, runID)
		}
	}
}

func (e *Engine) isHalted(runID string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.halted[runID] > 0
}

func isNotFound(err error) bool { return errors.Is(err, store.ErrNotFound) }

func isTerminal(err error) bool { return errors.Is(err, runstate.ErrTerminal) }
