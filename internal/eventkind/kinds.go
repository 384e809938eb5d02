package eventkind

import (
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/attribute"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/runstate"
)

// kinds declares every payload of the Event oneof, in the proto's order. A
// new kind is declared here; eventkind_test.go fails until it is, and until
// the console's formatter (web/src/format.ts) knows it too.
var kinds = [...]Kind{
	{
		Name: "run_started",
		Summary: func(ev *reinv1.Event) string {
			c := ev.GetRunStarted().GetContract()
			return fmt.Sprintf("goal %q, %d tools", c.GetGoal(), len(c.GetTools()))
		},
		Tone:       tone(Plain),
		Span:       noSpan, // the run's first stretch opens on any event
		Metric:     Metric{Counts: RunStart},
		Transcript: unread, // the transcript's head is the contract itself
	},
	{
		Name: "model_requested",
		Summary: func(ev *reinv1.Event) string {
			mr := ev.GetModelRequested()
			s := fmt.Sprintf("step %d, %s, ~%d input tokens", mr.GetStep(), mr.GetModel(), mr.GetInputTokens())
			if p := mr.GetPrefixBytes(); p > 0 {
				s += fmt.Sprintf(", begins with %d bytes of the last call's input", p)
			}
			if mr.GetResumed() {
				s += ", sent again: the call before it was cut by a crash"
			}
			return s
		},
		Tone:       tone(Plain),
		Span:       Span{Call: ModelCallStart},
		Metric:     Metric{Counts: Step},
		Transcript: Transcript{Role: Request},
	},
	{
		Name: "model_returned",
		Summary: func(ev *reinv1.Event) string {
			mr := ev.GetModelReturned()
			var notes []string
			if c := mr.GetCostUsd(); c > 0 {
				notes = append(notes, fmt.Sprintf("$%.6f", c))
			}
			if d := TookText(mr.GetDuration()); d != "" {
				notes = append(notes, d)
			}
			if f := mr.GetFinishReason(); f != "" {
				notes = append(notes, f)
			}
			if len(notes) == 0 {
				return decisionText(mr.GetDecision())
			}
			return fmt.Sprintf("%s (%s)", decisionText(mr.GetDecision()), strings.Join(notes, ", "))
		},
		Tone:       tone(Plain),
		Span:       Span{Call: ModelCallEnd},
		Metric:     Metric{Counts: ModelCall},
		Transcript: Transcript{Role: Reply},
	},
	{
		Name:    "decision_rejected",
		Summary: func(ev *reinv1.Event) string { return ev.GetDecisionRejected().GetError() },
		Tone:    tone(Alert),
		Span:    Span{Call: NoCall, Event: "rein.decision_rejected"},
		Metric:  Metric{Counts: Uncounted},
		Transcript: observed(func(ev *reinv1.Event) *model.Observation {
			return &model.Observation{Source: "harness", Text: "Your reply was not a valid decision and nothing ran: " + ev.GetDecisionRejected().GetError() +
				". Reply with exactly one tool call, a final answer, or a question for a person."}
		}),
	},
	{
		Name:       "tool_requested",
		Summary:    func(ev *reinv1.Event) string { return ev.GetToolRequested().GetTool() },
		Tone:       tone(Plain),
		Span:       Span{Call: ToolCallStart},
		Metric:     Metric{Counts: Uncounted}, // counted when it returns
		Transcript: unread,                    // the model read its own decision
	},
	{
		Name: "tool_refused",
		Summary: func(ev *reinv1.Event) string {
			tr := ev.GetToolRefused()
			return tr.GetTool() + ": " + tr.GetReason()
		},
		Tone: tone(Alert),
		Span: Span{Call: NoCall, Event: "rein.tool_refused", Attributes: func(ev *reinv1.Event) []attribute.KeyValue {
			tr := ev.GetToolRefused()
			return []attribute.KeyValue{attribute.String("gen_ai.tool.name", tr.GetTool()), attribute.String("gen_ai.tool.call.id", tr.GetCallId())}
		}},
		Metric: Metric{Counts: ToolRefusal},
		Transcript: observed(func(ev *reinv1.Event) *model.Observation {
			tr := ev.GetToolRefused()
			return &model.Observation{Source: "harness", CallID: tr.GetCallId(), Text: tr.GetReason()}
		}),
	},
	{
		Name: "tool_returned",
		Summary: func(ev *reinv1.Event) string {
			tr := ev.GetToolReturned()
			took := ""
			if d := TookText(tr.GetDuration()); d != "" {
				took = ", " + d
			}
			if e := tr.GetError(); e != "" {
				if took != "" {
					return fmt.Sprintf("%s error (%s): %s", tr.GetTool(), took[2:], e)
				}
				return tr.GetTool() + " error: " + e
			}
			cut := ""
			if tr.GetTruncated() {
				cut = ", cut"
			}
			return fmt.Sprintf("%s (%d bytes%s%s)", tr.GetTool(), tr.GetOutputBytes(), cut, took)
		},
		Tone:   tone(Plain),
		Span:   Span{Call: ToolCallEnd},
		Metric: Metric{Counts: ToolCall},
		Transcript: observed(func(ev *reinv1.Event) *model.Observation {
			tr := ev.GetToolReturned()
			text := tr.GetError()
			if text != "" {
				text = "error: " + text
			} else {
				text = ValueText(tr.GetOutput())
			}
			if tr.GetTruncated() {
				text += fmt.Sprintf("\n[output cut: %d bytes of %d shown; ask for less, such as a narrower query or a range, to see the rest]",
					len(ValueText(tr.GetOutput())), tr.GetOutputBytes())
			}
			return &model.Observation{Source: "tool:" + tr.GetTool(), CallID: tr.GetCallId(), Text: text}
		}),
	},
	{
		Name: "approval_requested",
		Summary: func(ev *reinv1.Event) string {
			pr := ev.GetApprovalRequested().GetProposal()
			return fmt.Sprintf("%s %s, hash %.12s…", pr.GetTool(), pr.GetProposalId(), pr.GetHash())
		},
		Tone: tone(Waiting),
		Span: Span{Call: NoCall, Event: "rein.approval_requested", Attributes: func(ev *reinv1.Event) []attribute.KeyValue {
			pr := ev.GetApprovalRequested().GetProposal()
			return []attribute.KeyValue{attribute.String("gen_ai.tool.name", pr.GetTool()), attribute.String("rein.proposal.id", pr.GetProposalId())}
		}},
		Metric:     Metric{Counts: ApprovalAsked},
		Transcript: unread,
	},
	{
		Name: "approval_decided",
		Summary: func(ev *reinv1.Event) string {
			d := ev.GetApprovalDecided()
			verdict := "approved"
			if !d.GetApproved() {
				verdict = "rejected"
				if d.GetEndRun() {
					verdict = "rejected, run ended"
				}
			}
			return fmt.Sprintf("%s %s by %s %s", d.GetProposalId(), verdict, ev.GetActor(), quoteIf(d.GetReason()))
		},
		Tone: tone(Plain),
		Span: Span{Call: NoCall, Event: "rein.approval_decided", Attributes: func(ev *reinv1.Event) []attribute.KeyValue {
			d := ev.GetApprovalDecided()
			return []attribute.KeyValue{attribute.String("rein.proposal.id", d.GetProposalId()), attribute.Bool("rein.approved", d.GetApproved()),
				attribute.String("rein.actor", ev.GetActor())}
		}},
		Metric: Metric{Counts: ApprovalDecided},
		Transcript: observed(func(ev *reinv1.Event) *model.Observation {
			d := ev.GetApprovalDecided()
			if d.GetApproved() {
				return nil
			}
			return &model.Observation{Source: "person", Text: "The proposed write was rejected and did not happen. Reason: " + d.GetReason()}
		}),
	},
	{
		Name: "input_requested",
		Summary: func(ev *reinv1.Event) string {
			return fmt.Sprintf("%q", ev.GetInputRequested().GetQuestion().GetText())
		},
		Tone:       tone(Waiting),
		Span:       Span{Call: NoCall, Event: "rein.input_requested"},
		Metric:     Metric{Counts: Uncounted},
		Transcript: unread,
	},
	{
		Name: "input_provided",
		Summary: func(ev *reinv1.Event) string {
			return fmt.Sprintf("%q by %s", ev.GetInputProvided().GetText(), ev.GetActor())
		},
		Tone: tone(Plain),
		Span: Span{Call: NoCall, Event: "rein.input_provided", Attributes: func(ev *reinv1.Event) []attribute.KeyValue {
			return []attribute.KeyValue{attribute.String("rein.actor", ev.GetActor())}
		}},
		Metric: Metric{Counts: Uncounted},
		Transcript: observed(func(ev *reinv1.Event) *model.Observation {
			return &model.Observation{Source: "person", Text: ev.GetInputProvided().GetText()}
		}),
	},
	{
		Name:    "write_dispatched",
		Summary: func(ev *reinv1.Event) string { return "operation " + ev.GetWriteDispatched().GetOperationId() },
		Tone:    tone(Plain),
		Span: Span{Call: NoCall, Event: "rein.write_dispatched", Attributes: func(ev *reinv1.Event) []attribute.KeyValue {
			return []attribute.KeyValue{attribute.String("rein.proposal.id", ev.GetWriteDispatched().GetProposalId())}
		}},
		Metric:     Metric{Counts: Uncounted}, // counted by its outcome
		Transcript: unread,
	},
	{
		Name: "write_committed",
		Summary: func(ev *reinv1.Event) string {
			wc := ev.GetWriteCommitted()
			s := "operation " + wc.GetOperationId() + ", receipt " + jsonText(wc.GetReceipt())
			if d := TookText(wc.GetDuration()); d != "" {
				s += ", in " + d
			}
			return s
		},
		Tone: tone(Plain),
		Span: Span{Call: NoCall, Event: "rein.write_committed", Attributes: func(ev *reinv1.Event) []attribute.KeyValue {
			wc := ev.GetWriteCommitted()
			return []attribute.KeyValue{attribute.String("rein.proposal.id", wc.GetProposalId()), attribute.Float64("rein.duration_seconds", wc.GetDuration().AsDuration().Seconds())}
		}},
		Metric: Metric{Counts: Write, Outcome: "committed"},
		Transcript: observed(func(ev *reinv1.Event) *model.Observation {
			return &model.Observation{Source: "harness", Text: "The approved write was committed. Receipt: " + ValueText(ev.GetWriteCommitted().GetReceipt())}
		}),
	},
	{
		Name: "write_outcome_unknown",
		Summary: func(ev *reinv1.Event) string {
			wu := ev.GetWriteOutcomeUnknown()
			return "operation " + wu.GetOperationId() + ": " + wu.GetError()
		},
		Tone: tone(Plain),
		Span: Span{Call: NoCall, Event: "rein.write_outcome_unknown", Attributes: func(ev *reinv1.Event) []attribute.KeyValue {
			return []attribute.KeyValue{attribute.String("rein.proposal.id", ev.GetWriteOutcomeUnknown().GetProposalId())}
		}},
		Metric:     Metric{Counts: Write, Outcome: "unknown"},
		Transcript: unread,
	},
	{
		Name: "checks_completed",
		Summary: func(ev *reinv1.Event) string {
			cc := ev.GetChecksCompleted()
			s := checksLine(cc.GetResults())
			if d := TookText(cc.GetDuration()); d != "" {
				s += ", in " + d
			}
			return s
		},
		Tone: tone(Plain),
		Span: Span{Call: NoCall, Event: "rein.checks_completed", Attributes: func(ev *reinv1.Event) []attribute.KeyValue {
			results := ev.GetChecksCompleted().GetResults()
			failed := 0
			for _, r := range results {
				if !r.GetPassed() {
					failed++
				}
			}
			return []attribute.KeyValue{attribute.Int("rein.checks", len(results)), attribute.Int("rein.checks.failed", failed)}
		}},
		Metric: Metric{Counts: Uncounted},
		Transcript: observed(func(ev *reinv1.Event) *model.Observation {
			cc := ev.GetChecksCompleted()
			if runstate.ChecksHash(cc) == "" {
				return nil
			}
			return &model.Observation{Source: "harness", Text: checksObservation(cc)}
		}),
	},
	{
		Name: "budget_reached",
		Summary: func(ev *reinv1.Event) string {
			br := ev.GetBudgetReached()
			return br.GetLimit() + ": " + br.GetDetail()
		},
		Tone: tone(Alert),
		Span: Span{Call: NoCall, Event: "rein.budget_reached", Attributes: func(ev *reinv1.Event) []attribute.KeyValue {
			return []attribute.KeyValue{attribute.String("rein.budget.limit", ev.GetBudgetReached().GetLimit())}
		}},
		Metric:     Metric{Counts: Uncounted},
		Transcript: unread,
	},
	{
		Name: "status_changed",
		Summary: func(ev *reinv1.Event) string {
			sc := ev.GetStatusChanged()
			s := fmt.Sprintf("%s → %s (%s)", runstate.StatusName(sc.GetFrom()), runstate.StatusName(sc.GetTo()), sc.GetReason())
			if e := sc.GetError(); e != "" {
				s += ": " + e
			}
			return s
		},
		Tone: func(ev *reinv1.Event) Tone {
			switch to := ev.GetStatusChanged().GetTo(); {
			case to == reinv1.RunStatus_RUN_STATUS_COMPLETED:
				return Good
			case runstate.Paused(to):
				return Waiting
			case runstate.Terminal(to):
				return Bad
			}
			return Plain
		},
		Span: Span{Call: NoCall, Event: "rein.status_changed", Attributes: func(ev *reinv1.Event) []attribute.KeyValue {
			sc := ev.GetStatusChanged()
			return []attribute.KeyValue{attribute.String("rein.status", runstate.StatusName(sc.GetTo())), attribute.String("rein.status.reason", sc.GetReason())}
		}, Ends: func(ev *reinv1.Event) bool {
			to := ev.GetStatusChanged().GetTo()
			return runstate.Terminal(to) || runstate.Paused(to)
		}},
		Metric:     Metric{Counts: StatusChange},
		Transcript: unread,
	},
	{
		Name: "model_retried",
		Summary: func(ev *reinv1.Event) string {
			mr := ev.GetModelRetried()
			return fmt.Sprintf("step %d, retry in %s: %s", mr.GetStep(), mr.GetWait().AsDuration(), mr.GetError())
		},
		Tone: tone(Plain),
		Span: Span{Call: NoCall, Event: "rein.model_retried", Attributes: func(ev *reinv1.Event) []attribute.KeyValue {
			mr := ev.GetModelRetried()
			return []attribute.KeyValue{attribute.String("rein.retry.reason", mr.GetReason()), attribute.Float64("rein.retry.wait_seconds", mr.GetWait().AsDuration().Seconds())}
		}},
		Metric:     Metric{Counts: ModelRetry},
		Transcript: unread,
	},
	{
		Name: "context_compacted",
		Summary: func(ev *reinv1.Event) string {
			cc := ev.GetContextCompacted()
			return fmt.Sprintf("%d entries summarised, %d → %d characters", cc.GetCompacted(), cc.GetCharsBefore(), cc.GetCharsAfter())
		},
		Tone: tone(Plain),
		Span: Span{Call: NoCall, Event: "rein.context_compacted", Attributes: func(ev *reinv1.Event) []attribute.KeyValue {
			return []attribute.KeyValue{attribute.Int("rein.compacted", int(ev.GetContextCompacted().GetCompacted()))}
		}},
		Metric:     Metric{Counts: Uncounted},
		Transcript: Transcript{Role: Compaction},
	},
	{
		Name: "write_refused",
		Summary: func(ev *reinv1.Event) string {
			wr := ev.GetWriteRefused()
			return "operation " + wr.GetOperationId() + " refused: " + wr.GetReason()
		},
		Tone: tone(Plain),
		Span: Span{Call: NoCall, Event: "rein.write_refused", Attributes: func(ev *reinv1.Event) []attribute.KeyValue {
			return []attribute.KeyValue{attribute.String("rein.proposal.id", ev.GetWriteRefused().GetProposalId())}
		}},
		Metric: Metric{Counts: Write, Outcome: "refused"},
		Transcript: observed(func(ev *reinv1.Event) *model.Observation {
			return &model.Observation{Source: "harness", Text: "The approved write was refused by its tool and nothing was written: " + ev.GetWriteRefused().GetReason() +
				". Read the current state and propose the write again if it is still needed."}
		}),
	},
	{
		Name: "delegation_started",
		Summary: func(ev *reinv1.Event) string {
			var ids []string
			for _, c := range ev.GetDelegationStarted().GetChildren() {
				b := c.GetBudget()
				ids = append(ids, fmt.Sprintf("%s (%d steps", c.GetRunId(), b.GetMaxSteps())+budgetNote(b)+")")
			}
			return "children " + strings.Join(ids, ", ")
		},
		Tone:       tone(Plain),
		Span:       noSpan,
		Metric:     Metric{Counts: Uncounted},
		Transcript: unread,
	},
	{
		Name: "delegation_returned",
		Summary: func(ev *reinv1.Event) string {
			d := ev.GetDelegationReturned()
			s := fmt.Sprintf("%s %s, %d steps, %d tokens, $%.6f", d.GetRunId(), runstate.StatusName(d.GetStatus()), d.GetSteps(),
				d.GetUsage().GetInputTokens()+d.GetUsage().GetOutputTokens(), d.GetCostUsd())
			if a := d.GetAnswer(); a != nil {
				s += fmt.Sprintf(": %q", a.GetText())
			}
			return s
		},
		Tone:   tone(Plain),
		Span:   noSpan,
		Metric: Metric{Counts: Uncounted},
		Transcript: observed(func(ev *reinv1.Event) *model.Observation {
			dr := ev.GetDelegationReturned()
			return &model.Observation{Source: "run:" + dr.GetRunId(), Text: returnedText(dr)}
		}),
	},
	{
		Name: "run_taken",
		Summary: func(ev *reinv1.Event) string {
			rt := ev.GetRunTaken()
			return fmt.Sprintf("carried on by %s (lease epoch %d)", rt.GetOwner(), rt.GetEpoch())
		},
		Tone:       tone(Plain),
		Span:       noSpan,
		Metric:     Metric{Counts: Uncounted},
		Transcript: unread,
	},
	{
		Name: "model_throttled",
		Summary: func(ev *reinv1.Event) string {
			mt := ev.GetModelThrottled()
			return fmt.Sprintf("step %d waited %s for %s", mt.GetStep(), TookText(mt.GetWait()), mt.GetBucket())
		},
		Tone: tone(Waiting),
		Span: Span{Call: NoCall, Event: "rein.model_throttled", Attributes: func(ev *reinv1.Event) []attribute.KeyValue {
			mt := ev.GetModelThrottled()
			return []attribute.KeyValue{attribute.String("rein.rate.bucket", mt.GetBucket()), attribute.Float64("rein.rate.wait_seconds", mt.GetWait().AsDuration().Seconds())}
		}},
		Metric:     Metric{Counts: Throttled},
		Transcript: unread,
	},
	{
		Name: "run_admitted",
		Summary: func(ev *reinv1.Event) string {
			ra := ev.GetRunAdmitted()
			text := "started at once"
			if w := TookText(ra.GetWaited()); w != "" {
				text = "started after " + w + " in the queue"
			}
			if by := ra.GetBy(); by != "" {
				text += " by " + by
			}
			return text
		},
		Tone: tone(Plain),
		Span: Span{Call: NoCall, Event: "rein.run_admitted", Attributes: func(ev *reinv1.Event) []attribute.KeyValue {
			return []attribute.KeyValue{attribute.Float64("rein.queue.waited_seconds", ev.GetRunAdmitted().GetWaited().AsDuration().Seconds())}
		}},
		Metric:     Metric{Counts: Admitted},
		Transcript: unread,
	},
	{
		Name: "run_steered",
		Summary: func(ev *reinv1.Event) string {
			return fmt.Sprintf("%q by %s", ev.GetRunSteered().GetText(), ev.GetActor())
		},
		Tone: tone(Plain),
		Span: Span{Call: NoCall, Event: "rein.run_steered", Attributes: func(ev *reinv1.Event) []attribute.KeyValue {
			return []attribute.KeyValue{attribute.String("rein.actor", ev.GetActor())}
		}},
		Metric:     Metric{Counts: Uncounted},
		Transcript: Transcript{Role: Held, Observe: steeredObservation},
	},
	{
		Name:    "budget_raised",
		Summary: func(ev *reinv1.Event) string { return raisedText(ev.GetBudgetRaised()) + " by " + ev.GetActor() },
		Tone:    tone(Plain),
		Span: Span{Call: NoCall, Event: "rein.budget_raised", Attributes: func(ev *reinv1.Event) []attribute.KeyValue {
			return []attribute.KeyValue{attribute.String("rein.actor", ev.GetActor())}
		}},
		Metric: Metric{Counts: Uncounted},
		Transcript: observed(func(ev *reinv1.Event) *model.Observation {
			return &model.Observation{Source: "person", Text: "A person raised the run's budget (" + raisedText(ev.GetBudgetRaised()) + "); carry on from where you were."}
		}),
	},
	{
		Name: "proposal_revised",
		Summary: func(ev *reinv1.Event) string {
			pr := ev.GetProposalRevised()
			return fmt.Sprintf("%s → %s by %s: %s", pr.GetSupersededProposalId(), pr.GetProposal().GetProposalId(), ev.GetActor(), changesText(pr.GetChanges()))
		},
		Tone: tone(Plain),
		Span: Span{Call: NoCall, Event: "rein.proposal_revised", Attributes: func(ev *reinv1.Event) []attribute.KeyValue {
			pr := ev.GetProposalRevised()
			return []attribute.KeyValue{attribute.String("rein.proposal.id", pr.GetProposal().GetProposalId()),
				attribute.String("rein.proposal.superseded", pr.GetSupersededProposalId()), attribute.String("rein.actor", ev.GetActor())}
		}},
		Metric: Metric{Counts: Uncounted},
		Transcript: observed(func(ev *reinv1.Event) *model.Observation {
			pr := ev.GetProposalRevised()
			if ev.GetActor() == "harness" {
				return &model.Observation{Source: "harness", Text: fmt.Sprintf(
					"Tool %s changed since your proposed write was previewed, so the write was previewed again on the tool's new definition. The new preview waits for approval; if it is approved, it is the write that happens.",
					pr.GetProposal().GetTool())}
			}
			return &model.Observation{Source: "person", Text: fmt.Sprintf(
				"A person revised the arguments of your proposed %s write before approving it: %s. The revised write waits for approval; if it is approved, it is the write that happens.",
				pr.GetProposal().GetTool(), changesText(pr.GetChanges()))}
		}),
	},
	{
		Name:    "policy_decided",
		Summary: func(ev *reinv1.Event) string { return PolicyText(ev.GetPolicyDecided()) },
		Tone: func(ev *reinv1.Event) Tone {
			if ev.GetPolicyDecided().GetEffect() == reinv1.PolicyEffect_POLICY_EFFECT_DENY || ev.GetPolicyDecided().GetError() != "" {
				return Alert
			}
			return Plain
		},
		Span: Span{Call: NoCall, Event: "rein.policy_decided", Attributes: func(ev *reinv1.Event) []attribute.KeyValue {
			pd := ev.GetPolicyDecided()
			return []attribute.KeyValue{attribute.String("gen_ai.tool.name", pd.GetTool()), attribute.String("gen_ai.tool.call.id", pd.GetCallId()),
				attribute.String("rein.policy.effect", EffectName(pd.GetEffect())), attribute.String("rein.policy.source", SourceName(pd.GetSource())),
				attribute.String("rein.policy.rule", pd.GetRule())}
		}},
		Metric:     Metric{Counts: PolicyDecision},
		Transcript: unread,
	},
	{
		Name: "approval_given",
		Summary: func(ev *reinv1.Event) string {
			ag := ev.GetApprovalGiven()
			return fmt.Sprintf("%s approved by %s (%d of %d)", ag.GetProposalId(), ev.GetActor(), ag.GetGiven(), ag.GetNeeded())
		},
		Tone: tone(Waiting),
		Span: Span{Call: NoCall, Event: "rein.approval_given", Attributes: func(ev *reinv1.Event) []attribute.KeyValue {
			ag := ev.GetApprovalGiven()
			return []attribute.KeyValue{attribute.String("rein.proposal.id", ag.GetProposalId()), attribute.String("rein.actor", ev.GetActor()),
				attribute.Int("rein.approvals.given", int(ag.GetGiven())), attribute.Int("rein.approvals.needed", int(ag.GetNeeded()))}
		}},
		Metric:     Metric{Counts: Uncounted},
		Transcript: unread,
	},
	{
		Name: "tool_changed",
		Summary: func(ev *reinv1.Event) string {
			tc := ev.GetToolChanged()
			return fmt.Sprintf("%s changed (%s) since the run was granted it: %s", tc.GetTool(), strings.Join(tc.GetChanges(), ", "), tc.GetAction())
		},
		Tone: tone(Waiting),
		Span: Span{Call: NoCall, Event: "rein.tool_changed", Attributes: func(ev *reinv1.Event) []attribute.KeyValue {
			tc := ev.GetToolChanged()
			return []attribute.KeyValue{attribute.String("gen_ai.tool.name", tc.GetTool()), attribute.StringSlice("rein.tool.changes", tc.GetChanges()),
				attribute.String("rein.tool.action", tc.GetAction())}
		}},
		Metric:     Metric{Counts: Uncounted},
		Transcript: unread, // the call's tool_refused, or the proposal previewed again, tells the model
	},
	{
		Name: "tool_adopted",
		Summary: func(ev *reinv1.Event) string {
			ta := ev.GetToolAdopted()
			return fmt.Sprintf("%s moved to its new definition (%s) by %s", ta.GetTool(), strings.Join(ta.GetChanges(), ", "), ev.GetActor())
		},
		Tone: tone(Plain),
		Span: Span{Call: NoCall, Event: "rein.tool_adopted", Attributes: func(ev *reinv1.Event) []attribute.KeyValue {
			ta := ev.GetToolAdopted()
			return []attribute.KeyValue{attribute.String("gen_ai.tool.name", ta.GetTool()), attribute.StringSlice("rein.tool.changes", ta.GetChanges()),
				attribute.String("rein.actor", ev.GetActor())}
		}},
		Metric:     Metric{Counts: Uncounted},
		Transcript: unread, // the model is shown the tool's new schema with the grants
	},
}
