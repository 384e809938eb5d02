package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/model/anthropic"
	"github.com/reinhq/rein/internal/pricing"
)

// cachingAnthropic is a stand-in for Anthropic's Messages API that caches
// as the real one does: by exact prefix (the tools, the system text, then
// each message's blocks, in that order), written at the blocks marked
// cache_control, for the TTL they ask, and found again at any block
// boundary up to the last mark. It answers with a search tool use until
// its calls reach finishAt, then a final answer, and bills every call at
// price: usage reports uncached input, cache writes and reads apart, as
// the real API does. A token is 4 bytes of a block's JSON. clock is the
// run's clock; pauseAfter, when set, moves it on by pause after that call.
type cachingAnthropic struct {
	price      pricing.Price
	finishAt   int
	clock      *cacheClock
	pauseAfter int
	pause      time.Duration

	mu    sync.Mutex
	calls int
	// cache maps a prefix's hash to when it expires.
	cache map[string]time.Time
	bill  float64
	// marks is the number of cache_control breakpoints of each call.
	marks []int
	// usage is each call's reported (input, write, read).
	usage [][3]uint64
}

// cacheClock is a clock a test moves on.
type cacheClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *cacheClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(time.Second)
	return c.now
}

func (c *cacheClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func (c *cacheClock) read() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (f *cachingAnthropic) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	var req struct {
		Tools    []map[string]any `json:"tools"`
		System   []map[string]any `json:"system"`
		Messages []struct {
			Role    string           `json:"role"`
			Content []map[string]any `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(raw, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	// The request as blocks in cache order; a block's cache_control is
	// not part of its content.
	type block struct {
		data []byte
		ttl  time.Duration // > 0: a breakpoint
	}
	var blocks []block
	add := func(prefix string, b map[string]any) {
		var ttl time.Duration
		if cc, ok := b["cache_control"].(map[string]any); ok {
			ttl = 5 * time.Minute
			if cc["ttl"] == "1h" {
				ttl = time.Hour
			}
			delete(b, "cache_control")
		}
		data, _ := json.Marshal(b)
		blocks = append(blocks, block{data: append([]byte(prefix), data...), ttl: ttl})
	}
	for _, t := range req.Tools {
		add("tool:", t)
	}
	for _, s := range req.System {
		add("system:", s)
	}
	for i, m := range req.Messages {
		for _, c := range m.Content {
			add(fmt.Sprintf("%d:%s:", i, m.Role), c)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.clock.read()
	h := sha256.New()
	hashes := make([]string, len(blocks))
	tokens := make([]uint64, len(blocks)) // cumulative
	var total uint64
	lastMark, marks := -1, 0
	for i, b := range blocks {
		h.Write(b.data)
		hashes[i] = hex.EncodeToString(h.Sum(nil))
		total += uint64(len(b.data)+3) / 4
		tokens[i] = total
		if b.ttl > 0 {
			lastMark, marks = i, marks+1
		}
	}
	if f.cache == nil {
		f.cache = map[string]time.Time{}
	}
	counting := strings.HasSuffix(r.URL.Path, "/count_tokens")
	var read, write uint64
	hit := -1
	for i := lastMark; i >= 0; i-- {
		if exp, ok := f.cache[hashes[i]]; ok && now.Before(exp) {
			hit, read = i, tokens[i]
			break
		}
	}
	if lastMark > hit {
		write = tokens[lastMark] - read
	}
	for i, b := range blocks {
		if counting {
			break
		}
		if b.ttl > 0 && i >= hit {
			f.cache[hashes[i]] = now.Add(b.ttl)
		}
	}
	if hit >= 0 && !counting {
		// A hit refreshes its entry's TTL.
		for i := hit; i >= 0; i-- {
			if blocks[i].ttl > 0 {
				f.cache[hashes[i]] = now.Add(blocks[i].ttl)
			}
		}
	}
	if strings.HasSuffix(r.URL.Path, "/count_tokens") {
		// Counting is free and touches no cache.
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"input_tokens":%d}`, total)
		return
	}
	input := total - read - write
	const output = 10
	f.calls++
	n := f.calls
	f.marks = append(f.marks, marks)
	f.usage = append(f.usage, [3]uint64{input, write, read})
	writePrice := f.price.CacheWritePerMTok
	if lastMark >= 0 && blocks[lastMark].ttl == time.Hour {
		writePrice = f.price.CacheWrite1hPerMTok
	}
	f.bill += (float64(input)*f.price.InputPerMTok + float64(write)*writePrice +
		float64(read)*f.price.CacheReadPerMTok + output*f.price.OutputPerMTok) / 1e6
	if n == f.pauseAfter {
		f.clock.advance(f.pause)
	}
	content := fmt.Sprintf(`[{"type":"tool_use","id":"toolu_%d","name":"search","input":{"q":"page %d"}}]`, n, n)
	stop := "tool_use"
	if n >= f.finishAt {
		content, stop = `[{"type":"text","text":"The total is 1,234.00 EUR."}]`, "end_turn"
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = fmt.Fprintf(w, `{"id":"msg_%d","type":"message","role":"assistant","model":"claude-test","content":%s,"stop_reason":%q,`+
		`"usage":{"input_tokens":%d,"cache_creation_input_tokens":%d,"cache_read_input_tokens":%d,"output_tokens":%d}}`,
		n, content, stop, input, write, read, output)
}

// cacheRun runs a 30-step task against f with the models file's price p:
// a long contract (the prefix that the cache serves), 29 searches and an
// answer.
func cacheRun(t *testing.T, f *cachingAnthropic, p pricing.Price) ([]*reinv1.Event, float64) {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	e, s := setup(t, Config{Tools: searchTools(t), Clock: f.clock.Now,
		Prices: pricing.New(map[string]pricing.Price{"anthropic/claude-test": p}),
		Models: func(spec *reinv1.ModelSpec) (model.Model, error) { return anthropic.New(spec, "sk-test") }})
	c := testContract()
	c.Goal = "find the invoice total\n" + strings.Repeat("Read every page of the ledger before you answer. ", 400)
	c.Model = &reinv1.ModelSpec{Provider: anthropic.Provider, Name: "claude-test", BaseUrl: srv.URL}
	c.Budget = &reinv1.Budget{MaxSteps: 40, MaxCostUsd: 100}
	st, evs := runToRest(t, e, s, c)
	wantStatus(t, st, evs, statusCompleted, "final_answer")
	return evs, st.CostUSD
}

// A 30-step run against a stand-in that caches as Anthropic does: from
// step 2 on, at least 90% of each call's input is read from the cache; the
// run's cost is the stand-in's bill to the cent; a pause past the TTL
// (the injected clock) shows a cache write again, charged as one.
func TestCacheThirtyStepsBilledAsTheProviderBills(t *testing.T) {
	p, _ := pricing.Default().Lookup("anthropic", "claude-sonnet-4-5")
	f := &cachingAnthropic{price: p, finishAt: 30, clock: &cacheClock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)},
		pauseAfter: 15, pause: 6 * time.Minute}
	evs, cost := cacheRun(t, f, p)

	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls != 30 {
		t.Fatalf("%d calls, want 30", f.calls)
	}
	if math.Abs(cost-f.bill) >= 0.005 {
		t.Fatalf("the run spent $%.6f, the provider billed $%.6f", cost, f.bill)
	}
	for i, u := range f.usage {
		in, write, read := u[0], u[1], u[2]
		all := in + write + read
		switch {
		case i == 0 || i == 15: // the first call, and the one after the pause
			if write < all*9/10 || read != 0 {
				t.Errorf("call %d: usage %v, want a cache write of nearly all the input and no read", i+1, u)
			}
		case read*10 < all*9:
			t.Errorf("call %d: %d of %d input tokens read from the cache, want 90%% or more", i+1, read, all)
		}
		if want := min(i+2, 3); f.marks[i] != want {
			t.Errorf("call %d had %d cache breakpoints, want %d (tools, contract, last block)", i+1, f.marks[i], want)
		}
	}
	returned := ofType(evs, "model_returned")
	requested := ofType(evs, "model_requested")
	for i, ev := range returned {
		u := ev.GetModelReturned().GetUsage()
		if got := [3]uint64{u.GetInputTokens(), u.GetCacheWriteInputTokens(), u.GetCacheReadInputTokens()}; got != f.usage[i] {
			t.Errorf("model_returned %d usage %v, the provider reported %v", i+1, got, f.usage[i])
		}
	}
	for i, ev := range requested {
		mr := ev.GetModelRequested()
		if want := min(i+1, 2); len(mr.GetCacheBreakpoints()) != want || mr.GetCacheTtl().AsDuration() != 5*time.Minute {
			t.Errorf("model_requested %d: breakpoints %v ttl %v, want %d at 5m", i+1, mr.GetCacheBreakpoints(), mr.GetCacheTtl(), want)
		}
		if i > 0 && mr.GetPrefixBytes() == 0 {
			t.Errorf("model_requested %d records no common prefix", i+1)
		}
		// The prefix is the whole previous input: each call's input begins
		// with the one before, byte for byte.
		if i > 0 && mr.GetCarriedBlobs() == 0 {
			t.Errorf("model_requested %d carries none of the previous input", i+1)
		}
	}
}

// The failure twin: with caching switched off in the models file, no
// breakpoint is sent, nothing is read from the cache, and the run pays the
// input price for every token, which costs more.
func TestCacheOffSendsNoBreakpoints(t *testing.T) {
	p, _ := pricing.Default().Lookup("anthropic", "claude-sonnet-4-5")
	on := &cachingAnthropic{price: p, finishAt: 30, clock: &cacheClock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}}
	_, costOn := cacheRun(t, on, p)
	p.CacheOff = true
	f := &cachingAnthropic{price: p, finishAt: 30, clock: &cacheClock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}}
	evs, cost := cacheRun(t, f, p)

	f.mu.Lock()
	defer f.mu.Unlock()
	for i, u := range f.usage {
		if f.marks[i] != 0 || u[1] != 0 || u[2] != 0 {
			t.Errorf("call %d: %d breakpoints, usage %v; want none and no cache use", i+1, f.marks[i], u)
		}
	}
	for _, ev := range ofType(evs, "model_requested") {
		if mr := ev.GetModelRequested(); len(mr.GetCacheBreakpoints()) != 0 || mr.GetCacheTtl() != nil {
			t.Fatalf("model_requested with caching off: %v", mr)
		}
	}
	if math.Abs(cost-f.bill) >= 0.005 || cost < 3*costOn {
		t.Fatalf("uncached run: spent $%.4f, billed $%.4f; cached run $%.4f: want the bill, and several times the cached", cost, f.bill, costOn)
	}
}
