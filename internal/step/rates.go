package step

import (
	"context"
	"errors"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/ratelimit"
)

// Rates are the model-rate limits every run shares (internal/ratelimit):
// a call takes from its buckets before it is sent, and waits when one is
// empty.
type Rates interface {
	// Take reserves a request and tokens for a call of key, and says how
	// long it waits, and for which bucket.
	Take(ctx context.Context, key ratelimit.Key, tokens uint64) (time.Duration, string, error)
	// Settle corrects the tokens taken by delta, and with undo gives the
	// request back (the call was not sent).
	Settle(ctx context.Context, key ratelimit.Key, delta int64, undo bool) error
	// Hold makes the calls of key's model wait until until.
	Hold(ctx context.Context, key ratelimit.Key, until time.Time) error
}

// reserveOutput is the output tokens a call reserves beyond its input,
// before its usage is known: at most this, or its own cap if lower.
const reserveOutput = 1024

// errThrottledPastDeadline: the call's wait for the rate limits would pass
// the run's deadline.
var errThrottledPastDeadline = errors.New("the model call's wait for the shared rate limits would pass the run's deadline")

// rateKey is what the run's calls draw on.
func (r *Stepper) rateKey() ratelimit.Key {
	m := r.st.Contract.GetModel()
	return ratelimit.Key{Provider: m.GetProvider(), Model: m.GetName(), Tenant: r.st.Tenant}
}

// throttle takes the call's request and tokens from the shared buckets
// and waits, when one is empty, for its turn: model_throttled, with the
// wait, goes with the call's model_requested. It returns what it reserved
// and how long it waited. A limiter that fails is logged and the call goes
// out (the provider still limits it).
func (r *Stepper) throttle(ctx context.Context, req *reinv1.ModelRequested, input, maxOut uint64) (reserved uint64, waited time.Duration, err error) {
	if r.cfg.Rates == nil {
		return 0, 0, nil
	}
	out := uint64(reserveOutput)
	if maxOut > 0 && maxOut < out {
		out = maxOut
	}
	reserved = input + out
	key := r.rateKey()
	wait, bucket, err := r.cfg.Rates.Take(ctx, key, reserved)
	if err != nil {
		r.h.Logger().Error("the shared rate limits could not be read; the model call goes out without them", "run_id", r.st.RunID, "error", err)
		return 0, 0, nil
	}
	if wait <= 0 {
		return reserved, 0, nil
	}
	if dl := r.st.Deadline; !dl.IsZero() && !r.now.AsTime().Add(wait).Before(dl) {
		r.settle(ctx, reserved, 0, true)
		return 0, 0, errThrottledPastDeadline
	}
	r.later(&reinv1.Event{Actor: "harness", Payload: &reinv1.Event_ModelThrottled{ModelThrottled: &reinv1.ModelThrottled{
		Step: req.GetStep(), Wait: durationpb.New(wait), Bucket: bucket,
	}}})
	if err := r.cfg.Wait(ctx, wait); err != nil {
		r.settle(ctx, reserved, 0, true)
		return 0, 0, ErrStopped
	}
	return reserved, wait, nil
}

// settle corrects a call's reservation by the tokens it used.
func (r *Stepper) settle(ctx context.Context, reserved, used uint64, undo bool) {
	if r.cfg.Rates == nil || reserved == 0 && !undo {
		return
	}
	if err := r.cfg.Rates.Settle(context.WithoutCancel(ctx), r.rateKey(), int64(used)-int64(reserved), undo); err != nil {
		r.h.Logger().Error("settle a model call's tokens with the shared rate limits", "run_id", r.st.RunID, "error", err)
	}
}

// hold tells the shared limits that the provider refused a call of the
// run's model and asked to wait: every run of the model waits too.
func (r *Stepper) hold(ctx context.Context, wait time.Duration) {
	if r.cfg.Rates == nil || wait <= 0 {
		return
	}
	if err := r.cfg.Rates.Hold(context.WithoutCancel(ctx), r.rateKey(), r.h.Clock().Add(wait)); err != nil {
		r.h.Logger().Error("hold the model's shared rate limits", "run_id", r.st.RunID, "error", err)
	}
}
