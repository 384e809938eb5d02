package replay

import (
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/step"
)

// upgrade returns the recorded events as this rein records them, where an
// older rein recorded as text what is now data, so that the rest of replay
// reads fields only and compares every event in full:
//
//   - a budget_reached for a model call whose retry would have passed the
//     run's deadline, recorded before retry_past_deadline existed, gets that
//     field from its detail (the sentence the harness wrote then and still
//     writes, so the detail is still compared as it was recorded).
//   - a model_requested recorded before prefix_bytes and prefix_tokens
//     existed (both 0 though it carried parts of the previous call's input)
//     gets them from the recording's own events, as the harness computes
//     them (step.Prefixes), so that their absence is no divergence.
//   - a proposal_revised of a tool whose grant has no input schema,
//     recorded before unchecked_arguments existed (false, though no schema
//     checked the revision then either), gets it set, as the harness now
//     records such a revision.
//
// The recorded events are not changed: an event to upgrade is copied, and
// the slice too. With nothing to upgrade, recorded is returned as it is.
func upgrade(recorded []*reinv1.Event) []*reinv1.Event {
	out, copied := recorded, false
	var prefixes map[uint64][2]uint64
	for i, ev := range recorded {
		if mr := ev.GetModelRequested(); mr != nil && mr.GetCarriedBlobs() > 0 && mr.GetPrefixBytes() == 0 && mr.GetPrefixTokens() == 0 {
			if prefixes == nil {
				prefixes = step.Prefixes(recorded)
			}
			p := prefixes[ev.GetSequence()]
			if !copied {
				out, copied = append([]*reinv1.Event(nil), recorded...), true
			}
			cp := proto.Clone(ev).(*reinv1.Event)
			cp.GetModelRequested().PrefixBytes, cp.GetModelRequested().PrefixTokens = p[0], p[1]
			out[i] = cp
			continue
		}
		if pr := ev.GetProposalRevised(); pr != nil && !pr.GetProposal().GetUncheckedArguments() && unschemed(recorded[0], pr.GetProposal().GetTool()) {
			if !copied {
				out, copied = append([]*reinv1.Event(nil), recorded...), true
			}
			cp := proto.Clone(ev).(*reinv1.Event)
			cp.GetProposalRevised().GetProposal().UncheckedArguments = true
			out[i] = cp
			continue
		}
		br := ev.GetBudgetReached()
		if br == nil || br.GetRetryPastDeadline() != nil || br.GetLimit() != "deadline" || i == 0 {
			continue
		}
		mr := recorded[i-1].GetModelRequested()
		late := legacyRetryPastDeadline(recorded[0].GetRunStarted(), br.GetDetail())
		if mr == nil || late == nil {
			continue
		}
		late.Step = mr.GetStep()
		if !copied {
			out, copied = append([]*reinv1.Event(nil), recorded...), true
		}
		cp := proto.Clone(ev).(*reinv1.Event)
		cp.GetBudgetReached().RetryPastDeadline = late
		out[i] = cp
	}
	return out
}

// unschemed reports whether the run that first began grants tool with no
// input schema of its own.
func unschemed(first *reinv1.Event, tool string) bool {
	for _, g := range first.GetRunStarted().GetContract().GetTools() {
		if g.GetName() == tool {
			return g.GetInputSchema() == nil
		}
	}
	return false
}

// legacyRetryPastDeadline reads the failed attempt from the detail of a
// budget_reached recorded before retry_past_deadline existed, the only place
// such a recording keeps it: "the model call was cut by the run's deadline
// DEADLINE: ERROR; a retry after WAIT would pass the run's deadline". A
// detail of another shape is nil.
func legacyRetryPastDeadline(started *reinv1.RunStarted, detail string) *reinv1.RetryPastDeadline {
	const mid, tail = "; a retry after ", " would pass the run's deadline"
	deadline := started.GetDeadline()
	if deadline == nil {
		return nil
	}
	prefix := "the model call was cut by the run's deadline " + deadline.AsTime().Format(time.RFC3339) + ": "
	rest, ok := strings.CutPrefix(detail, prefix)
	if !ok || !strings.HasSuffix(rest, tail) {
		return nil
	}
	i := strings.LastIndex(rest, mid)
	if i < 0 {
		return nil
	}
	wait, err := time.ParseDuration(strings.TrimSuffix(rest[i+len(mid):], tail))
	if err != nil {
		return nil
	}
	return &reinv1.RetryPastDeadline{Error: rest[:i], Wait: durationpb.New(wait)}
}
