package a2aface

import (
	"context"
	"strings"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// reply gives a message to the paused run it names: the answer to its
// question, a decision on its proposal, or more budget. A decision is
// only ever a data part that says so: free text never approves a write.
func (h *handler) reply(ctx context.Context, m *a2a.Message) (*reinv1.Run, error) {
	run, err := h.getRun(ctx, string(m.TaskID))
	if err != nil {
		return nil, err
	}
	if m.ContextID != "" && m.ContextID != contextOf(run) {
		return nil, invalid("task " + run.GetRunId() + " belongs to context " + contextOf(run) + ", not " + m.ContextID)
	}
	data, text, err := replyParts(m)
	if err != nil {
		return nil, err
	}
	switch run.GetStatus() {
	case reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT:
		answer := text
		if a, ok := data["answer"].(string); ok {
			answer = a
		}
		if answer == "" {
			return nil, invalid("task " + run.GetRunId() + " asks a question: reply with its answer as text (or a data part {\"answer\": …})")
		}
		resp, err := h.runs().ProvideInput(out(ctx), &reinv1.ProvideInputRequest{RunId: run.GetRunId(), Text: answer})
		if err != nil {
			return nil, fromStatus(err)
		}
		return resp.GetRun(), nil
	case reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL:
		return h.decide(ctx, run, data)
	case reinv1.RunStatus_RUN_STATUS_NEEDS_BUDGET:
		return h.raise(ctx, run, data)
	}
	s := state(run.GetStatus())
	if s.Terminal() {
		return nil, a2a.NewError(a2a.ErrUnsupportedOperation, "task "+run.GetRunId()+" has ended ("+s.String()+"); start a new task for more")
	}
	return nil, invalid("task " + run.GetRunId() + " is " + s.String() + " and waits for nothing; reply when it is input-required")
}

// replyParts are a reply's one data part (nil for none) and its text.
func replyParts(m *a2a.Message) (map[string]any, string, error) {
	var data map[string]any
	var text []string
	for _, p := range m.Parts {
		switch c := p.Content.(type) {
		case a2a.Data:
			obj, ok := c.Value.(map[string]any)
			if !ok || data != nil {
				return nil, "", invalid("a reply carries at most one data part, a JSON object")
			}
			data = obj
		case a2a.Text:
			text = append(text, string(c))
		}
	}
	return data, strings.Join(text, "\n"), nil
}

var verdicts = map[string]reinv1.ApprovalVerdict{
	"approve": reinv1.ApprovalVerdict_APPROVAL_VERDICT_APPROVE,
	"deny":    reinv1.ApprovalVerdict_APPROVAL_VERDICT_REJECT,
	"revise":  reinv1.ApprovalVerdict_APPROVAL_VERDICT_REVISE,
}

// decide decides run's pending proposal from a data part {"decision":
// "approve"|"deny"|"revise", "proposal_hash": …, "reason": …,
// "arguments": {…}, "end_run": bool}; the proposal ID defaults to the
// pending one, and DecideApproval checks the hash against it.
func (h *handler) decide(ctx context.Context, run *reinv1.Run, data map[string]any) (*reinv1.Run, error) {
	decision, _ := data["decision"].(string)
	verdict, ok := verdicts[decision]
	if !ok {
		return nil, invalid("task " + run.GetRunId() + " waits for a decision on a write: reply with a data part {\"decision\": \"approve\" | \"deny\" | \"revise\", \"proposal_hash\": the hash shown}; free text never approves a write")
	}
	hash, _ := data["proposal_hash"].(string)
	if hash == "" {
		return nil, invalid("a decision names the proposal it decides by its hash: give \"proposal_hash\" as shown in the task's status message")
	}
	id, _ := data["proposal_id"].(string)
	if id == "" {
		id = run.GetPending().GetProposal().GetProposalId()
	}
	reason, _ := data["reason"].(string)
	endRun, _ := data["end_run"].(bool)
	req := &reinv1.DecideApprovalRequest{RunId: run.GetRunId(), ProposalId: id, ProposalHash: hash, Verdict: verdict, Reason: reason, EndRun: endRun}
	if args, ok := data["arguments"].(map[string]any); ok {
		s, err := structpb.NewStruct(args)
		if err != nil {
			return nil, invalid("arguments: " + err.Error())
		}
		req.Arguments = s
	} else if verdict == reinv1.ApprovalVerdict_APPROVAL_VERDICT_REVISE {
		return nil, invalid("a revision gives the write's arguments, in full, as \"arguments\"")
	}
	resp, err := h.runs().DecideApproval(out(ctx), req)
	if err != nil {
		return nil, fromStatus(err)
	}
	return resp.GetRun(), nil
}

// raise raises the budget of a run paused on it from a data part
// {"add_steps", "add_tokens", "add_tool_calls", "add_cost_usd", "reason"}.
func (h *handler) raise(ctx context.Context, run *reinv1.Run, data map[string]any) (*reinv1.Run, error) {
	num := func(k string) float64 { n, _ := data[k].(float64); return max(n, 0) }
	req := &reinv1.RaiseBudgetRequest{RunId: run.GetRunId(), AddSteps: uint32(num("add_steps")), AddTokens: uint64(num("add_tokens")),
		AddToolCalls: uint32(num("add_tool_calls")), AddCostUsd: num("add_cost_usd")}
	req.Reason, _ = data["reason"].(string)
	if req.AddSteps == 0 && req.AddTokens == 0 && req.AddToolCalls == 0 && req.AddCostUsd == 0 {
		return nil, invalid("task " + run.GetRunId() + " waits for more budget: reply with a data part {\"add_steps\" | \"add_tokens\" | \"add_tool_calls\" | \"add_cost_usd\": how much more}")
	}
	resp, err := h.runs().RaiseBudget(out(ctx), req)
	if err != nil {
		return nil, fromStatus(err)
	}
	return resp.GetRun(), nil
}

// Push notifications are not served yet.

func (h *handler) GetTaskPushConfig(context.Context, *a2a.GetTaskPushConfigRequest) (*a2a.PushConfig, error) {
	return nil, a2a.ErrPushNotificationNotSupported
}

func (h *handler) ListTaskPushConfigs(context.Context, *a2a.ListTaskPushConfigRequest) (*a2a.ListTaskPushConfigResponse, error) {
	return nil, a2a.ErrPushNotificationNotSupported
}

func (h *handler) CreateTaskPushConfig(context.Context, *a2a.PushConfig) (*a2a.PushConfig, error) {
	return nil, a2a.ErrPushNotificationNotSupported
}

func (h *handler) DeleteTaskPushConfig(context.Context, *a2a.DeleteTaskPushConfigRequest) error {
	return a2a.ErrPushNotificationNotSupported
}
