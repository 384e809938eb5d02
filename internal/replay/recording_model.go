package replay

// The recording as the run's model: its replies, retries and token counts.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/model"
)

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
