package replay

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/pricing"
	"github.com/reinhq/rein/internal/step"
)

// recording answers the harness from a recorded log: it is the model, the
// tools, the clock and the ID source.
type recording struct {
	runID  string
	events []*reinv1.Event
	// steps maps a model call's step to the events that answered it.
	steps map[uint32]int // step → index of its model_requested
	// results are each tool's recorded results, in call order.
	reads    map[string][]*reinv1.ToolReturned
	previews map[string][]*reinv1.Proposal
	// revisions are people's revised proposals, whole, by proposal id.
	revisions map[string]*reinv1.Proposal
	receipts  map[string]*structpb.Value // by proposal id
	ids       []string                   // proposal IDs, in order
	nextID    int
	// runIDs are the run's ID, then its children's, in order; nextRun
	// how many were given out.
	runIDs  []string
	nextRun int
	// version is the replayed log's version, as the engine notified it
	// (the engine is synchronous: one goroutine reads and writes it).
	version uint64
	// attempts counts the calls made for each recorded model_requested
	// (by its index), for recorded retries.
	attempts map[int]int
	// refusals are the recorded reasons of refused writes, by proposal id.
	refusals map[string]string
	// repreviews are the proposals the harness previewed again after their
	// tool changed, whole, by the sequence they were recorded at.
	repreviews map[uint64]*reinv1.Proposal
}

func newRecording(ctx context.Context, events []*reinv1.Event, blobs *runLog) (*recording, error) {
	r := &recording{
		runID: events[0].GetRunId(), events: events, steps: map[uint32]int{},
		reads: map[string][]*reinv1.ToolReturned{}, previews: map[string][]*reinv1.Proposal{}, revisions: map[string]*reinv1.Proposal{},
		receipts: map[string]*structpb.Value{}, attempts: map[int]int{}, refusals: map[string]string{},
		repreviews: map[uint64]*reinv1.Proposal{},
	}
	r.runIDs = []string{r.runID}
	for i, ev := range events {
		switch p := ev.GetPayload().(type) {
		case *reinv1.Event_DelegationStarted:
			for _, c := range p.DelegationStarted.GetChildren() {
				r.runIDs = append(r.runIDs, c.GetRunId())
			}
		case *reinv1.Event_ModelRequested:
			r.steps[p.ModelRequested.GetStep()] = i
		case *reinv1.Event_ToolReturned:
			r.reads[p.ToolReturned.GetTool()] = append(r.reads[p.ToolReturned.GetTool()], p.ToolReturned)
		case *reinv1.Event_ApprovalRequested:
			// Proposed again whole: the harness stores it apart as the
			// recording did.
			pr, err := step.WholeProposal(ctx, blobs, ev.GetRunId(), p.ApprovalRequested.GetProposal())
			if err != nil {
				return nil, fmt.Errorf("%w: sequence %d: %w (replay it with the run's blobs)", ErrUnsupported, ev.GetSequence(), err)
			}
			r.previews[pr.GetTool()] = append(r.previews[pr.GetTool()], pr)
			r.ids = append(r.ids, pr.GetProposalId())
		case *reinv1.Event_ProposalRevised:
			// A person's revision: its preview and ID, as a proposal's, and
			// its whole arguments, which the person sends again.
			pr, err := step.WholeProposal(ctx, blobs, ev.GetRunId(), p.ProposalRevised.GetProposal())
			if err != nil {
				return nil, fmt.Errorf("%w: sequence %d: %w (replay it with the run's blobs)", ErrUnsupported, ev.GetSequence(), err)
			}
			r.previews[pr.GetTool()] = append(r.previews[pr.GetTool()], pr)
			r.ids = append(r.ids, pr.GetProposalId())
			r.revisions[pr.GetProposalId()] = pr
			if ev.GetActor() == "harness" {
				r.repreviews[ev.GetSequence()] = pr
			}
		case *reinv1.Event_WriteCommitted:
			r.receipts[p.WriteCommitted.GetProposalId()] = p.WriteCommitted.GetReceipt()
		case *reinv1.Event_WriteRefused:
			r.refusals[p.WriteRefused.GetProposalId()] = p.WriteRefused.GetReason()
		}
	}
	return r, nil
}

// raisedAfterCut says the resumed model call at seq follows a raise of a
// pause on the run's deadline, which cut the call it repeats: a person
// carried the run on, not a restart.
func (r *recording) raisedAfterCut(seq uint64) bool {
	for i := int(seq) - 2; i >= 0; i-- {
		switch ev := r.events[i]; {
		case ev.GetBudgetRaised() != nil, ev.GetStatusChanged() != nil, ev.GetRunSteered() != nil:
			continue
		case ev.GetBudgetReached().GetLimit() == "deadline":
			return true
		default:
			return false
		}
	}
	return false
}

// check refuses recordings replay cannot drive.
func (r *recording) check() error {
	for _, ev := range r.events {
		switch {
		case ev.GetModelRequested().GetResumed() && !r.raisedAfterCut(ev.GetSequence()):
			return fmt.Errorf("%w: run %s was cut by a crash (sequence %d resends a lost model call)", ErrUnsupported, r.runID, ev.GetSequence())
		case ev.GetRunTaken() != nil:
			return fmt.Errorf("%w: run %s was carried on after a restart or by another server (sequence %d)", ErrUnsupported, r.runID, ev.GetSequence())
		case ev.GetWriteOutcomeUnknown() != nil:
			return fmt.Errorf("%w: run %s has a write whose outcome was unknown (sequence %d)", ErrUnsupported, r.runID, ev.GetSequence())
		case ev.GetRunId() != r.runID:
			return fmt.Errorf("%w: sequence %d belongs to run %s, not %s", ErrUnsupported, ev.GetSequence(), ev.GetRunId(), r.runID)
		}
	}
	return nil
}

// clock is the recorded time of the next event the harness will stamp: the
// next stored event's, skipping a tool result the harness carries over from
// the step before (it keeps that step's time). The engine's Published keeps the
// stored version.
func (r *recording) clock() time.Time {
	v := r.version
	for i := int(v); i < len(r.events); i++ {
		if r.events[i].GetRunSteered() != nil {
			continue // a person's message is stamped by the person's call
		}
		if r.events[i].GetToolReturned() == nil || i == 0 {
			return r.events[i].GetRecordedAt().AsTime()
		}
		// A tool result opens a commit only when the step before left it.
		if i+1 < len(r.events) && r.events[i+1].GetRecordedAt().AsTime().After(r.events[i].GetRecordedAt().AsTime()) {
			return r.events[i+1].GetRecordedAt().AsTime()
		}
		return r.events[i].GetRecordedAt().AsTime()
	}
	return r.events[len(r.events)-1].GetRecordedAt().AsTime()
}

func (r *recording) newID(prefix string, _ time.Time) string {
	if prefix == "run_" {
		if r.nextRun < len(r.runIDs) {
			r.nextRun++
			return r.runIDs[r.nextRun-1]
		}
		return prefix + "unrecorded"
	}
	if r.nextID < len(r.ids) {
		r.nextID++
		return r.ids[r.nextID-1]
	}
	return prefix + "unrecorded"
}

// prices is the price table the recording's calls were priced at: its
// model's recorded price, or none.
func (r *recording) prices() *pricing.Table {
	m := r.events[0].GetRunStarted().GetContract().GetModel()
	// The calls asked for caching with the TTL they recorded; none
	// recorded one, caching was off (or not yet in rein).
	var ttl time.Duration
	for _, ev := range r.events {
		if d := ev.GetModelRequested().GetCacheTtl(); d != nil {
			ttl = d.AsDuration()
			break
		}
	}
	for _, ev := range r.events {
		if p := ev.GetModelRequested().GetPrice(); p != nil {
			return pricing.New(map[string]pricing.Price{m.GetProvider() + "/" + m.GetName(): {
				InputPerMTok: p.GetInputPerMtok(), OutputPerMTok: p.GetOutputPerMtok(),
				// The recorded write price is the one at the recorded TTL.
				CacheWritePerMTok: p.GetCacheWritePerMtok(), CacheWrite1hPerMTok: p.GetCacheWritePerMtok(),
				CacheReadPerMTok: p.GetCacheReadPerMtok(), CacheTTL: ttl, CacheOff: ttl == 0,
			}})
		}
	}
	return pricing.New(nil)
}
