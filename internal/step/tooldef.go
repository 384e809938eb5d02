package step

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/tools"
)

// A run holds the digest of each granted tool's definition from its start
// (run_started.tool_digests). Before a tool is called, and before a
// pending proposal is committed, the definition the server serves now is
// compared with the one the run holds; when they differ, the server's
// OnToolChange decides (docs/upgrading.md, "When a tool changes under a run").

// ToolChangeAction is what the engine does when a granted tool's
// definition differs from the one the run holds (rein serve
// --on-tool-change).
type ToolChangeAction int

const (
	// ToolChangePause pauses the run (needs_input, reason tool_changed)
	// until a person resumes it on the new definition, or cancels it.
	ToolChangePause ToolChangeAction = iota
	// ToolChangeAdopt moves the run to the new definition (tool_adopted).
	ToolChangeAdopt
	// ToolChangeFail ends the run as failed (reason tool_changed).
	ToolChangeFail
)

// ToolChangeActions are the actions by the name --on-tool-change takes.
var ToolChangeActions = map[string]ToolChangeAction{"pause": ToolChangePause, "adopt": ToolChangeAdopt, "fail": ToolChangeFail}

func (a ToolChangeAction) String() string {
	for name, v := range ToolChangeActions {
		if v == a {
			return name
		}
	}
	return fmt.Sprintf("ToolChangeAction(%d)", int(a))
}

// ToolChange is a granted tool whose definition differs from the one the
// run holds.
type ToolChange struct {
	Tool string
	// Held is the definition the run holds; Found the one served now, nil
	// when no executor serves the tool any more.
	Held, Found *reinv1.ToolDigest
	// Changes names what differs (tools.Changes).
	Changes []string
}

// What is the change in words, for a person: "tier and schema", "removed".
func (c *ToolChange) What() string {
	return strings.Join(c.Changes, " and ")
}

// Definitions are the digests of the definitions exec serves, by name,
// listed within timeout; an error when they cannot be listed.
func Definitions(ctx context.Context, exec tools.Executor, timeout time.Duration) (map[string]*reinv1.ToolDigest, error) {
	lctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	defs, err := tools.Definitions(lctx, exec)
	if err != nil {
		return nil, err
	}
	out := make(map[string]*reinv1.ToolDigest, len(defs))
	for _, d := range defs {
		if _, ok := out[d.GetName()]; !ok { // the first executor's runs it
			out[d.GetName()] = d
		}
	}
	return out, nil
}

// GrantedDigests are the digests of grants' definitions in defs, in grant
// order: an ask_human grant, which no tool serves, and a grant no
// executor serves have none.
func GrantedDigests(grants []*reinv1.ToolGrant, defs map[string]*reinv1.ToolDigest) []*reinv1.ToolDigest {
	var out []*reinv1.ToolDigest
	for _, g := range grants {
		if g.GetTier() == reinv1.ToolTier_TOOL_TIER_ASK_HUMAN {
			continue
		}
		if d := defs[g.GetName()]; d != nil {
			out = append(out, proto.CloneOf(d))
		}
	}
	return out
}

// FindToolChange compares the definition of tool that run st holds with
// the one served now (defs, as Definitions lists them): nil when the run
// holds none (a run recorded before digests: not checked) or they agree.
func FindToolChange(st runstate.State, tool string, defs map[string]*reinv1.ToolDigest) *ToolChange {
	held := st.ToolDigest(tool)
	if held == nil {
		return nil
	}
	found := defs[tool]
	changes := tools.Changes(held, found)
	if changes == nil {
		return nil
	}
	return &ToolChange{Tool: tool, Held: held, Found: found, Changes: changes}
}

// Adopted is the tool_adopted event that moves a run to c's new
// definition, by the server's adopt (byServer) or by a person's resume.
func (c *ToolChange) Adopted(byServer bool) *reinv1.ToolAdopted {
	by := "resume"
	if byServer {
		by = "adopt"
	}
	return &reinv1.ToolAdopted{Tool: c.Tool, Held: c.Held, Adopted: c.Found, Changes: c.Changes, By: by}
}

// Changed is the tool_changed event that records c, found by the call
// callID or the proposal proposalID, and what the server did.
func (c *ToolChange) Changed(action ToolChangeAction, callID, proposalID string) *reinv1.ToolChanged {
	return &reinv1.ToolChanged{Tool: c.Tool, Held: c.Held, Found: c.Found, Changes: c.Changes, Action: action.String(),
		CallId: callID, ProposalId: proposalID}
}

// checkTool compares the definition of the tool call is to run on with
// the one the run holds, before the call is routed. With no change, or
// when the tools cannot be listed now (the call's own error will say
// why), it returns the events to commit with the call as they are. A
// change is met as the server's OnToolChange says: adopt adds
// tool_adopted to them and the call goes on, on the new definition; pause
// and fail record tool_changed and the call's refusal, and pause the run
// for a person (needs_input, tool_changed) or end it (failed): handled is
// true, and err is the commit's.
func (r *Stepper) checkTool(ctx context.Context, call *reinv1.ToolCall, evs []*reinv1.Event) (out []*reinv1.Event, handled bool, err error) {
	if r.st.ToolDigest(call.GetTool()) == nil {
		return evs, false, nil
	}
	found, lerr := r.served(ctx, call.GetTool())
	if lerr != nil {
		r.h.Logger().Warn("listing the tools failed; a tool's definition is not checked before its call",
			"run_id", r.st.RunID, "tool", call.GetTool(), "error", lerr)
		return evs, false, nil
	}
	c := FindToolChange(r.st, call.GetTool(), map[string]*reinv1.ToolDigest{call.GetTool(): found})
	if c == nil {
		return evs, false, nil
	}
	if r.cfg.OnToolChange == ToolChangeAdopt {
		r.adoptSchema(ctx, call.GetTool())
		return append(evs, &reinv1.Event{Actor: "harness", Payload: &reinv1.Event_ToolAdopted{ToolAdopted: c.Adopted(true)}}), false, nil
	}
	changed := &reinv1.Event{Actor: "harness", Payload: &reinv1.Event_ToolChanged{ToolChanged: c.Changed(r.cfg.OnToolChange, call.GetCallId(), "")}}
	if r.cfg.OnToolChange == ToolChangeFail {
		refused := r.toolChangedRefusal(call, c, "this server fails a run whose tool changed (--on-tool-change fail)")
		return nil, true, r.end(ctx, reinv1.RunStatus_RUN_STATUS_FAILED, runstate.ReasonToolChanged, &reinv1.StatusChanged{
			Error: fmt.Sprintf("tool %q changed since the run was granted it (%s), and this server fails such runs (--on-tool-change fail); start a new run to use the new definition", c.Tool, c.What()),
		}, append(evs, changed, refused)...)
	}
	refused := r.toolChangedRefusal(call, c, "the run paused for a person to resume it on the new definition")
	question := &reinv1.Event{Actor: "harness", Payload: &reinv1.Event_InputRequested{InputRequested: &reinv1.InputRequested{Question: &reinv1.Question{
		Text: fmt.Sprintf("Tool %q changed since this run was granted it (%s). Provide input to resume the run on the new definition (what you write goes to the model), or cancel the run.", c.Tool, c.What()),
	}}}}
	return nil, true, r.end(ctx, reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT, runstate.ReasonToolChanged, &reinv1.StatusChanged{},
		append(evs, changed, refused, question)...)
}

// served is the digest of the definition of tool served now; nil when no
// executor serves it. Digests are kept, one a tool, for the definition
// last listed, so a tool listed as it was is not digested again.
func (r *Stepper) served(ctx context.Context, tool string) (*reinv1.ToolDigest, error) {
	lctx, cancel := context.WithTimeout(ctx, r.cfg.ToolTimeout)
	defer cancel()
	exec := r.h.Tools()
	if d, ok := exec.(tools.Definer); ok {
		defs, err := d.Definitions(lctx)
		for _, def := range defs {
			if def.GetName() == tool {
				return def, err
			}
		}
		return nil, err
	}
	specs, err := exec.List(lctx)
	if err != nil {
		return nil, err
	}
	for _, sp := range specs {
		if sp.Name != tool {
			continue
		}
		key := digestKey{server: sp.Server, tier: sp.Tier, schema: sp.InputSchema}
		if k, ok := r.digests[tool]; ok && k.key == key {
			return k.digest, nil
		}
		d := tools.Digest(sp)
		if r.digests == nil {
			r.digests = map[string]keptDigest{}
		}
		r.digests[tool] = keptDigest{key, d}
		return d, nil
	}
	return nil, nil
}

// digestKey is what a listed definition is known by while it is listed as
// it was: its schema by its address.
type digestKey struct {
	server string
	tier   reinv1.ToolTier
	schema *structpb.Struct
}

// keptDigest is the digest of a tool's definition last listed.
type keptDigest struct {
	key    digestKey
	digest *reinv1.ToolDigest
}

// toolChangedRefusal is the observation the model is shown for a call not
// run because its tool changed.
func (r *Stepper) toolChangedRefusal(call *reinv1.ToolCall, c *ToolChange, then string) *reinv1.Event {
	return &reinv1.Event{Actor: "harness", Payload: &reinv1.Event_ToolRefused{ToolRefused: &reinv1.ToolRefused{
		CallId: call.GetCallId(), Tool: call.GetTool(),
		Reason: fmt.Sprintf("tool %q changed since the run was granted it (%s), so it was not run; %s", c.Tool, c.What(), then),
	}}}
}

// adoptSchema compiles again the input schema the tool lists now, for a
// grant that gives none of its own, and shows it to the model from the
// next call on.
func (r *Stepper) adoptSchema(ctx context.Context, tool string) {
	g := r.grant(tool)
	if g == nil || g.GetInputSchema() != nil {
		return
	}
	delete(r.inputSchemas, tool)
	delete(r.listedSchemas, tool)
	lctx, cancel := context.WithTimeout(ctx, r.cfg.ToolTimeout)
	defer cancel()
	specs, err := r.h.Tools().List(lctx)
	if err == nil {
		for _, sp := range specs {
			if sp.Name != tool || sp.InputSchema == nil {
				continue
			}
			if is, err := compileSchema(sp.InputSchema); err == nil {
				is.from = "the input schema its tool lists"
				r.inputSchemas[tool], r.listedSchemas[tool] = is, sp.InputSchema
			}
			break
		}
	}
	r.shownTools = r.modelTools()
}
