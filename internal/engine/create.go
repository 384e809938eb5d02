package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/step"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/taskcontract"
	"github.com/reinhq/rein/internal/tools"
)

// ToolFlags names how a rein server is given tools, for the errors that
// refuse what no tool of the server can carry out.
const ToolFlags = "--tools fixture:FILE, --workspace DIR (the fs.* tools), --tool-server NAME=ADDR or --mcp NAME=COMMAND|URL"

// ErrToolsUnavailable refuses a start when a granted tool is not listed and
// an executor that may provide it could not list its tools (a tool server
// that is down). The server answers it with Unavailable; nothing is stored.
var ErrToolsUnavailable = errors.New("this server's tools could not all be listed")

// create is how a run comes to be, started or forked: it validates the
// contract against this engine (its tools, its checks' workspace, its
// models, its prices), records run_started (started, with the contract,
// its defaults and its deadline filled in), then the events carried over
// from a parent, and schedules the run, or arms a paused one's deadlines. A request ID the
// tenant used before returns that run with created=false, and stores
// nothing.
func (e *Engine) create(ctx context.Context, c *reinv1.TaskContract, started *reinv1.RunStarted, carried []*reinv1.Event, blobs map[string][]byte) (runstate.State, bool, error) {
	return e.createAs(ctx, "", c, started, carried, blobs)
}

// createAs is create with the run's ID chosen by the caller ("" makes a new
// one), as a delegation's child's is, and a deadline set in started kept
// when it is earlier than the contract's timeout gives (a child's is its
// parent's).
func (e *Engine) createAs(ctx context.Context, runID string, c *reinv1.TaskContract, started *reinv1.RunStarted, carried []*reinv1.Event, blobs map[string][]byte) (runstate.State, bool, error) {
	if err := taskcontract.Validate(c); err != nil {
		return runstate.State{}, false, err
	}
	if err := step.CheckWorkspace(e.cfg.Workspace, c.GetChecks()); err != nil {
		return runstate.State{}, false, err
	}
	if err := e.cfg.Policy.CheckGrants(c.GetTools()); err != nil {
		field, desc, _ := strings.Cut(err.Error(), ": ")
		return runstate.State{}, false, &taskcontract.FieldError{Field: field, Description: desc}
	}
	if _, err := e.cfg.Models(c.GetModel()); err != nil {
		return runstate.State{}, false, &taskcontract.FieldError{Field: "contract.model.provider", Description: err.Error()}
	}
	if err := e.checkPrice(c); err != nil {
		return runstate.State{}, false, err
	}
	// Last, as it may ask the tool servers.
	if err := e.checkTools(ctx, c.GetTools()); err != nil {
		return runstate.State{}, false, err
	}
	e.startDigests(ctx, c, started)
	now := e.cfg.Clock()
	started.Contract = taskcontract.WithDefaults(c)
	// A queued run's timeout counts from its start (run_admitted), unless
	// its contract counts it from the submission.
	if t := started.Contract.GetBudget().GetTimeout(); t != nil && (!started.GetQueued() || started.Contract.GetBudget().GetTimeoutFromSubmission()) {
		if d := now.Add(t.AsDuration()); started.Deadline == nil || d.Before(started.Deadline.AsTime()) {
			started.Deadline = timestamppb.New(d)
		}
	}
	if runID == "" {
		runID = e.newID("run_", now)
	}
	first := &reinv1.Event{
		RunId:      runID,
		Sequence:   1,
		RecordedAt: timestamppb.New(now),
		Actor:      "principal:" + started.GetPrincipal(),
		Payload:    &reinv1.Event_RunStarted{RunStarted: started},
	}
	st, created, err := e.cfg.Store.Create(ctx, first)
	if err != nil {
		return runstate.State{}, false, err
	}
	if created {
		e.publish(st, []*reinv1.Event{first})
		if len(carried) > 0 {
			for _, ev := range carried {
				ev.RunId = st.RunID
			}
			// The blobs the carried events reference are stored with the
			// new run, whose own they become (a store keeps a run's
			// blobs with it, and erases them with it).
			var opts []store.AppendOption
			if len(blobs) > 0 {
				opts = append(opts, store.WithBlobs(blobs))
			}
			if st, err = e.commit(ctx, st, "", carried, opts...); err != nil {
				return st, true, err
			}
		}
	}
	if st.Status == reinv1.RunStatus_RUN_STATUS_RUNNING {
		e.schedule(st.RunID)
	} else {
		e.Arm(st)
	}
	return st, created, nil
}

// checkTools refuses a contract granting a read or write tool that no
// executor of this engine lists: its first call would fail, or its write
// could never be sent. An ask_human grant runs no executor: it is a question
// for a person. When an executor's listing fails, whether the tool is
// provided cannot be told, and the start is refused as unavailable.
func (e *Engine) checkTools(ctx context.Context, grants []*reinv1.ToolGrant) error {
	var names []string
	index := map[string]int{}
	for i, g := range grants {
		if g.GetTier() == reinv1.ToolTier_TOOL_TIER_ASK_HUMAN {
			continue
		}
		names = append(names, g.GetName())
		index[g.GetName()] = i
	}
	if len(names) == 0 {
		return nil
	}
	lctx, cancel := context.WithTimeoutCause(ctx, e.cfg.ToolTimeout, e.toolTimedOut("listing"))
	defer cancel()
	missing, err := tools.Unlisted(lctx, e.executor(), names)
	switch {
	case len(missing) == 0:
		return nil
	case err != nil:
		return fmt.Errorf("%w: cannot tell whether this server provides %s: %w; nothing was stored: retry once the tool server answers",
			ErrToolsUnavailable, quoted(missing), err)
	}
	verb := "is"
	if len(missing) > 1 {
		verb = "are"
	}
	return &taskcontract.FieldError{Field: fmt.Sprintf("contract.tools[%d].name", index[missing[0]]), Description: fmt.Sprintf(
		"%s %s granted, but this server has no tool by that name: give the server the tool (%s), or remove the grant", quoted(missing), verb, ToolFlags)}
}

// quoted lists names for an error: "a", "b".
func quoted(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}

// checkPrice refuses a contract with a cost limit whose model the price
// table does not know: rein could not hold the limit.
func (e *Engine) checkPrice(c *reinv1.TaskContract) error {
	if c.GetBudget().GetMaxCostUsd() <= 0 {
		return nil
	}
	m := c.GetModel()
	if _, ok := e.cfg.Prices.Lookup(m.GetProvider(), m.GetName()); !ok {
		return &taskcontract.FieldError{Field: "contract.budget.max_cost_usd", Description: fmt.Sprintf(
			"rein has no price for model %s/%s, so it cannot hold a cost limit: add the model to the server's price file (--prices), or drop max_cost_usd; priced models: %s",
			m.GetProvider(), m.GetName(), strings.Join(e.cfg.Prices.Models(), ", "))}
	}
	return nil
}
