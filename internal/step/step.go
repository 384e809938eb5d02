package step

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/taskcontract"
	"github.com/reinhq/rein/internal/tools"
)

// Step takes one step of docs/design.md §3, in its fixed order: budget,
// context, model call, parse, route. It reads the clock once; every event
// of the step carries that instant. It returns ErrStopped when the
// driver's context ended mid-step, ErrWaiting when the run waits for its
// children, and ErrDefect when what it committed was rejected by the fold.
func (r *Stepper) Step(ctx context.Context) error {
	// 0. A run waiting for children records those that ended, and goes on
	// only once all have; one that paused for a child's budget (pauseFor)
	// takes no step: a model call of a paused run is refused by the fold.
	if r.st.Waiting() {
		if err := r.awaitChildren(ctx); err != nil {
			return err
		}
		if !r.Running() {
			return nil
		}
	}
	now := r.h.Clock()
	r.now = timestamppb.New(now)
	c := r.st.Contract

	// 1. Budget check: no model call is paid for past a limit.
	if limit, detail := r.budgetHit(now); limit != "" {
		return r.exhaust(ctx, limit, detail)
	}

	// 2. Build the context. A call whose reply was lost in a crash is sent
	// again as the same step, and its model_requested says so.
	resumed := r.st.ModelInFlight
	step := r.st.Steps + 1
	if resumed {
		step = r.st.Steps
	}
	if !resumed {
		if cc := r.transcript.compaction(step); cc != nil {
			r.later(&reinv1.Event{Actor: "harness", Payload: &reinv1.Event_ContextCompacted{ContextCompacted: cc}})
		}
		// People's messages recorded since the last call go into this
		// one's context, after any compaction, as a rebuilt transcript
		// has them (transcript.deliver).
		r.transcript.deliver()
	}
	req := &model.Request{
		RunID:      r.st.RunID,
		Step:       step,
		Goal:       c.GetGoal(),
		Inputs:     c.GetInputs(),
		Tools:      r.shownTools,
		Transcript: r.transcript.turns,
		Delegate:   c.GetDelegation().GetMaxChildren() > 0,
	}
	req.Cache = r.cache()
	// Counted by the model where it can, else estimated from what the
	// provider reported of the previous call (the first call has no report:
	// its estimate can be low).
	input := r.transcript.estimateTokens()
	if tc, ok := r.model.(model.TokenCounter); ok {
		n, err := tc.CountTokens(ctx, req)
		if err == nil {
			input = n
		}
	}
	if max := r.st.Limits().Tokens; max > 0 {
		// Its own spend, its children's, and what it lent to open ones.
		used := r.st.Committed().Tokens
		if used+input >= max {
			return r.exhaustBefore(ctx, "max_tokens", fmt.Sprintf(
				"the next model call needs about %d input tokens and %d of the run's %d tokens are left", input, max-used, max),
				&reinv1.BudgetReached{NextCallTokens: input + 1})
		}
		req.MaxOutputTokens = max - used - input
	}
	if m := uint64(c.GetModel().GetMaxOutputTokens()); m > 0 && (req.MaxOutputTokens == 0 || m < req.MaxOutputTokens) {
		req.MaxOutputTokens = m
	}
	maxCost, limit, detail := r.capCost(req, input, now)
	if limit != "" {
		p, _ := r.price()
		return r.exhaustBefore(ctx, limit, detail, &reinv1.BudgetReached{NextCallCostUsd: r.callCost(p, req, input, 1, now)})
	}

	// 3. Call the model, recorded durably before it is sent, once the
	// shared rate limits let it go.
	mr := &reinv1.ModelRequested{
		Step:            req.Step,
		InputTokens:     input,
		MaxOutputTokens: req.MaxOutputTokens,
		Model:           r.modelName,
		PromptVersion:   promptVersion,
		ToolSetHash:     r.toolHash,
		Resumed:         resumed,
		MaxCostUsd:      maxCost,
		Price:           r.modelPrice(),
	}
	mr.PrefixBytes, mr.PrefixTokens = r.transcript.prefix(resumed)
	if req.Cache != nil {
		mr.CacheBreakpoints, mr.CacheTtl = r.transcript.breakpoints(), durationpb.New(req.Cache.TTL)
	}
	reserved, waited, err := r.throttle(ctx, mr, input, req.MaxOutputTokens)
	if errors.Is(err, errThrottledPastDeadline) {
		return r.exhaust(ctx, "deadline", fmt.Sprintf("%v (%s)", err, r.st.Deadline.Format(time.RFC3339)))
	} else if err != nil {
		return err
	}
	mr.CarriedBlobs, mr.InputBlobs = r.transcript.newInput()
	mr.InputHash = r.transcript.inputHash()
	if err := r.commit(ctx, &reinv1.Event{Actor: "harness", Payload: &reinv1.Event_ModelRequested{ModelRequested: mr}}); err != nil {
		r.settle(ctx, reserved, 0, true)
		if errors.Is(err, errRestep) {
			return nil // messages came in: the step starts again with them
		}
		return err
	}
	r.call = OutputCall{Requested: r.st.Version, Step: req.Step, Resumed: resumed}
	mctx := ctx
	if !r.st.Deadline.IsZero() {
		// The deadline is on the run's clock, which may not be the wall
		// clock (a replay runs on the recorded one): cut the call after the
		// time left on it.
		var cancel context.CancelFunc
		mctx, cancel = context.WithTimeout(ctx, r.st.Deadline.Sub(now.Add(waited)))
		defer cancel()
	}
	reply, took, outcome, err := r.callModel(ctx, mctx, req, now)
	if reply != nil {
		r.settle(ctx, reserved, runstate.UsageTokens(reply.Usage), false)
	}
	if err != nil {
		switch outcome {
		case callStopped:
			return ErrStopped
		case callStore:
			return err
		case callDeadline:
			return r.exhaustDeadline(ctx, fmt.Sprintf("the model call was cut by the run's deadline %s: %v", r.st.Deadline.Format(time.RFC3339), err), err)
		}
		return r.end(ctx, reinv1.RunStatus_RUN_STATUS_FAILED, "model_error", &reinv1.StatusChanged{
			Error: fmt.Sprintf("the model call failed: %v", err),
		})
	}
	usage := reply.Usage
	if usage == nil {
		// The provider reported no usage (a compatible server that
		// streams without it): the call is counted at rein's estimate, so
		// that no limit is passed unseen.
		usage = &reinv1.Usage{InputTokens: input, OutputTokens: estimateOutput(reply)}
	}
	reply.Decision = identify(reply.Decision, r.st.RunID, req.Step, r.transcript.callIDs)
	price, _ := r.price()
	returned := &reinv1.Event{Actor: "model", Payload: &reinv1.Event_ModelReturned{ModelReturned: &reinv1.ModelReturned{
		Decision: reply.Decision, Usage: usage,
		CostUsd:  price.Bill(usage.GetInputTokens(), usage.GetCacheWriteInputTokens(), usage.GetCacheReadInputTokens(), usage.GetOutputTokens()),
		Duration: durationpb.New(took), ResponseId: reply.ResponseID, FinishReason: reply.FinishReason,
	}}}

	// 4. Parse: a reply that is not a valid decision is an observation. A
	// decision too large to record is refused unrecorded.
	problem := invalid(reply)
	if problem == "" {
		// Encoded once: the size checked is that of the bytes the
		// transcript keeps of the decision once it is recorded.
		if n := r.transcript.marshalDecision(reply.Decision, MaxDecisionBytes); n > MaxDecisionBytes {
			problem = fmt.Sprintf("the decision is %d bytes, over the %d rein records; nothing ran: make a large write in parts (such as fs.write of a smaller file, then fs.patch)", n, MaxDecisionBytes)
			returned.GetModelReturned().Decision = nil
		}
	}
	if problem != "" {
		return r.commit(ctx, returned, &reinv1.Event{Actor: "harness", Payload: &reinv1.Event_DecisionRejected{DecisionRejected: &reinv1.DecisionRejected{
			Raw: CutText(reply.Raw, MaxInlineText), Error: problem,
		}}})
	}

	// 5. Route.
	switch a := reply.Decision.GetAction().(type) {
	case *reinv1.Decision_FinalAnswer:
		if len(c.GetChecks()) > 0 {
			return r.finish(ctx, a.FinalAnswer, returned)
		}
		return r.end(ctx, reinv1.RunStatus_RUN_STATUS_COMPLETED, "final_answer", &reinv1.StatusChanged{Result: a.FinalAnswer}, returned)
	case *reinv1.Decision_AskHuman:
		return r.ask(ctx, &reinv1.Question{Text: a.AskHuman.GetQuestion()}, returned)
	case *reinv1.Decision_ToolCall:
		return r.route(ctx, a.ToolCall, returned)
	case *reinv1.Decision_Delegate:
		return r.delegate(ctx, a.Delegate, returned)
	}
	return fmt.Errorf("%w: decision %T passed validation but has no route", ErrDefect, reply.Decision.GetAction())
}

// budgetHit names the first limit the run has reached at now, or "".
func (r *Stepper) budgetHit(now time.Time) (limit, detail string) { return LimitReached(r.st, now) }

// LimitReached names the first limit of its budget a run has reached at
// now, with a sentence for a person, or "": its limits are the contract's
// plus what people raised them by (runstate.State.Limits). A model call in
// flight (one a crash or the deadline cut, to be sent again) is counted
// in the steps made but is not one more to make.
func LimitReached(st runstate.State, now time.Time) (limit, detail string) {
	lim, used := st.Limits(), st.Committed()
	steps := used.Steps
	if st.ModelInFlight && steps > 0 {
		steps--
	}
	switch {
	case steps >= lim.Steps:
		return "max_steps", fmt.Sprintf("the run made %d of its %d model calls", used.Steps, lim.Steps)
	case lim.ToolCalls > 0 && used.ToolCalls >= lim.ToolCalls:
		return "max_tool_calls", fmt.Sprintf("the run made %d of its %d tool calls", used.ToolCalls, lim.ToolCalls)
	case lim.Tokens > 0 && used.Tokens >= lim.Tokens:
		return "max_tokens", fmt.Sprintf("the run used %d of its %d tokens", used.Tokens, lim.Tokens)
	case lim.CostUSD > 0 && used.CostUSD >= lim.CostUSD:
		return "max_cost_usd", fmt.Sprintf("the run spent $%.6f of its $%.6f", used.CostUSD, lim.CostUSD)
	case !st.Deadline.IsZero() && !now.Before(st.Deadline):
		return "deadline", "the run's deadline " + st.Deadline.Format(time.RFC3339) + " has passed"
	}
	return "", ""
}

// invalid says why a reply is not a decision rein can route, or "".
func invalid(reply *model.Reply) string {
	d := reply.Decision
	if d == nil {
		return "the reply is not a decision: expected one tool call, a final answer, or a question for a person"
	}
	switch a := d.GetAction().(type) {
	case nil:
		return "the decision is empty: set tool_call, final_answer or ask_human"
	case *reinv1.Decision_ToolCall:
		if a.ToolCall.GetTool() == "" {
			return "tool_call.tool is empty: name the tool to call"
		}
	case *reinv1.Decision_AskHuman:
		if a.AskHuman.GetQuestion() == "" {
			return "ask_human.question is empty: say what you need to know"
		}
	case *reinv1.Decision_Delegate:
		if len(a.Delegate.GetTasks()) == 0 {
			return "delegate.tasks is empty: give one task per child"
		}
	}
	return ""
}

// route runs a tool call as its grant's tier says, once its arguments
// match the tool's input schema.
func (r *Stepper) route(ctx context.Context, call *reinv1.ToolCall, returned *reinv1.Event) error {
	grant := r.grant(call.GetTool())
	if grant == nil {
		return r.commit(ctx, returned, &reinv1.Event{Actor: "harness", Payload: &reinv1.Event_ToolRefused{ToolRefused: &reinv1.ToolRefused{
			CallId: call.GetCallId(), Tool: call.GetTool(),
			Reason: fmt.Sprintf("tool %q is not granted to this run, so it was not run; the granted tools are: %s",
				call.GetTool(), r.grantedNames()),
		}}})
	}
	// The tool's definition is checked before anything of the call: its
	// schema may be the one that changed.
	evs := []*reinv1.Event{returned}
	if grant.GetTier() != reinv1.ToolTier_TOOL_TIER_ASK_HUMAN {
		var handled bool
		var err error
		if evs, handled, err = r.checkTool(ctx, call, evs); handled {
			return err
		}
	}
	if why := r.inputSchemas[call.GetTool()].mismatch(call.GetTool(), call.GetArguments()); why != "" {
		return r.commit(ctx, append(evs, &reinv1.Event{Actor: "harness", Payload: &reinv1.Event_ToolRefused{ToolRefused: &reinv1.ToolRefused{
			CallId: call.GetCallId(), Tool: call.GetTool(), Reason: why,
		}}})...)
	}
	tier := grant.GetTier()
	if tier == reinv1.ToolTier_TOOL_TIER_ASK_HUMAN {
		return r.ask(ctx, &reinv1.Question{Text: questionText(call.GetArguments()), CallId: call.GetCallId()}, evs...)
	}
	// The policies decide before the call is routed; what they decided is
	// recorded with the call, so a resumed call is routed the same way.
	if pd := r.decidePolicy(ctx, grant, call); pd != nil {
		evs = append(evs, &reinv1.Event{Actor: "harness", Payload: &reinv1.Event_PolicyDecided{PolicyDecided: pd}})
		if pd.GetEffect() == reinv1.PolicyEffect_POLICY_EFFECT_DENY {
			return r.commit(ctx, append(evs, &reinv1.Event{Actor: "harness", Payload: &reinv1.Event_ToolRefused{ToolRefused: &reinv1.ToolRefused{
				CallId: call.GetCallId(), Tool: call.GetTool(), Reason: denied(pd),
			}}})...)
		}
	}
	evs = append(evs, &reinv1.Event{Actor: "harness", Payload: &reinv1.Event_ToolRequested{ToolRequested: &reinv1.ToolRequested{
		CallId: call.GetCallId(), Tool: call.GetTool(), Arguments: call.GetArguments(), Tier: tier,
	}}})
	if err := r.commit(ctx, evs...); err != nil {
		return err
	}
	return r.runCall(ctx, call, tier)
}

// runCall runs a requested call (its tool_requested is stored): a read
// runs and its result waits to share the next commit; a write is proposed
// and the run pauses for approval. Both operations are free of side
// effects, so a call left open by a crash is run again the same way. The
// call is cut by the tool timeout or the run's deadline, whichever comes
// first, and returns when the driver stops even if the tool does not.
func (r *Stepper) runCall(ctx context.Context, call *reinv1.ToolCall, tier reinv1.ToolTier) error {
	tc := tools.Call{RunID: r.st.RunID, CallID: call.GetCallId(), Tool: call.GetTool(), Args: call.GetArguments(),
		Index: int(r.st.CallsByTool[call.GetTool()]) - 1}
	timeout, cause := r.cfg.ToolTimeout, r.toolTimedOut
	if dl := r.st.Deadline; !dl.IsZero() && dl.Sub(r.now.AsTime()) < timeout {
		// On the run's clock, as for the model call.
		timeout = dl.Sub(r.now.AsTime())
		cause = fmt.Errorf("the call was cut by the run's deadline %s", dl.Format(time.RFC3339))
	}
	// Each call's timer, and the goroutine Await runs it in, are what two
	// guarantees cost: a tool is cut at its timeout, and one that ignores
	// its context holds nothing up.
	tctx, cancel := context.WithTimeoutCause(ctx, timeout, cause)
	defer cancel()
	pd := r.policyOf(call)
	if tier != reinv1.ToolTier_TOOL_TIER_WRITE && pd.GetEffect() == reinv1.PolicyEffect_POLICY_EFFECT_ASK {
		// A read a policy paused runs only once approved.
		return r.propose(ctx, call, askPreview(call), reinv1.ToolTier_TOOL_TIER_READ, pd)
	}
	if tier == reinv1.ToolTier_TOOL_TIER_WRITE {
		start := time.Now()
		preview, err := Await(tctx, r.cfg.Sync, func(ctx context.Context) (*structpb.Value, error) { return r.h.Tools().Propose(ctx, tc) })
		if ctx.Err() != nil {
			r.later(r.toolResult(call, nil, errInterrupted, 0))
			return ErrStopped
		}
		if err != nil {
			r.later(r.toolResult(call, nil, fmt.Errorf("the write could not be proposed, and nothing was written: %w", err), time.Since(start)))
			return nil
		}
		return r.propose(ctx, call, preview, 0, pd)
	}
	start := time.Now()
	out, err := Await(tctx, r.cfg.Sync, func(ctx context.Context) (*structpb.Value, error) { return r.h.Tools().Read(ctx, tc) })
	if ctx.Err() != nil {
		r.later(r.toolResult(call, nil, errInterrupted, 0))
		return ErrStopped
	}
	r.later(r.toolResult(call, out, err, time.Since(start)))
	return nil
}

// Await returns call(ctx)'s result, or ctx's cause as soon as ctx ends,
// whether or not call has returned: a tool that ignores its context holds
// neither the driver nor a cancel or a shutdown waiting for it. An
// abandoned call goes on in its goroutine until it returns, and its result
// is dropped. With inline (a synchronous engine's runs, stepped on the
// caller's goroutine: a replay, whose tools answer from the recording at
// once, and no cancel or shutdown waits on a driver), call runs on the
// caller's goroutine: a goroutine and its wake-up for every call were a
// seventh of a replayed step.
func Await[T any](ctx context.Context, inline bool, call func(context.Context) (T, error)) (T, error) {
	if inline {
		if ctx.Err() != nil {
			var zero T
			return zero, context.Cause(ctx)
		}
		return call(ctx)
	}
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := call(ctx)
		done <- result{v, err}
	}()
	select {
	case res := <-done:
		return res.v, res.err
	case <-ctx.Done():
		var zero T
		return zero, context.Cause(ctx)
	}
}

// propose stores a write's proposal (or, with tier read, a read's a
// policy paused) and pauses the run for approval; or, when the step's
// policy decision pd allows the write, approves it in the same commit and
// dispatches it, for the engine to commit.
func (r *Stepper) propose(ctx context.Context, call *reinv1.ToolCall, preview *structpb.Value, tier reinv1.ToolTier, pd *reinv1.PolicyDecided) error {
	allowed := pd.GetEffect() == reinv1.PolicyEffect_POLICY_EFFECT_ALLOW
	p := &reinv1.Proposal{
		ProposalId: r.h.NewID("prop_", r.now.AsTime()),
		Tool:       call.GetTool(),
		Arguments:  call.GetArguments(),
		Preview:    preview,
		ExpiresAt:  timestamppb.New(r.now.AsTime().Add(r.st.Contract.GetApproval().GetProposalTtl().AsDuration())),
		RunVersion: r.st.Version,
		CallId:     call.GetCallId(),
		Tier:       tier,
	}
	if !allowed {
		p.Approvals = approvalsFor(r.grant(call.GetTool()), pd)
	}
	if pd != nil {
		p.PolicyRule, p.PolicyMessage = pd.GetRule(), pd.GetMessage()
	}
	// A preview or arguments too large to carry inline go to blobs stored
	// with the approval_requested; the hash binds them by their blob hash.
	r.blobs = InlineProposal(p)
	p.Hash = ProposalHash(p)
	if allowed {
		return r.commit(ctx, append([]*reinv1.Event{
			{Actor: "harness", Payload: &reinv1.Event_ApprovalRequested{ApprovalRequested: &reinv1.ApprovalRequested{Proposal: p}}},
			{Actor: "harness", Payload: &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{
				From: r.st.Status, To: reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL, Reason: runstate.ReasonWriteAllowed,
			}}},
		}, policyApproval(p, pd)...)...)
	}
	return r.end(ctx, reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL, "write_proposed", &reinv1.StatusChanged{},
		&reinv1.Event{Actor: "harness", Payload: &reinv1.Event_ApprovalRequested{ApprovalRequested: &reinv1.ApprovalRequested{Proposal: p}}})
}

// ask pauses the run for a person's input.
func (r *Stepper) ask(ctx context.Context, q *reinv1.Question, evs ...*reinv1.Event) error {
	return r.end(ctx, reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT, "question", &reinv1.StatusChanged{}, append(evs,
		&reinv1.Event{Actor: "harness", Payload: &reinv1.Event_InputRequested{InputRequested: &reinv1.InputRequested{Question: q}}})...)
}

// exhaust ends the run as budget_exhausted, naming the limit; or, when
// its contract says so (budget.on_exhausted) and a raise can lift the
// limit, pauses it as needs_budget until a person raises it or the pause's
// raise_ttl runs out.
func (r *Stepper) exhaust(ctx context.Context, limit, detail string) error {
	return r.exhaustBefore(ctx, limit, detail, &reinv1.BudgetReached{})
}

// exhaustBefore is exhaust for a limit the next model call would pass:
// br says what that call needs (next_call_tokens, next_call_cost_usd), so
// a raise leaves room for it.
func (r *Stepper) exhaustBefore(ctx context.Context, limit, detail string, br *reinv1.BudgetReached) error {
	br.Limit, br.Detail = limit, detail
	if r.pausesAt(limit) {
		br.RaiseBy = timestamppb.New(r.now.AsTime().Add(RaiseTTL(r.st.Contract)))
		return r.end(ctx, reinv1.RunStatus_RUN_STATUS_NEEDS_BUDGET, limit, &reinv1.StatusChanged{},
			&reinv1.Event{Actor: "harness", Payload: &reinv1.Event_BudgetReached{BudgetReached: br}})
	}
	// Ending, the run needs no room for a call: recorded as it always was.
	br.NextCallTokens, br.NextCallCostUsd = 0, 0
	return r.end(ctx, reinv1.RunStatus_RUN_STATUS_BUDGET_EXHAUSTED, limit, &reinv1.StatusChanged{},
		&reinv1.Event{Actor: "harness", Payload: &reinv1.Event_BudgetReached{BudgetReached: br}})
}

// pausesAt reports whether the run pauses for a raise at limit: its
// contract says so, and a raise can lift the limit (a cost limit on a
// model with no price cannot be).
func (r *Stepper) pausesAt(limit string) bool {
	if r.st.Contract.GetBudget().GetOnExhausted() != reinv1.BudgetAction_BUDGET_ACTION_PAUSE {
		return false
	}
	if limit == "max_cost_usd" {
		_, priced := r.price()
		return priced
	}
	return true
}

// RaiseTTL is how long a run of contract c paused on its budget waits for
// a raise: its budget.raise_ttl, else its approval.proposal_ttl.
func RaiseTTL(c *reinv1.TaskContract) time.Duration {
	if d := c.GetBudget().GetRaiseTtl(); d != nil {
		return d.AsDuration()
	}
	if d := c.GetApproval().GetProposalTtl(); d != nil {
		return d.AsDuration()
	}
	return taskcontract.DefaultProposalTTL
}

// end commits evs and a status change to status.
func (r *Stepper) end(ctx context.Context, status reinv1.RunStatus, reason string, sc *reinv1.StatusChanged, evs ...*reinv1.Event) error {
	sc.From, sc.To, sc.Reason = r.st.Status, status, reason
	evs = append(evs, &reinv1.Event{Actor: "harness", Payload: &reinv1.Event_StatusChanged{StatusChanged: sc}})
	return r.commit(ctx, evs...)
}

// errInterrupted is the result of a tool call cut short because the run's
// driver stopped (a cancel or a shutdown).
var errInterrupted = errors.New("the call was interrupted because the run stopped; its result is unknown")

// later keeps an event of this step to share a commit with the next one.
// The model sees it at once: the next call's context includes it.
func (r *Stepper) later(ev *reinv1.Event) {
	ev.RecordedAt = r.now
	r.pending = append(r.pending, ev)
	r.transcript.observe(ev, r.st.Version+uint64(len(r.pending)))
}

// toolResult is the tool_returned observation of a call, cut to the
// contract's max_output_bytes; took is how long the tool took (0 when it
// did not answer).
func (r *Stepper) toolResult(call *reinv1.ToolCall, out *structpb.Value, err error, took time.Duration) *reinv1.Event {
	tr := &reinv1.ToolReturned{CallId: call.GetCallId(), Tool: call.GetTool()}
	if took > 0 {
		tr.Duration = durationpb.New(took)
	}
	if err != nil {
		tr.Error = CutText(err.Error(), MaxInlineText)
	} else {
		full := valueText(out)
		tr.OutputBytes = uint64(len(full))
		if max := r.st.Contract.GetBudget().GetMaxOutputBytes(); uint64(len(full)) > max {
			cut := full[:max]
			for len(cut) > 0 && !utf8.ValidString(cut) {
				cut = cut[:len(cut)-1]
			}
			tr.Output, tr.Truncated = structpb.NewStringValue(cut), true
		} else {
			tr.Output = out
		}
	}
	return &reinv1.Event{Actor: "tool:" + call.GetTool(), Payload: &reinv1.Event_ToolReturned{ToolReturned: tr}}
}

func (r *Stepper) grant(name string) *reinv1.ToolGrant {
	for _, g := range r.st.Contract.GetTools() {
		if g.GetName() == name {
			return g
		}
	}
	return nil
}

func (r *Stepper) grantedNames() string {
	var names []string
	for _, g := range r.st.Contract.GetTools() {
		names = append(names, g.GetName())
	}
	if len(names) == 0 {
		return "(none)"
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// questionText is the question an ask_human-tier tool call carries: its
// "question" argument, or its arguments as JSON.
func questionText(args *structpb.Struct) string {
	if q, ok := args.GetFields()["question"]; ok && q.GetStringValue() != "" {
		return q.GetStringValue()
	}
	b, _ := json.Marshal(args.AsMap())
	return string(b)
}

// estimateOutput is the tokens of a reply whose provider reported none,
// estimated as the transcript's tokens are: four bytes a token.
func estimateOutput(reply *model.Reply) uint64 {
	return bytesTokens(len(reply.Raw) + proto.Size(reply.Decision))
}
