package engine

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/export"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/taskcontract"
)

// ForkRequest starts a run from another's state at a sequence.
type ForkRequest struct {
	RunID      string
	AtSequence uint64
	RequestID  string
	// Budget replaces the parent's when not nil (zero fields take the
	// defaults, as at start, except max_context_chars, which keeps the
	// parent's).
	Budget    *reinv1.Budget
	Principal string
	Tenant    string
	// TraceID and TraceParent are the new run's trace, as StartRequest's.
	TraceID, TraceParent string
}

// Fork starts a new run whose log carries over the parent's events up to
// AtSequence, so no model call or tool result before it is paid for again;
// its run_started names the parent and the sequence. A fork at a pending
// write re-proposes it (the carried log stops before the proposal, and the
// new run's driver proposes again); a fork inside a write's dispatch is
// refused, and a committed write is carried over with its receipt, never
// repeated.
func (e *Engine) Fork(ctx context.Context, req ForkRequest) (runstate.State, bool, error) {
	if req.RequestID == "" {
		return runstate.State{}, false, &taskcontract.FieldError{Field: "request_id", Description: "required: an idempotency key; the same key returns the same fork"}
	}
	parent, err := e.cfg.Store.Load(ctx, req.RunID)
	if err != nil {
		return parent, false, err
	}
	if req.AtSequence < 1 || req.AtSequence > parent.Version {
		return parent, false, &taskcontract.FieldError{Field: "at_sequence", Description: fmt.Sprintf("run %s has events 1 to %d; fork at one of them", req.RunID, parent.Version)}
	}
	evs, err := e.cfg.Store.Events(ctx, req.RunID, 0, int(req.AtSequence))
	if err != nil {
		return parent, false, err
	}
	at, err := runstate.ApplyAll(runstate.State{}, evs)
	if err != nil {
		return parent, false, fmt.Errorf("run %s: its log does not fold: %w", req.RunID, err)
	}
	switch {
	case runstate.Terminal(at.Status):
		return parent, false, &taskcontract.FieldError{Field: "at_sequence", Description: fmt.Sprintf("run %s is %s at sequence %d; fork before it ended", req.RunID, runstate.StatusName(at.Status), req.AtSequence)}
	case evs[len(evs)-1].GetModelReturned() != nil:
		return parent, false, &taskcontract.FieldError{Field: "at_sequence", Description: fmt.Sprintf("sequence %d is a model reply whose decision was not routed yet; fork at %d, where its step ends, or at %d", req.AtSequence, req.AtSequence+1, req.AtSequence-1)}
	case at.Waiting():
		return parent, false, &taskcontract.FieldError{Field: "at_sequence", Description: fmt.Sprintf("run %s waits for %d delegated children at sequence %d; fork before its delegation_started or after its last delegation_returned", req.RunID, len(at.Children), req.AtSequence)}
	case at.WriteInFlight():
		return parent, false, &taskcontract.FieldError{Field: "at_sequence", Description: fmt.Sprintf("a write is being dispatched at sequence %d; fork before its write_dispatched or after its outcome", req.AtSequence)}
	case at.Status == reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL && at.Pending == nil:
		return parent, false, &taskcontract.FieldError{Field: "at_sequence", Description: fmt.Sprintf("sequence %d is inside a person's decision (approved, its write not yet sent, or settled and the run not yet going on); fork before the decision or after the status change that follows", req.AtSequence)}
	}
	// A pending proposal is proposed again: stop before it. A pause on the
	// budget is met again under the fork's own budget: stop before it.
	if at.Pending.GetProposal() != nil {
		for len(evs) > 1 && evs[len(evs)-1].GetApprovalRequested() == nil {
			evs = evs[:len(evs)-1]
		}
		evs = evs[:len(evs)-1]
	}
	if at.Pending.GetBudget() != nil {
		for len(evs) > 1 && evs[len(evs)-1].GetBudgetReached().GetRaiseBy() == nil {
			evs = evs[:len(evs)-1]
		}
		evs = evs[:len(evs)-1]
	}

	c := proto.Clone(parent.Contract).(*reinv1.TaskContract)
	if req.Budget != nil {
		b := proto.Clone(req.Budget).(*reinv1.Budget)
		// The context limit shaped the carried compactions: a new budget
		// that does not name one keeps the parent's, so the fork rebuilds
		// the context its parent had.
		if b.MaxContextChars == 0 {
			b.MaxContextChars = c.GetBudget().GetMaxContextChars()
		}
		c.Budget = b
	}
	carried := make([]*reinv1.Event, 0, len(evs)-1)
	for _, ev := range evs[1:] {
		carried = append(carried, proto.Clone(ev).(*reinv1.Event))
	}
	var blobs map[string][]byte
	if refs := export.BlobRefs(carried); len(refs) > 0 {
		if blobs, err = e.cfg.Store.Blobs(ctx, req.RunID, refs); err != nil {
			return runstate.State{}, false, fmt.Errorf("fork %s: read the blobs its events reference: %w", req.RunID, err)
		}
	}
	// The fork starts with the tool definitions its parent started with,
	// which the carried events move as they moved the parent's: it holds
	// what its parent held at the sequence, and meets any change since as
	// its parent would.
	st, created, err := e.create(ctx, c, &reinv1.RunStarted{Principal: req.Principal, Tenant: req.Tenant, RequestId: req.RequestID,
		ParentRunId: req.RunID, ParentSequence: uint64(len(evs)), TraceId: req.TraceID, TraceParentSpanId: req.TraceParent,
		PromptCacheKey: parent.CacheKey(), ToolDigests: evs[0].GetRunStarted().GetToolDigests()}, carried, blobs)
	if err != nil && created {
		return st, true, fmt.Errorf("fork %s: carry the parent's events over: %w", st.RunID, err)
	}
	return st, created, err
}
