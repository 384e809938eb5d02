package replay

// The recording as the run's tools: their definitions, and the reads,
// previews, receipts and refused writes it recorded.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/tools"
)

// refusedError is a recorded refused write, replayed with its reason.
type refusedError struct{ reason string }

func (e *refusedError) Error() string { return e.reason }
func (e *refusedError) Unwrap() error { return tools.ErrRefused }

// List implements tools.Executor: the recording stands in for every tool
// the run was granted.
func (r *recording) List(context.Context) ([]tools.Spec, error) {
	var specs []tools.Spec
	for _, g := range r.events[0].GetRunStarted().GetContract().GetTools() {
		specs = append(specs, tools.Spec{Name: g.GetName()})
	}
	return specs, nil
}

// Definitions implements tools.Definer: the recording knows the tools'
// definitions by the digests it recorded. They are run_started's, moved
// by every tool_changed and tool_adopted recorded up to the replay's
// version, then by the first of each tool recorded after it and before the
// next model call or status change: the change the harness met at the
// check it makes now. A recording with no digests (made before rein kept
// them) has none, and the replay checks nothing, as the run did.
func (r *recording) Definitions(context.Context) ([]*reinv1.ToolDigest, error) {
	defs := slices.Clone(r.events[0].GetRunStarted().GetToolDigests())
	set := func(tool string, d *reinv1.ToolDigest) {
		i := slices.IndexFunc(defs, func(x *reinv1.ToolDigest) bool { return x.GetName() == tool })
		switch {
		case i >= 0 && d == nil:
			defs = slices.Delete(defs, i, i+1)
		case i >= 0:
			defs[i] = d
		case d != nil:
			defs = append(defs, d)
		}
	}
	met := map[string]bool{}
	for i, ev := range r.events {
		ahead := i >= int(r.version)
		if ahead && (ev.GetModelRequested() != nil || ev.GetStatusChanged() != nil) {
			break
		}
		tool, d := "", (*reinv1.ToolDigest)(nil)
		if tc := ev.GetToolChanged(); tc != nil {
			tool, d = tc.GetTool(), tc.GetFound()
		} else if ta := ev.GetToolAdopted(); ta != nil {
			tool, d = ta.GetTool(), ta.GetAdopted()
		} else {
			continue
		}
		if ahead && met[tool] {
			continue
		}
		met[tool] = ahead
		set(tool, d)
	}
	return defs, nil
}

// Read implements tools.Executor with the recorded result of the call.
func (r *recording) Read(_ context.Context, c tools.Call) (*structpb.Value, error) {
	list := r.reads[c.Tool]
	if c.Index >= len(list) {
		return nil, fmt.Errorf("the recording has no result for call %d of %s", c.Index+1, c.Tool)
	}
	tr := list[c.Index]
	if tr.GetError() != "" {
		return nil, errors.New(tr.GetError())
	}
	return tr.GetOutput(), nil
}

// Propose implements tools.Executor with the recorded preview.
func (r *recording) Propose(_ context.Context, c tools.Call) (*structpb.Value, error) {
	// A proposal previewed again on its tool's new definition has the
	// call and arguments of the one it supersedes: the next such preview
	// of the call is the one the harness asks for.
	for i := int(r.version); i < len(r.events); i++ {
		if p := r.repreviews[r.events[i].GetSequence()]; p != nil && p.GetCallId() == c.CallID {
			return p.GetPreview(), nil
		}
	}
	for _, p := range r.previews[c.Tool] {
		if p.GetCallId() == c.CallID && proto.Equal(p.GetArguments(), c.Args) {
			return p.GetPreview(), nil
		}
	}
	if list := r.previews[c.Tool]; len(list) > 0 {
		return list[min(c.Index, len(list)-1)].GetPreview(), nil
	}
	return nil, fmt.Errorf("the recording has no proposal for %s", c.Tool)
}

// Commit implements tools.Executor with the recorded receipt.
func (r *recording) Commit(_ context.Context, c tools.Call, operationID string) (*structpb.Value, error) {
	id := strings.TrimPrefix(operationID, "op_")
	if receipt, ok := r.receipts[id]; ok {
		return receipt, nil
	}
	if reason, ok := r.refusals[id]; ok {
		return nil, &refusedError{reason}
	}
	return nil, fmt.Errorf("the recording has no receipt for operation %s", operationID)
}
