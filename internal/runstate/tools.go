package runstate

import (
	"fmt"
	"slices"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// ReasonToolChanged is the reason of the status change that pauses or
// fails a run because a granted tool's definition differs from the one it
// holds (tool_changed).
const ReasonToolChanged = "tool_changed"

// applyToolChanged folds a tool_changed: it changes nothing the run holds
// (the status change after it pauses or ends the run), but is refused for
// a tool the run holds no definition of, or in a status no tool is used
// in.
func applyToolChanged(s State, ev *reinv1.Event, tc *reinv1.ToolChanged) (State, error) {
	if s.Status != reinv1.RunStatus_RUN_STATUS_RUNNING && s.Status != reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL {
		return s, fmt.Errorf("%w: tool_changed needs a running or needs_approval run; run %q is %s", ErrIllegalTransition, s.RunID, StatusName(s.Status))
	}
	if held := s.ToolDigest(tc.GetTool()); held == nil || held.GetDigest() != tc.GetHeld().GetDigest() {
		return s, fmt.Errorf("%w: tool_changed for tool %q names a definition run %q does not hold", ErrInvalidEvent, tc.GetTool(), s.RunID)
	}
	return s, nil
}

// applyToolAdopted folds a tool_adopted: the run holds the adopted
// definition of the tool from now on, or none when the tool was removed.
func applyToolAdopted(s State, ev *reinv1.Event, ta *reinv1.ToolAdopted) (State, error) {
	if Terminal(s.Status) {
		return s, fmt.Errorf("%w: tool_adopted on run %q, which is %s", ErrIllegalTransition, s.RunID, StatusName(s.Status))
	}
	i := slices.IndexFunc(s.ToolDigests, func(d *reinv1.ToolDigest) bool { return d.GetName() == ta.GetTool() })
	switch {
	case i < 0 || s.ToolDigests[i].GetDigest() != ta.GetHeld().GetDigest():
		return s, fmt.Errorf("%w: tool_adopted for tool %q names a definition run %q does not hold", ErrInvalidEvent, ta.GetTool(), s.RunID)
	case ta.GetAdopted() != nil && ta.GetAdopted().GetName() != ta.GetTool():
		return s, fmt.Errorf("%w: tool_adopted for tool %q adopts the definition of %q", ErrInvalidEvent, ta.GetTool(), ta.GetAdopted().GetName())
	}
	if ta.GetAdopted() == nil {
		s.ToolDigests = slices.Delete(slices.Clone(s.ToolDigests), i, i+1)
		return s, nil
	}
	s.ToolDigests = slices.Clone(s.ToolDigests)
	s.ToolDigests[i] = ta.GetAdopted()
	return s, nil
}
