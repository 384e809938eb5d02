// Package replay is test replay (docs/design.md §8): a recorded run's model replies,
// tool results and people's decisions are fed, in order and on the recorded
// clock, through the current harness into an in-memory log, and the new
// events are compared with the recorded ones. No model and no tool is
// called. The first event where the two logs part is reported.
//
// Supported recordings: runs driven by the harness from start to their end
// or last pause, with people's inputs, approvals, rejections, cancels of
// paused runs and timer expiries in between. Not supported: a recording cut
// by a crash (a resumed model call, a run taken after a restart or from
// another server), a write whose outcome was unknown, and
// a cancel of a running run (its timing is the canceller's, not the log's).
package replay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/engine"
	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/policy"
	"github.com/reinhq/rein/internal/pricing"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/step"
	"github.com/reinhq/rein/internal/tools"
)

// Divergence is where the replayed log parts from the recorded one.
type Divergence struct {
	Sequence uint64
	// Expected is the recorded event; nil when the replay made more events.
	Expected *reinv1.Event
	// Got is the replayed event; nil when the replay stopped short.
	Got *reinv1.Event
	// Field is the path to the first field where the two events differ, in
	// the order their messages declare fields ("model_requested.input_hash",
	// "tool_requested.tier"); "" when one of them is missing.
	Field string
}

func (d *Divergence) Error() string {
	field := ""
	if d.Field != "" {
		field = " (first differing field: " + d.Field + ")"
	}
	return fmt.Sprintf("the runs part at sequence %d%s: expected %s, got %s", d.Sequence, field, describe(d.Expected), describe(d.Got))
}

func describe(ev *reinv1.Event) string {
	if ev == nil {
		return "no event"
	}
	return runstate.PayloadName(ev) + " " + strings.TrimSpace(fmt.Sprint(ev))
}

// Result is one run's replay.
type Result struct {
	RunID string
	// Events is how many events the recording has.
	Events int
	// Divergence is nil when every event matched.
	Divergence *Divergence
}

// Options change how a recording is replayed.
type Options struct {
	// Blobs are the recording's blobs by hash (an export's). A recording
	// whose proposals are stored apart (preview_blob, arguments_blob) needs
	// them: the replay proposes and commits the whole preview.
	Blobs map[string][]byte
	// Children are the recorded logs of the runs the recording delegated
	// to, by run ID (an export's children, rein export --tree): a replay
	// of a delegating run reads its children's results from them, as the
	// run read them from the store, and never drives them. Replay each
	// child on its own to check it.
	Children map[string][]*reinv1.Event
	// Policy, when set, are the server's policy rules to replay under
	// (rein replay --policy FILE), in place of the decisions the server's
	// rules made when the run was recorded: the first event where they
	// decide otherwise is the divergence.
	Policy *policy.Holder
}

// TreeChildren are the recorded logs of x's children, by run ID, for
// Options.Children.
func TreeChildren(x *reinv1.RunExport) map[string][]*reinv1.Event {
	if len(x.GetChildren()) == 0 {
		return nil
	}
	out := map[string][]*reinv1.Event{}
	for _, c := range x.GetChildren() {
		out[c.GetRunId()] = c.GetEvents()
	}
	return out
}

// ErrUnsupported is returned for a recording replay cannot drive.
var ErrUnsupported = errors.New("recording not supported by replay")

// Run replays one recorded run. An error means the replay could not be
// made (a malformed or unsupported recording, a log that refused what the
// harness appended, ctx done); a divergence is in Result.
//
// The run is stepped by a synchronous engine (engine.NewSync) on the
// caller's goroutine: the harness's own step code, with no driver goroutine
// to start or wait for. Its log folds every event it is given, as a store
// does, and compares it with the recorded one as it is appended.
func Run(ctx context.Context, recorded []*reinv1.Event, o Options) (Result, error) {
	if len(recorded) == 0 || recorded[0].GetRunStarted() == nil {
		return Result{}, fmt.Errorf("%w: a recording starts with run_started", ErrUnsupported)
	}
	recorded = upgrade(recorded)
	l := newRunLog(recorded, o.Blobs)
	if err := l.addChildren(o.Children); err != nil {
		return Result{}, err
	}
	rec, err := newRecording(ctx, recorded, l)
	if err != nil {
		return Result{}, err
	}
	if err := rec.check(); err != nil {
		return Result{}, err
	}
	eng := engine.NewSync(engine.Config{
		Store:  l,
		Models: func(*reinv1.ModelSpec) (model.Model, error) { return rec, nil },
		Tools:  rec,
		Clock:  rec.clock,
		Published: func(_ runstate.State, evs []*reinv1.Event) {
			rec.version = evs[len(evs)-1].GetSequence()
		},
		NewID:    rec.newID,
		Policy:   newRecordedPolicy(recorded).checker(o.Policy),
		Rates:    rec,
		NoTimers: true,
		Owner:    "replay",
		// What the server did when a tool changed under the run.
		OnToolChange: recordedAction(recorded),
		Prices:       rec.prices(),
		// A recorded retry waited; its replay does not.
		Wait: func(context.Context, time.Duration) error { return nil },
	})
	defer eng.Close()

	started := recorded[0].GetRunStarted()
	principal := strings.TrimPrefix(recorded[0].GetActor(), "principal:")
	sr := engine.StartRequest{
		RequestID: started.GetRequestId(), Contract: started.GetContract(),
		Principal: principal, Tenant: started.GetTenant(),
		TraceID: started.GetTraceId(), TraceParent: started.GetTraceParentSpanId(),
		DelegatedBy: started.GetDelegatedBy(),
	}
	if started.GetDelegatedBy() != nil && started.GetDeadline() != nil {
		// A child's deadline is its parent's, when that comes first.
		sr.Deadline = started.GetDeadline().AsTime()
	}
	if _, _, err := eng.Start(ctx, sr); err != nil {
		return Result{}, fmt.Errorf("replay run %s: start: %w", rec.runID, err)
	}
	for {
		if err := eng.StepWhileRunning(ctx, rec.runID); err != nil {
			return Result{}, fmt.Errorf("replay run %s: %w", rec.runID, err)
		}
		if err := ctx.Err(); err != nil {
			return Result{}, err // the steps stopped where ctx ended
		}
		cur := l.st
		if cur.Version >= uint64(len(recorded)) || runstate.Terminal(cur.Status) {
			break
		}
		next := recorded[cur.Version]
		acted, err := act(ctx, eng, cur, next, rec)
		if err != nil {
			return Result{}, fmt.Errorf("replay run %s at sequence %d: %w", rec.runID, next.GetSequence(), err)
		}
		if !acted {
			break // the replay stopped where the recording went on
		}
	}
	return Result{RunID: rec.runID, Events: len(recorded), Divergence: l.divergence()}, nil
}

// recordedAction is the --on-tool-change the recording was made under, as
// its events tell: fail or adopt when a tool_changed or a tool_adopted
// says so, else pause.
func recordedAction(events []*reinv1.Event) step.ToolChangeAction {
	for _, ev := range events {
		if ev.GetToolChanged().GetAction() == "fail" {
			return step.ToolChangeFail
		}
		if ev.GetToolAdopted().GetBy() == "adopt" {
			return step.ToolChangeAdopt
		}
	}
	return step.ToolChangePause
}

// act replays what a person (or a timer) did next in the recording; false
// when the next recorded event is not such an action.
func act(ctx context.Context, eng *engine.Engine, cur runstate.State, next *reinv1.Event, rec *recording) (bool, error) {
	who := strings.TrimPrefix(next.GetActor(), "principal:")
	var err error
	switch p := next.GetPayload().(type) {
	case *reinv1.Event_InputProvided:
		_, err = eng.ProvideInput(ctx, cur.RunID, p.InputProvided.GetText(), who)
	case *reinv1.Event_ApprovalDecided:
		d := p.ApprovalDecided
		_, err = eng.DecideApproval(ctx, engine.Verdict{
			RunID: cur.RunID, ProposalID: d.GetProposalId(), ProposalHash: cur.Pending.GetProposal().GetHash(),
			Approve: d.GetApproved(), Reason: d.GetReason(), EndRun: d.GetEndRun(), Principal: who,
		})
	case *reinv1.Event_ApprovalGiven:
		_, err = eng.DecideApproval(ctx, engine.Verdict{
			RunID: cur.RunID, ProposalID: p.ApprovalGiven.GetProposalId(), ProposalHash: cur.Pending.GetProposal().GetHash(),
			Approve: true, Principal: who,
		})
	case *reinv1.Event_BudgetReached:
		eng.Expire(ctx, cur.RunID)
	case *reinv1.Event_ProposalRevised:
		pr := p.ProposalRevised
		_, err = eng.DecideApproval(ctx, engine.Verdict{
			RunID: cur.RunID, ProposalID: pr.GetSupersededProposalId(), ProposalHash: cur.Pending.GetProposal().GetHash(),
			Principal: who, Arguments: rec.revisions[pr.GetProposal().GetProposalId()].GetArguments(),
		})
	case *reinv1.Event_BudgetRaised:
		br := p.BudgetRaised
		req := &reinv1.RaiseBudgetRequest{
			RunId: cur.RunID, AddSteps: br.GetAddSteps(), AddTokens: br.GetAddTokens(), AddCostUsd: br.GetAddCostUsd(),
			AddToolCalls: br.GetAddToolCalls(), ExtendDeadline: br.GetExtendDeadline(), Reason: br.GetReason(),
		}
		if cur.DelegatedBy != nil {
			// A child's raise is lent by its parent, raised at the root.
			_, err = eng.GiveLentRaise(ctx, cur.RunID, req, next.GetActor())
		} else {
			_, err = eng.RaiseBudget(ctx, req, who)
		}
	case *reinv1.Event_RunSteered:
		_, _, err = eng.Steer(ctx, cur.RunID, p.RunSteered.GetText(), p.RunSteered.GetRequestId(), who)
	case *reinv1.Event_ToolChanged, *reinv1.Event_ToolAdopted:
		// A person's approval found the pending proposal's tool changed
		// (the proposal is previewed again, or the run fails), or approved
		// a proposal previewed again (the run moves to the new definition,
		// then the approval is recorded: its reason follows).
		if cur.Status != reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL || !strings.HasPrefix(next.GetActor(), "principal:") {
			return false, nil
		}
		v := engine.Verdict{RunID: cur.RunID, ProposalID: cur.Pending.GetProposal().GetProposalId(), ProposalHash: cur.Pending.GetProposal().GetHash(),
			Approve: true, Principal: who}
		if i := int(next.GetSequence()); i < len(rec.events) {
			v.Reason = rec.events[i].GetApprovalDecided().GetReason()
		}
		_, err = eng.DecideApproval(ctx, v)
		if errors.Is(err, engine.ErrNotWaiting) {
			err = nil // the approval was refused as recorded: the proposal was not committed
		}
	case *reinv1.Event_StatusChanged:
		switch p.StatusChanged.GetTo() {
		case reinv1.RunStatus_RUN_STATUS_CANCELLED:
			_, err = eng.Cancel(ctx, cur.RunID, p.StatusChanged.GetReason(), next.GetActor())
		case reinv1.RunStatus_RUN_STATUS_EXPIRED:
			eng.Expire(ctx, cur.RunID)
		default:
			return false, nil
		}
	default:
		return false, nil
	}
	// A refused action stops the replay; the comparison says where the
	// logs part.
	return err == nil, nil
}

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

// retryError is a recorded failed attempt, replayed: retryable, with the
// recorded wait, text and reason.
type retryError struct {
	text   string
	wait   time.Duration
	reason string
}

func (e *retryError) Error() string            { return e.text }
func (e *retryError) RetryReason() string      { return e.reason }
func (e *retryError) Unwrap() error            { return model.ErrRetryable }
func (e *retryError) RetryWait() time.Duration { return e.wait }

// retryPastDeadline is the failed attempt a budget_reached records when the
// retry it asked for would have passed the run's deadline
// (retry_past_deadline), or nil.
func retryPastDeadline(br *reinv1.BudgetReached) error {
	late := br.GetRetryPastDeadline()
	if br.GetLimit() != "deadline" || late == nil {
		return nil
	}
	return &retryError{text: late.GetError(), wait: late.GetWait().AsDuration()}
}

// refusedError is a recorded refused write, replayed with its reason.
type refusedError struct{ reason string }

func (e *refusedError) Error() string { return e.reason }
func (e *refusedError) Unwrap() error { return tools.ErrRefused }

// Next implements model.Model: the reply the recording has for the step.
// A call the recording retried fails first as it did (model_retried), then
// answers.
func (r *recording) Next(ctx context.Context, req *model.Request) (*model.Reply, error) {
	i, ok := r.request(req.Step)
	if !ok || i+1 >= len(r.events) {
		return nil, fmt.Errorf("the recording has no reply for model call %d", req.Step)
	}
	attempt := r.attempts[i]
	r.attempts[i]++
	if mr := r.events[i+1].GetModelRetried(); mr != nil {
		if attempt == 0 {
			return nil, &retryError{text: mr.GetError(), wait: mr.GetWait().AsDuration(), reason: mr.GetReason()}
		}
		i++ // the answer follows the retry
		if i+1 >= len(r.events) {
			return nil, fmt.Errorf("the recording has no reply for model call %d after its retry", req.Step)
		}
		if sc := r.events[i+1].GetStatusChanged(); sc.GetTo() == reinv1.RunStatus_RUN_STATUS_FAILED {
			text := strings.TrimSuffix(strings.TrimPrefix(sc.GetError(), "the model call failed: "), " (after one retry)")
			return nil, &retryError{text: text, wait: mr.GetWait().AsDuration()}
		}
	}
	switch after := r.events[i+1]; {
	case after.GetModelReturned() != nil:
		mr := after.GetModelReturned()
		reply := &model.Reply{Decision: mr.GetDecision(), Usage: mr.GetUsage(), ResponseID: mr.GetResponseId(), FinishReason: mr.GetFinishReason()}
		if mr.GetDecision() == nil && i+2 < len(r.events) {
			reply.Raw = r.events[i+2].GetDecisionRejected().GetRaw()
		}
		return reply, nil
	case after.GetStatusChanged().GetTo() == reinv1.RunStatus_RUN_STATUS_FAILED:
		return nil, errors.New(strings.TrimPrefix(after.GetStatusChanged().GetError(), "the model call failed: "))
	case retryPastDeadline(after.GetBudgetReached()) != nil:
		// The call failed and its retry would have passed the deadline.
		return nil, retryPastDeadline(after.GetBudgetReached())
	case after.GetBudgetReached().GetLimit() == "deadline":
		<-ctx.Done() // the recorded call was cut by the run's deadline
		return nil, ctx.Err()
	}
	return nil, fmt.Errorf("the recording's model call %d has no reply", req.Step)
}

// request is the index of the recorded model_requested that the call
// being sent follows: the one the replay committed last, if it is the
// step's (a call the deadline cut is sent again, resumed, after a raise:
// one step, two requests), else the step's last.
func (r *recording) request(step uint32) (int, bool) {
	if i := int(r.version) - 1; i >= 0 && i < len(r.events) {
		for ; i >= 0; i-- {
			if mr := r.events[i].GetModelRequested(); mr != nil {
				if mr.GetStep() == step {
					return i, true
				}
				break
			}
		}
	}
	i, ok := r.steps[step]
	return i, ok
}

// CountTokens implements model.TokenCounter with the recorded count. For a
// call the recording never made (a budget stopped it), a scripted model's
// count comes from its script, as it did then; other models' from the
// harness's estimate.
func (r *recording) CountTokens(ctx context.Context, req *model.Request) (uint64, error) {
	if i, ok := r.steps[req.Step]; ok {
		return r.events[i].GetModelRequested().GetInputTokens(), nil
	}
	spec := r.events[0].GetRunStarted().GetContract().GetModel()
	if spec.GetProvider() == "script" {
		return model.NewScript(spec.GetScript()).CountTokens(ctx, req)
	}
	return 0, errors.New("no recorded count")
}

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
