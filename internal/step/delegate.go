package step

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/failpoint"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/taskcontract"
)

// Delegation (docs/design.md §3, the delegate action), the step's half: a
// run whose contract allows it hands tasks to child runs. One commit stores
// the model's decision and delegation_started, which names each child's run
// ID, request ID, contract and the budget lent to it (plan, carve,
// childContract); from then on the fold counts the lent budget as
// committed, so the parent cannot spend it. The engine then creates each
// child idempotently from that event (Host.StartChildren), and each run
// holds its own budget before every paid call, as any run does: children
// racing each other cannot take the tree past the root's limits, because
// what each may spend was carved out durably before it started. While
// children are open the parent is running with no driver: a child's end
// wakes it (the engine's commit), and its next step records
// delegation_returned for each child that ended (Host.EndedChildren), with
// what it spent; the unspent rest of its loan comes back in the fold.

// DelegateTool is the name under which the delegate action is offered to a
// model, and the tool a refused delegation's tool_refused names.
const DelegateTool = "delegate"

// delegate routes the model's delegate decision: a delegation the contract
// does not allow is a refusal (an observation that cost the step, and
// nothing starts); one it allows lends each child its budget in one commit
// with the decision, then creates the children.
func (r *Stepper) delegate(ctx context.Context, d *reinv1.Delegate, returned *reinv1.Event) error {
	// The event's sequence names the children's request IDs: the decision
	// and the pending events come before it in the same commit.
	seq := r.st.Version + uint64(len(r.pending)) + 2
	children, why := r.plan(d, seq)
	if why != "" {
		return r.commit(ctx, returned, &reinv1.Event{Actor: "harness", Payload: &reinv1.Event_ToolRefused{ToolRefused: &reinv1.ToolRefused{
			Tool: DelegateTool, Reason: "the delegation was refused and no child started: " + why,
		}}})
	}
	if err := r.commit(ctx, returned, &reinv1.Event{Actor: "harness", Payload: &reinv1.Event_DelegationStarted{DelegationStarted: &reinv1.DelegationStarted{
		Children: children,
	}}}); err != nil {
		return err
	}
	failpoint.Inject(failpoint.DelegateAfterStart)
	return r.h.StartChildren(ctx, r.st, seq, children)
}

// plan turns the model's tasks into children, or says why the contract
// does not allow them.
func (r *Stepper) plan(d *reinv1.Delegate, seq uint64) ([]*reinv1.DelegatedChild, string) {
	c := r.st.Contract
	p := c.GetDelegation()
	tasks := d.GetTasks()
	switch {
	case p.GetMaxChildren() == 0 && r.st.DelegatedBy != nil:
		return nil, fmt.Sprintf("this run is a delegated child at depth %d and the tree may go no deeper: do the task yourself", r.st.DelegatedBy.GetDepth())
	case p.GetMaxChildren() == 0:
		return nil, "this run's contract does not allow delegation: do the task yourself"
	case len(tasks) == 0:
		return nil, "the delegation has no tasks: give one task per child"
	case r.st.ChildrenStarted+uint32(len(tasks)) > p.GetMaxChildren():
		return nil, fmt.Sprintf("the run may start %d children in all, has started %d, and asked for %d more", p.GetMaxChildren(), r.st.ChildrenStarted, len(tasks))
	}
	limit := r.st.Limits()
	left := limit.Sub(r.st.Committed())
	var sum runstate.Spend
	children := make([]*reinv1.DelegatedChild, 0, len(tasks))
	for i, t := range tasks {
		if strings.TrimSpace(t.GetQuestion()) == "" {
			return nil, fmt.Sprintf("task %d has no question: say what the child must find out", i)
		}
		grants, why := r.childGrants(i, t)
		if why != "" {
			return nil, why
		}
		lend, why := carve(i, t.GetBudget(), limit, left, p.GetMaxShare())
		if why != "" {
			return nil, why
		}
		sum = sum.Add(lend)
		cc := r.childContract(t, grants, lend, r.st.ChildrenStarted+uint32(i))
		if err := checkChild(r.h, cc); err != nil {
			return nil, fmt.Sprintf("task %d cannot start: %v", i, err)
		}
		children = append(children, &reinv1.DelegatedChild{
			RequestId: fmt.Sprintf("%s/delegate/%d/%d", r.st.RunID, seq, i),
			Budget:    cc.GetBudget(),
			Contract:  cc,
		})
	}
	for _, name := range []string{"max_steps", "max_tokens", "max_cost_usd", "max_tool_calls"} {
		if spendOf(limit, name) > 0 && exceeds(sum, left, name) {
			return nil, fmt.Sprintf("the tasks ask for %v of %s together and the run has %v left: ask for less, or for fewer children", spendOf(sum, name), name, spendOf(left, name))
		}
	}
	// IDs last, once nothing is refused: a replay gives back the recorded
	// ones in order.
	for _, c := range children {
		c.RunId = r.h.NewID("run_", r.now.AsTime())
	}
	return children, ""
}

// exceeds reports whether sum is over left in the named limit.
func exceeds(sum, left runstate.Spend, name string) bool {
	return spendOf(sum, name) > spendOf(left, name)+1e-12
}

func spendOf(s runstate.Spend, name string) float64 {
	switch name {
	case "max_steps":
		return float64(s.Steps)
	case "max_tokens":
		return float64(s.Tokens)
	case "max_cost_usd":
		return s.CostUSD
	}
	return float64(s.ToolCalls)
}

// carve is what task i is lent of each limit the run has: what it asks, or
// when it asks 0 the most one child may take (max_share of what is left);
// a limit the run does not set is not lent (the child gets what it asks).
// It says why when the task asks for more than one child may take.
func carve(i int, ask *reinv1.DelegatedBudget, limit, left runstate.Spend, share float64) (runstate.Spend, string) {
	var out runstate.Spend
	type dim struct {
		name      string
		max, left float64
		ask       float64
		set       func(float64)
		whole     bool
	}
	dims := []dim{
		{"max_steps", float64(limit.Steps), float64(left.Steps), float64(ask.GetMaxSteps()), func(v float64) { out.Steps = uint32(v) }, true},
		{"max_tokens", float64(limit.Tokens), float64(left.Tokens), float64(ask.GetMaxTokens()), func(v float64) { out.Tokens = uint64(v) }, true},
		{"max_cost_usd", limit.CostUSD, left.CostUSD, ask.GetMaxCostUsd(), func(v float64) { out.CostUSD = v }, false},
		{"max_tool_calls", float64(limit.ToolCalls), float64(left.ToolCalls), float64(ask.GetMaxToolCalls()), func(v float64) { out.ToolCalls = uint32(v) }, true},
	}
	for _, d := range dims {
		if d.max == 0 {
			d.set(d.ask)
			continue
		}
		most := d.left * share
		if d.whole {
			most = math.Floor(most)
		}
		if most <= 0 {
			return out, fmt.Sprintf("task %d: the run has %v of its %s left, too little to lend a child any", i, d.left, d.name)
		}
		switch {
		case d.ask == 0:
			d.set(most)
		case d.ask > most:
			return out, fmt.Sprintf("task %d asks for %v of %s; one child may take at most %v (a share of %v of the %v the run has left)", i, d.ask, d.name, most, share, d.left)
		default:
			d.set(d.ask)
		}
	}
	return out, ""
}

// childGrants are task i's tools as grants of the child: each one of the
// run's, allowed by its delegation policy, at a tier no looser than the
// run's.
func (r *Stepper) childGrants(i int, t *reinv1.DelegatedTask) ([]*reinv1.ToolGrant, string) {
	p := r.st.Contract.GetDelegation()
	var grants []*reinv1.ToolGrant
	for _, dt := range t.GetTools() {
		g := r.grant(dt.GetName())
		if g == nil {
			return nil, fmt.Sprintf("task %d asks for tool %q, which this run is not granted; a child may be given only the run's tools: %s", i, dt.GetName(), r.grantedNames())
		}
		if len(p.GetTools()) > 0 && !slices.Contains(p.GetTools(), dt.GetName()) {
			return nil, fmt.Sprintf("task %d asks for tool %q, which the run's delegation policy does not let it give a child; it may give: %s", i, dt.GetName(), strings.Join(p.GetTools(), ", "))
		}
		tier, ok := parseTier(dt.GetTier(), g.GetTier())
		if !ok {
			return nil, fmt.Sprintf("task %d asks for tool %q at tier %q, which is not a tier: give \"read\", \"write\" or \"ask_human\", or leave it empty", i, dt.GetName(), dt.GetTier())
		}
		if looser(tier, g.GetTier()) {
			return nil, fmt.Sprintf("task %d asks for tool %q at tier %s, looser than the run's %s: a child's tier may be no looser than its parent's", i, dt.GetName(), tierName(tier), tierName(g.GetTier()))
		}
		if slices.ContainsFunc(grants, func(x *reinv1.ToolGrant) bool { return x.GetName() == dt.GetName() }) {
			return nil, fmt.Sprintf("task %d asks for tool %q twice", i, dt.GetName())
		}
		grants = append(grants, &reinv1.ToolGrant{Name: g.GetName(), Description: g.GetDescription(), InputSchema: g.GetInputSchema(), Tier: tier})
	}
	return grants, ""
}

// parseTier reads a delegated tool's tier; "" is the run's own.
func parseTier(s string, own reinv1.ToolTier) (reinv1.ToolTier, bool) {
	switch strings.ToLower(s) {
	case "":
		return own, true
	case "read":
		return reinv1.ToolTier_TOOL_TIER_READ, true
	case "write":
		return reinv1.ToolTier_TOOL_TIER_WRITE, true
	case "ask_human":
		return reinv1.ToolTier_TOOL_TIER_ASK_HUMAN, true
	}
	return 0, false
}

// looser reports whether tier lets a call through with less oversight than
// own: read runs at once, where write waits for an approval and ask_human
// for a person. A write or ask_human tool given as the other is no looser
// (each waits for a person), but it is not the same tool: refused too.
func looser(tier, own reinv1.ToolTier) bool {
	if tier == own {
		return false
	}
	return !(own == reinv1.ToolTier_TOOL_TIER_READ && tier == reinv1.ToolTier_TOOL_TIER_WRITE)
}

func tierName(t reinv1.ToolTier) string {
	return strings.ToLower(strings.TrimPrefix(t.String(), "TOOL_TIER_"))
}

// childContract is a task's contract: its question as the goal with the
// evidence and completion it asks for, its inputs and files, the tools it
// was given, its lent budget with a deadline no later than the run's, the
// nth child model, and what is left of the run's delegation policy one
// level down.
func (r *Stepper) childContract(t *reinv1.DelegatedTask, grants []*reinv1.ToolGrant, lend runstate.Spend, nth uint32) *reinv1.TaskContract {
	c := r.st.Contract
	goal := t.GetQuestion()
	if e := t.GetEvidence(); e != "" {
		goal += "\n\nEvidence to bring back: " + e
	}
	if d := t.GetCompletion(); d != "" {
		goal += "\n\nDone when: " + d
	}
	var inputs *structpb.Struct
	if t.GetInputs() != nil || len(t.GetFiles()) > 0 {
		inputs = &structpb.Struct{Fields: map[string]*structpb.Value{}}
		for k, v := range t.GetInputs().GetFields() {
			inputs.Fields[k] = v
		}
		if len(t.GetFiles()) > 0 {
			files := make([]any, len(t.GetFiles()))
			for i, f := range t.GetFiles() {
				files[i] = f
			}
			l, _ := structpb.NewList(files)
			inputs.Fields["files"] = structpb.NewListValue(l)
		}
	}
	b := &reinv1.Budget{
		MaxSteps: lend.Steps, MaxTokens: lend.Tokens, MaxCostUsd: lend.CostUSD, MaxToolCalls: lend.ToolCalls,
		MaxOutputBytes: c.GetBudget().GetMaxOutputBytes(), MaxContextChars: c.GetBudget().GetMaxContextChars(),
		// A tree's budget is its root's: a child pauses at its loan as its
		// parent would, and its parent pauses for it (awaitChildren).
		OnExhausted: c.GetBudget().GetOnExhausted(), RaiseTtl: c.GetBudget().GetRaiseTtl(),
	}
	if !r.st.Deadline.IsZero() {
		b.Timeout = durationpb.New(r.st.Deadline.Sub(r.now.AsTime()))
	}
	m := c.GetModel()
	if ms := c.GetDelegation().GetChildModels(); len(ms) > 0 {
		m = ms[min(int(nth), len(ms)-1)]
	}
	out := &reinv1.TaskContract{Goal: goal, Inputs: inputs, Tools: grants, Budget: b, Model: m, Approval: c.GetApproval(), Labels: c.GetLabels()}
	if p := c.GetDelegation(); p.GetMaxDepth() > 1 {
		down := &reinv1.DelegationPolicy{MaxChildren: p.GetMaxChildren(), MaxDepth: p.GetMaxDepth() - 1, MaxShare: p.GetMaxShare(), ChildModels: p.GetChildModels()}
		// A grandchild may be given only what the child was given (and
		// the policy allows); a child given no tools gives none.
		for _, g := range grants {
			if len(p.GetTools()) == 0 || slices.Contains(p.GetTools(), g.GetName()) {
				down.Tools = append(down.Tools, g.GetName())
			}
		}
		out.Delegation = down
	}
	return out
}

// checkChild refuses a child contract the engine could not start (its
// model, its price), before anything is stored.
func checkChild(h Host, c *reinv1.TaskContract) error {
	if err := taskcontract.Validate(c); err != nil {
		return err
	}
	return h.CheckModel(c)
}

// awaitChildren records delegation_returned for each open child that has
// ended (the engine creates any that a crash left uncreated), and returns
// ErrWaiting while some are still open.
func (r *Stepper) awaitChildren(ctx context.Context) error {
	r.now = timestamppb.New(r.h.Clock())
	ended, err := r.h.EndedChildren(ctx, r.st)
	if err != nil {
		return err
	}
	// In the order they ended, one commit each at its own clock reading:
	// a replay, which finds every child ended at once, records them as the
	// run did.
	for i, ev := range ended {
		if i == 0 {
			failpoint.Inject(failpoint.DelegateBeforeReturn)
		} else {
			r.now = timestamppb.New(r.h.Clock())
		}
		if err := r.commit(ctx, ev); err != nil {
			return err
		}
	}
	if r.st.Waiting() {
		child, ok, err := r.h.PausedChild(ctx, r.st)
		if err != nil {
			return err
		}
		if ok && r.pausesAt(child.Pending.GetBudget().GetLimit()) {
			return r.pauseFor(ctx, child)
		}
		return ErrWaiting
	}
	return nil
}

// pauseFor pauses the run for child, an open child paused on the budget
// lent to it: a tree's budget is its root's, so a raise is given to the
// parent, which lends it on (engine's RaiseBudget).
func (r *Stepper) pauseFor(ctx context.Context, child runstate.State) error {
	cp := child.Pending.GetBudget()
	return r.end(ctx, reinv1.RunStatus_RUN_STATUS_NEEDS_BUDGET, "child_budget", &reinv1.StatusChanged{},
		&reinv1.Event{Actor: "harness", Payload: &reinv1.Event_BudgetReached{BudgetReached: &reinv1.BudgetReached{
			Limit: cp.GetLimit(), Detail: fmt.Sprintf("child run %s: %s", child.RunID, cp.GetDetail()),
			// The parent's pause ends with its child's: a tree nobody
			// raises ends together.
			RaiseBy: cp.GetExpiresAt(), ChildRunId: child.RunID,
		}}})
}
