package engine

// Tests of prompt caching end to end: 30-step runs through the real
// providers' clients against stand-ins (internal/model/cachetest) that
// cache by exact prefix as Anthropic and OpenAI do and bill each call.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/model/anthropic"
	"github.com/reinhq/rein/internal/model/cachetest"
	"github.com/reinhq/rein/internal/model/openai"
	"github.com/reinhq/rein/internal/pricing"
)

// cachingStandIn is a caching stand-in provider: its HTTP API, and what it billed.
type cachingStandIn interface {
	http.Handler
	Calls() []cachetest.Call
	Bill() float64
}

// cacheProvider is one provider the cache tests run against: its stand-in,
// built at a price, and the model the run names.
type cacheProvider struct {
	provider, name string
	price          string // the default price list's model
	stand          func(cachetest.Config) cachingStandIn
	build          func(*reinv1.ModelSpec) (model.Model, error)
}

var cacheProviders = []cacheProvider{
	{provider: anthropic.Provider, name: "claude-test", price: "claude-sonnet-4-5",
		stand: func(c cachetest.Config) cachingStandIn { return cachetest.NewAnthropic(c) },
		build: func(spec *reinv1.ModelSpec) (model.Model, error) { return anthropic.New(spec, "sk-test") }},
	{provider: openai.Provider, name: "gpt-test", price: "gpt-4.1",
		stand: func(c cachetest.Config) cachingStandIn { return cachetest.NewOpenAI(c) },
		build: func(spec *reinv1.ModelSpec) (model.Model, error) { return openai.New(spec, "sk-test") }},
}

// defaultPrice is the default price list's price of the provider's model.
func (cp cacheProvider) defaultPrice(t *testing.T) pricing.Price {
	t.Helper()
	p, ok := pricing.Default().Lookup(cp.provider, cp.price)
	if !ok {
		t.Fatalf("no default price for %s/%s", cp.provider, cp.price)
	}
	return p
}

// cacheOpts are what a cache test does to its run besides running it.
type cacheOpts struct {
	// steer, when set, is called with the engine and the run's ID as the
	// stand-in answers each call (n from 1).
	steer func(e *Engine, runID string, n int)
	// cut, when set, crashes the run's engine while that call (from 1) is
	// out, before the stand-in has seen it, and carries the run on with a
	// new engine over the same store, as another replica would.
	cut int
	// then, when set, is called with the engine, its store, the stand-in
	// and the run once the run has ended and been checked.
	then func(e *Engine, s Store, f cachingStandIn, runID string)
}

// cacheRun runs a 30-step task against a stand-in of cp built from cfg, at
// the models file's price p: a long contract (the prefix the cache serves),
// 29 searches and an answer, doing what opts says besides.
func cacheRun(t *testing.T, cp cacheProvider, cfg cachetest.Config, p pricing.Price, opts cacheOpts) (cachingStandIn, []*reinv1.Event, float64) {
	t.Helper()
	if cfg.Clock == nil {
		cfg.Clock = cachetest.NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	}
	var runID atomic.Value // the run's ID, once started
	runID.Store("")
	ecfg := Config{Tools: searchTools(t), Clock: cfg.Clock.Now,
		Prices: pricing.New(map[string]pricing.Price{cp.provider + "/" + cp.name: p}),
		Models: cp.build}
	e, s := setup(t, ecfg)
	answers := cachetest.Searches(30)
	cfg.Answers = func(n int) cachetest.Answer {
		if opts.steer != nil {
			opts.steer(e, runID.Load().(string), n)
		}
		return answers(n)
	}
	f := cp.stand(cfg)
	var h http.Handler = f
	out := make(chan struct{})  // closed when the call cut is out
	gone := make(chan struct{}) // closed as the test ends, before srv
	if opts.cut > 0 {
		h = cutCall(f, opts.cut, out, gone)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(gone) })
	c := testContract()
	c.Goal = "find the invoice total\n" + strings.Repeat("Read every page of the ledger before you answer. ", 400)
	c.Model = &reinv1.ModelSpec{Provider: cp.provider, Name: cp.name, BaseUrl: srv.URL}
	c.Budget = &reinv1.Budget{MaxSteps: 40, MaxCostUsd: 100}
	started := startRun(t, e, c)
	runID.Store(started.RunID)
	if opts.cut > 0 {
		select {
		case <-out:
		case <-testCtx(t).Done():
			t.Fatalf("call %d was never sent", opts.cut)
		}
		e.Close()
		ecfg.Store = s
		e = newEngine(t, ecfg)
		if err := e.Resume(testCtx(t), started.RunID); err != nil {
			t.Fatalf("Resume on a new engine: %v", err)
		}
	}
	waitRun(t, e, started.RunID)
	st, evs := stored(t, s, started.RunID)
	wantStatus(t, st, evs, statusCompleted, "final_answer")
	if calls := f.Calls(); len(calls) != 30 {
		t.Fatalf("%d calls, want 30", len(calls))
	}
	if math.Abs(st.CostUSD-f.Bill()) >= 0.005 {
		t.Fatalf("the run spent $%.6f, the provider billed $%.6f", st.CostUSD, f.Bill())
	}
	returned := ofType(evs, "model_returned")
	for i, c := range f.Calls() {
		u := returned[i].GetModelReturned().GetUsage()
		got := cachetest.Call{Input: u.GetInputTokens(), Write: u.GetCacheWriteInputTokens(), Read: u.GetCacheReadInputTokens(), Output: u.GetOutputTokens(), Marks: c.Marks}
		if got != c {
			t.Errorf("model_returned %d usage %+v, the provider reported %+v", i+1, got, c)
		}
	}
	if opts.then != nil {
		opts.then(e, s, f, started.RunID)
	}
	return f, evs, st.CostUSD
}

// cutCall is next with its nth model call (from 1; a token count is no
// call) held until the caller gives up on it or gone is closed, never
// answered and never seen by next: a call lost in a crash. out is closed
// when it is held.
func cutCall(next http.Handler, n int, out, gone chan struct{}) http.Handler {
	var calls atomic.Int32
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/count_tokens") && calls.Add(1) == int32(n) {
			close(out)
			select {
			case <-r.Context().Done():
			case <-gone:
			}
			return
		}
		next.ServeHTTP(w, r)
	})
}

// wantCached checks that every call but those in misses read 90% or more
// of its input from the cache, and those read nothing.
func wantCached(t *testing.T, calls []cachetest.Call, misses ...int) {
	t.Helper()
	for i, c := range calls {
		miss := false
		for _, m := range misses {
			miss = miss || m == i+1
		}
		switch {
		case miss && c.Read != 0:
			t.Errorf("call %d: usage %+v, want no cache read", i+1, c)
		case !miss && c.Cached() < 0.9:
			t.Errorf("call %d: %d of %d input tokens read from the cache, want 90%% or more", i+1, c.Read, c.Input+c.Write+c.Read)
		}
	}
}

// A 30-step run against each stand-in: from step 2 on, at least 90% of
// each call's input is read from the cache, and the run's cost is the
// stand-in's bill to the cent (checked by cacheRun).
func TestCacheThirtyStepsBilledAsTheProviderBills(t *testing.T) {
	for _, cp := range cacheProviders {
		t.Run(cp.provider, func(t *testing.T) {
			f, evs, _ := cacheRun(t, cp, cachetest.Config{Price: cp.defaultPrice(t)}, cp.defaultPrice(t), cacheOpts{})
			wantCached(t, f.Calls(), 1)
			for i, ev := range ofType(evs, "model_requested") {
				mr := ev.GetModelRequested()
				if i > 0 && (mr.GetPrefixBytes() == 0 || mr.GetCarriedBlobs() == 0) {
					t.Errorf("model_requested %d records no common prefix with the call before", i+1)
				}
			}
		})
	}
}

// Against Anthropic: each call marks the tools, the contract and its last
// block, and a pause past the TTL (the injected clock) shows a cache write
// again, charged as one.
func TestCacheAnthropicBreakpointsAndTTL(t *testing.T) {
	cp := cacheProviders[0]
	p := cp.defaultPrice(t)
	f, evs, _ := cacheRun(t, cp, cachetest.Config{Price: p, PauseAfter: 15, Pause: 6 * time.Minute}, p, cacheOpts{})
	calls := f.Calls()
	wantCached(t, calls, 1, 16)
	for i, c := range calls {
		if (i == 0 || i == 15) && c.Write < (c.Input+c.Write)*9/10 {
			t.Errorf("call %d: usage %+v, want a cache write of nearly all the input", i+1, c)
		}
		if want := min(i+2, 3); c.Marks != want {
			t.Errorf("call %d had %d cache breakpoints, want %d (tools, contract, last block)", i+1, c.Marks, want)
		}
	}
	for i, ev := range ofType(evs, "model_requested") {
		mr := ev.GetModelRequested()
		if want := min(i+1, 2); len(mr.GetCacheBreakpoints()) != want || mr.GetCacheTtl().AsDuration() != 5*time.Minute {
			t.Errorf("model_requested %d: breakpoints %v ttl %v, want %d at 5m", i+1, mr.GetCacheBreakpoints(), mr.GetCacheTtl(), want)
		}
	}
}

// The failure twin: with caching switched off in the models file, no
// breakpoint and no cache key is sent, nothing is read from the cache on
// Anthropic, and the run pays the input price for every token, which
// costs several times more.
func TestCacheOffSendsNoBreakpoints(t *testing.T) {
	cp := cacheProviders[0]
	p := cp.defaultPrice(t)
	_, _, costOn := cacheRun(t, cp, cachetest.Config{Price: p}, p, cacheOpts{})
	p.CacheOff = true
	f, evs, cost := cacheRun(t, cp, cachetest.Config{Price: p}, p, cacheOpts{})
	for i, c := range f.Calls() {
		if c.Marks != 0 || c.Write != 0 || c.Read != 0 {
			t.Errorf("call %d: %+v; want no breakpoint and no cache use", i+1, c)
		}
	}
	for _, ev := range ofType(evs, "model_requested") {
		if mr := ev.GetModelRequested(); len(mr.GetCacheBreakpoints()) != 0 || mr.GetCacheTtl() != nil {
			t.Fatalf("model_requested with caching off: %v", mr)
		}
	}
	if cost < 3*costOn {
		t.Fatalf("uncached run $%.4f, cached run $%.4f: want several times the cached", cost, costOn)
	}
}

// A message sent to the run (rein steer) while call 10 is out is read by
// call 11 after the history, so the cached prefix stays: every call from
// the second on, call 11 too, reads 90% or more from the cache.
func TestCacheSteerKeepsThePrefix(t *testing.T) {
	for _, cp := range cacheProviders {
		t.Run(cp.provider, func(t *testing.T) {
			var steered []int // the calls whose input holds the message
			cfg := cachetest.Config{Price: cp.defaultPrice(t), Rewrite: func(n int, body []byte) []byte {
				if bytes.Contains(body, []byte("use the EUR ledger")) {
					steered = append(steered, n)
				}
				return body
			}}
			steer := func(e *Engine, runID string, n int) {
				if n != 10 {
					return
				}
				if _, created, err := e.Steer(context.Background(), runID, "use the EUR ledger", "steer-1", "bob"); err != nil || !created {
					t.Errorf("Steer during call 10: created %v, %v", created, err)
				}
			}
			f, evs, _ := cacheRun(t, cp, cfg, cp.defaultPrice(t), cacheOpts{steer: steer})
			wantCount(t, evs, "run_steered", 1)
			if len(steered) == 0 || steered[0] != 11 {
				t.Fatalf("the message was read by calls %v, want from call 11 on", steered)
			}
			wantCached(t, f.Calls(), 1)
		})
	}
}

// The failure twin, which shows the stand-ins tell an order apart: from
// call 16 on the tools go out in the reverse of their sorted order (as a
// client that sent them in the contract's order would, after a resume), so
// call 16 shares no prefix with any call before it and reads nothing from
// the cache; the calls after it read the new order's prefix again.
func TestCacheReorderedContextReadsNothing(t *testing.T) {
	for _, cp := range cacheProviders {
		t.Run(cp.provider, func(t *testing.T) {
			cfg := cachetest.Config{Price: cp.defaultPrice(t), Rewrite: func(n int, body []byte) []byte {
				if n < 16 {
					return body
				}
				return reverseTools(t, body)
			}}
			f, _, _ := cacheRun(t, cp, cfg, cp.defaultPrice(t), cacheOpts{})
			wantCached(t, f.Calls(), 1, 16)
		})
	}
}

// reverseTools is a request body with its tools in reverse order.
func reverseTools(t *testing.T, body []byte) []byte {
	var req map[string]json.RawMessage
	if err := json.Unmarshal(body, &req); err != nil {
		t.Errorf("request body: %v", err)
		return body
	}
	var tools []json.RawMessage
	if err := json.Unmarshal(req["tools"], &tools); err != nil || len(tools) < 2 {
		t.Errorf("request tools %s: %v; want two or more", req["tools"], err)
		return body
	}
	slices.Reverse(tools)
	req["tools"], _ = json.Marshal(tools)
	out, _ := json.Marshal(req)
	return out
}

// cacheFields is what a model_requested says of the call's input and its
// caching: the input's hash, its prefix and its breakpoints.
func cacheFields(ev *reinv1.Event) string {
	mr := ev.GetModelRequested()
	return fmt.Sprintf("step %d input %s prefix %d bytes %d tokens breakpoints %v ttl %v",
		mr.GetStep(), mr.GetInputHash(), mr.GetPrefixBytes(), mr.GetPrefixTokens(), mr.GetCacheBreakpoints(), mr.GetCacheTtl().AsDuration())
}

// A run whose engine crashes while call 12 is out, before the provider
// has seen it, and that another engine over the same store carries on,
// sends each call as a run that was never cut does: every model_requested,
// the lost call's and the resumed call's too, records the input, prefix
// and breakpoints the uncut run records at that step, and the resumed call
// reads 90% or more of its input from what call 11 cached.
func TestCacheResumeSendsTheSamePrefix(t *testing.T) {
	for _, cp := range cacheProviders {
		t.Run(cp.provider, func(t *testing.T) {
			p := cp.defaultPrice(t)
			_, whole, _ := cacheRun(t, cp, cachetest.Config{Price: p}, p, cacheOpts{})
			f, cut, _ := cacheRun(t, cp, cachetest.Config{Price: p}, p, cacheOpts{cut: 12})
			wantCached(t, f.Calls(), 1)
			want := ofType(whole, "model_requested")
			got := ofType(cut, "model_requested")
			if len(got) != len(want)+1 {
				t.Fatalf("%d model calls recorded, want %d (the uncut run's and the lost one)", len(got), len(want)+1)
			}
			resumed := 0
			for _, ev := range got {
				if ev.GetModelRequested().GetResumed() {
					resumed++
				}
				w := want[ev.GetModelRequested().GetStep()-1]
				if cacheFields(ev) != cacheFields(w) {
					t.Errorf("model_requested %d (resumed %v):\n %s\nthe uncut run's:\n %s", ev.GetSequence(), ev.GetModelRequested().GetResumed(), cacheFields(ev), cacheFields(w))
				}
			}
			if resumed != 1 {
				t.Errorf("%d resumed model calls, want 1 (call 12)", resumed)
			}
		})
	}
}

// A fork of a 30-step run after its 10th search result sends, at its
// first call, the input of the parent's call 11: the same hash, prefix
// and breakpoints, and the stand-in serves 90% or more of it from what
// the parent cached. Its twin: the same fork after the parent's cache
// expired (the clock past the TTL) reads nothing, so the read was the
// parent's entry. Against OpenAI too, whose stand-in caches under the
// prompt_cache_key: a fork sends its parent's (run_started's
// prompt_cache_key), not its own run ID.
func TestCacheForkSharesItsParentsPrefix(t *testing.T) {
	for _, cp := range cacheProviders {
		for _, expired := range []bool{false, true} {
			t.Run(fmt.Sprint(cp.provider, " expired=", expired), func(t *testing.T) {
				p := cp.defaultPrice(t)
				clock := cachetest.NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
				fork := func(e *Engine, s Store, f cachingStandIn, runID string) {
					_, evs := stored(t, s, runID)
					at := ofType(evs, "tool_returned")[9].GetSequence()
					if expired {
						clock.Advance(6 * time.Minute)
					}
					st, _, err := e.Fork(testCtx(t), ForkRequest{RunID: runID, AtSequence: at, RequestID: "fork-1", Principal: "alice", Tenant: "acme"})
					if err != nil {
						t.Fatalf("Fork at %d: %v", at, err)
					}
					waitRun(t, e, st.RunID)
					_, fevs := stored(t, s, st.RunID)
					var first *reinv1.Event // the fork's own first call
					for _, ev := range ofType(fevs, "model_requested") {
						if ev.GetSequence() > at {
							first = ev
							break
						}
					}
					parent := ofType(evs, "model_requested")[10]
					if first == nil || cacheFields(first) != cacheFields(parent) {
						t.Fatalf("the fork's first call:\n %v\nthe parent's call 11:\n %s", first, cacheFields(parent))
					}
					calls := f.Calls()
					c := calls[len(calls)-1]
					if len(calls) != 31 || expired && c.Read != 0 || !expired && c.Cached() < 0.9 {
						t.Errorf("the fork's call (of %d): %+v; want %s", len(calls), c,
							map[bool]string{false: "90% or more read from the cache", true: "no cache read"}[expired])
					}
				}
				cacheRun(t, cp, cachetest.Config{Price: p, Clock: clock}, p, cacheOpts{then: fork})
			})
		}
	}
}
