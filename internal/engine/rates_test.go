package engine

// The shared model-rate limits through the engine (docs/design.md §17):
// runs wait for their turn instead of finding the provider's limit by a
// refusal, and each wait is in the run's log.

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/ratelimit"
	"github.com/reinhq/rein/internal/runstate"
)

// standIn is a provider that allows perMinute requests a minute, as a
// token bucket, and refuses any more with a 429 that says when to retry.
type standIn struct {
	mu        sync.Mutex
	perMinute float64
	level     float64
	at        time.Time
	calls     int
	refused   int
}

func (p *standIn) model(*reinv1.ModelSpec) (model.Model, error) { return p, nil }

func (p *standIn) Next(_ context.Context, req *model.Request) (*model.Reply, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if p.at.IsZero() {
		p.level, p.at = p.perMinute, now
	}
	p.level = min(p.perMinute, p.level+now.Sub(p.at).Seconds()*p.perMinute/60)
	p.at = now
	p.calls++
	// Slack for the two buckets' starts (the provider's starts at its
	// first call, a commit after rein's first take) and a loaded machine:
	// a quarter of a request, about 170 ms at 90 a minute.
	if p.level < 1-0.25 {
		p.refused++
		wait := time.Duration((1 - p.level) / (p.perMinute / 60) * float64(time.Second))
		return nil, &model.HTTPError{Provider: "stand-in", StatusCode: http.StatusTooManyRequests, Message: "rate limited", RetryAfter: wait}
	}
	p.level--
	d := &reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: "done"}}}
	if req.Step == 1 {
		d = callDecision("search", "c1", nil)
	}
	return &model.Reply{Decision: d, Usage: usage(10, 5)}, nil
}

// TestSharedRateLimit: 50 runs of two calls each against a provider that
// allows 90 a minute, with rein's limit set to it: the provider refuses
// no call, every run completes, and the runs past the minute's worth have
// their waits in their logs. The twin: without rein's limit the provider
// refuses calls.
func TestSharedRateLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the rate limit, about 7 s")
	}
	for _, limited := range []bool{true, false} {
		p := &standIn{perMinute: 90}
		cfg := Config{Models: p.model, Clock: time.Now}
		if limited {
			cfg.Rates = ratelimit.New(&ratelimit.Memory{}, ratelimit.Limits{Models: map[string]ratelimit.ModelLimit{"stand-in/*": {RequestsPerMinute: 90}}}, nil)
		} else {
			cfg.MaxRetryWait = time.Millisecond // a refusal is not waited out: the twin only counts them
		}
		e, s := setup(t, cfg)
		var ids []string
		for i := range 50 {
			c := testContract()
			c.Model = &reinv1.ModelSpec{Provider: "stand-in", Name: "m"}
			st, _, err := e.Start(testCtx(t), StartRequest{RequestID: t.Name() + string(rune('A'+i)) + map[bool]string{true: "l", false: "u"}[limited], Contract: c, Principal: "alice", Tenant: "acme"})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, st.RunID)
		}
		waited := 0
		for _, id := range ids {
			waitRun(t, e, id)
			st, evs := stored(t, s, id)
			if limited && st.Status != statusCompleted {
				t.Fatalf("run %s is %s: %s", id, runstate.StatusName(st.Status), dump(evs))
			}
			waited += len(ofType(evs, "model_throttled"))
		}
		p.mu.Lock()
		refused, calls := p.refused, p.calls
		p.mu.Unlock()
		switch {
		case limited && (refused > 1 || waited < 5):
			t.Errorf("with rein's limit: %d of %d calls refused, %d waits logged; want at most 1 refused and the calls past 90 waiting", refused, calls, waited)
		case !limited && refused == 0:
			t.Errorf("without rein's limit the provider refused none of %d calls: the test does not exercise the limit", calls)
		}
	}
}
