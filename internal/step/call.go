package step

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/pricing"
)

// DefaultCostOutputCap caps a call's output under a cost limit when
// nothing else does.
const DefaultCostOutputCap = 8192

// capCost caps the call's output at what the run's money left buys once
// the input is paid for, and says what the call may cost at most. limit is
// set when not even one output token is affordable.
func (r *Stepper) capCost(req *model.Request, input uint64, now time.Time) (maxCost float64, limit, detail string) {
	p, priced := r.price()
	max := r.st.Limits().CostUSD
	if max > 0 && !priced {
		m := r.st.Contract.GetModel()
		return 0, "max_cost_usd", fmt.Sprintf("rein has no price for model %s/%s, so it cannot hold the run's cost limit: give the server a price file (--prices) that prices it",
			m.GetProvider(), m.GetName())
	}
	if max > 0 {
		// With no other cap, the money left would allow more output than
		// any model takes: cap it as a provider's default would.
		if req.MaxOutputTokens == 0 {
			req.MaxOutputTokens = DefaultCostOutputCap
		}
		left := max - r.st.Committed().CostUSD
		in := r.callCost(p, req, input, 0, now)
		n := p.AffordableAfter(left, in)
		if n == 0 {
			return 0, "max_cost_usd", fmt.Sprintf("the next model call's %d input tokens cost $%.6f and $%.6f of the run's $%.6f are left",
				input, in, math.Max(left, 0), max)
		}
		if req.MaxOutputTokens == 0 || n < req.MaxOutputTokens {
			req.MaxOutputTokens = n
		}
	}
	return r.callCost(p, req, input, req.MaxOutputTokens, now), "", ""
}

// callCost is what the call is expected to cost at p with output tokens
// of output. Without caching, its input is all at the input price. With
// it, what the provider said it held in its cache after the previous call
// (that call's cache writes and reads), as far as this input still begins
// with that call's, is expected to be read from the cache, only while
// that call is within its TTL (now is the step's clock reading); the rest
// of the input is expected to be written to it.
func (r *Stepper) callCost(p pricing.Price, req *model.Request, input, output uint64, now time.Time) float64 {
	if req.Cache == nil {
		return p.Cost(input, output)
	}
	var read uint64
	if last := r.transcript.lastCall; !last.IsZero() && now.Sub(last) < req.Cache.TTL {
		read = min(r.transcript.cachedTokens(), input)
	}
	return p.Bill(0, input-read, read, output)
}

// cache is how the step's call asks for prompt caching: nil for a
// provider that has no cache or a model whose caching the models file
// switched off; else the model's TTL and the run tree's root run ID as the
// key, so that a tree's runs share what they can.
func (r *Stepper) cache() *model.Cache {
	if !model.Caches(r.st.Contract.GetModel().GetProvider()) {
		return nil
	}
	ttl := pricing.TTL5m
	if p, ok := r.price(); ok {
		if ttl = p.TTL(); ttl == 0 {
			return nil
		}
	}
	return &model.Cache{TTL: ttl, Key: r.st.CacheKey()}
}

// callOutcome is how a model call ended when it returned no reply: the
// events and status that record it, chosen by the caller.
type callOutcome int

const (
	callFailed callOutcome = iota
	callDeadline
	callStopped
	// callStore: recording the retry failed; the error is the store's.
	callStore
)

// callModel sends the step's call and says how long the attempt that
// answered took. rein is the only layer that retries: a retryable failure
// (a rate limit, a server error, a transport failure) is recorded as
// model_retried and sent once more after the wait the provider asked for
// (or Config.RetryWait), if that wait ends before the run's deadline. now is
// the step's clock reading; mctx carries the run's deadline.
func (r *Stepper) callModel(ctx, mctx context.Context, req *model.Request, now time.Time) (*model.Reply, time.Duration, callOutcome, error) {
	reply, took, err := r.timedNext(mctx, req, 1)
	if err == nil {
		return reply, took, 0, nil
	}
	out, err := r.retryModel(ctx, mctx, req, now, err)
	if err != nil {
		return nil, 0, out, err
	}
	reply, took, err = r.timedNext(mctx, req, 2)
	if err == nil {
		return reply, took, 0, nil
	}
	if out, ok := r.cut(ctx, mctx); ok {
		return nil, 0, out, err
	}
	return nil, 0, callFailed, fmt.Errorf("%w (after one retry)", err)
}

// timedNext is one attempt of the model call, timed on the monotonic clock
// (the run's clock stays one reading per step). With an Output that
// someone reads for the run, the call streams its text there, as the call
// r.call names.
func (r *Stepper) timedNext(ctx context.Context, req *model.Request, attempt uint32) (*model.Reply, time.Duration, error) {
	req.Output = nil
	if out := r.cfg.Output; out != nil && out.Streams(r.st.RunID) {
		runID, call := r.st.RunID, r.call
		call.Attempt = attempt
		out.Begin(runID, call)
		defer out.End(runID)
		req.Output = func(text string) { out.Write(runID, text) }
	}
	start := time.Now()
	reply, err := r.model.Next(ctx, req)
	return reply, time.Since(start), err
}

// retryModel decides what a failed first attempt comes to: nil when the
// call is to be sent again (model_retried is recorded and its wait
// waited), else how the call ended and why.
func (r *Stepper) retryModel(ctx, mctx context.Context, req *model.Request, now time.Time, err error) (callOutcome, error) {
	if out, ok := r.cut(ctx, mctx); ok {
		return out, err
	}
	wait, retryable := model.RetryAfter(err)
	if !retryable {
		return callFailed, err
	}
	if wait > 0 && model.RetryReason(err) == "rate_limited" {
		// The provider's limit was reached: every run of the model waits
		// as this one does, instead of each finding out by a refusal.
		r.hold(ctx, wait)
	}
	if wait <= 0 {
		wait = r.cfg.RetryWait
	}
	if !r.st.Deadline.IsZero() && !now.Add(wait).Before(r.st.Deadline) {
		return callDeadline, &lateRetryError{step: req.Step, err: err, wait: wait}
	}
	if wait > r.cfg.MaxRetryWait {
		return callFailed, fmt.Errorf("%w; the provider asks to wait %s before retrying, longer than rein waits (%s): try again later",
			err, wait, r.cfg.MaxRetryWait)
	}
	if cerr := r.commit(ctx, &reinv1.Event{Actor: "harness", Payload: &reinv1.Event_ModelRetried{ModelRetried: &reinv1.ModelRetried{
		Step: req.Step, Error: err.Error(), Wait: durationpb.New(wait), Reason: model.RetryReason(err),
	}}}); cerr != nil {
		return callStore, cerr
	}
	if werr := r.cfg.Wait(mctx, wait); werr != nil {
		if out, ok := r.cut(ctx, mctx); ok {
			return out, werr
		}
		return callFailed, werr
	}
	return 0, nil
}

// lateRetryError is a failed call whose retry would pass the run's
// deadline.
type lateRetryError struct {
	step uint32
	err  error
	wait time.Duration
}

func (e *lateRetryError) Error() string {
	return fmt.Sprintf("%v; a retry after %s would pass the run's deadline", e.err, e.wait)
}

func (e *lateRetryError) Unwrap() error { return e.err }

// exhaustDeadline ends the run at the deadline that cut its model call,
// or pauses it there when its contract pauses on its budget (the call
// stays in flight, to be sent again resumed after a raise); detail says
// so. A retry the deadline left out is recorded as data
// (BudgetReached.retry_past_deadline), which replay reads.
func (r *Stepper) exhaustDeadline(ctx context.Context, detail string, err error) error {
	reached := &reinv1.BudgetReached{Limit: "deadline", Detail: detail}
	if late := (*lateRetryError)(nil); errors.As(err, &late) {
		reached.RetryPastDeadline = &reinv1.RetryPastDeadline{Step: late.step, Error: late.err.Error(), Wait: durationpb.New(late.wait)}
	}
	if r.pausesAt("deadline") {
		// The call is in flight still: after a raise it is sent again,
		// marked resumed.
		return r.exhaustBefore(ctx, "deadline", detail, reached)
	}
	return r.end(ctx, reinv1.RunStatus_RUN_STATUS_BUDGET_EXHAUSTED, "deadline", &reinv1.StatusChanged{},
		&reinv1.Event{Actor: "harness", Payload: &reinv1.Event_BudgetReached{BudgetReached: reached}})
}

// cut says whether a call ended because the driver stopped (a cancel, a
// shutdown) or the run's deadline passed.
func (r *Stepper) cut(ctx, mctx context.Context) (callOutcome, bool) {
	switch {
	case ctx.Err() != nil:
		return callStopped, true
	case errors.Is(mctx.Err(), context.DeadlineExceeded):
		return callDeadline, true
	}
	return 0, false
}

// modelPrice is the run's price as model_requested records it; nil when
// the run has none.
func (r *Stepper) modelPrice() *reinv1.ModelPrice {
	p, ok := r.price()
	if !ok {
		return nil
	}
	// A cache price the table leaves unset is recorded as 0, which reads
	// back as the input price (pricing.Price.WritePerMTok, ReadPerMTok).
	write := p.CacheWritePerMTok
	if p.TTL() == pricing.TTL1h && p.CacheWrite1hPerMTok > 0 {
		write = p.CacheWrite1hPerMTok
	}
	return &reinv1.ModelPrice{InputPerMtok: p.InputPerMTok, OutputPerMtok: p.OutputPerMTok,
		CacheWritePerMtok: write, CacheReadPerMtok: p.CacheReadPerMTok}
}
