// Package cachetest holds stand-ins for the providers' HTTP APIs that cache
// prompts as the real ones do and bill each call at a price, for the
// engine's tests and rein-bench's cache-cost scenario: Anthropic's Messages
// API (a cache entry written at each cache_control breakpoint, found again
// by exact prefix) and OpenAI's Chat Completions API (every prefix of 1,024
// tokens or more cached by itself, in steps of 128, under the request's
// prompt_cache_key). A token is 4 bytes of a request's canonical JSON.
//
// A stand-in answers from a script (Answers), records what it billed for
// each call (Calls) and the sum (Bill). It is no part of the rein binary.
package cachetest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"net/http"
	"sync"
	"time"

	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/pricing"
)

// Clock is a run's clock that a test or a bench moves on: each reading
// is a second after the one before.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock is a clock that starts at t.
func NewClock(t time.Time) *Clock { return &Clock{now: t} }

// Now moves the clock on a second and reads it.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(time.Second)
	return c.now
}

// Advance moves the clock on by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func (c *Clock) read() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Answer is a stand-in's reply to one call: a call of Tool (a granted
// name; the stand-in sends the name the request offers it under) with
// Args, or, with no Tool, the final answer Text. Output is the output
// tokens billed (0: 10).
type Answer struct {
	Tool   string
	Args   map[string]any
	Text   string
	Output uint64
}

// Searches answers a search for each call before the call finishAt, and a
// final answer at it.
func Searches(finishAt int) func(n int) Answer {
	return func(n int) Answer {
		if n >= finishAt {
			return Answer{Text: "The total is 1,234.00 EUR."}
		}
		return Answer{Tool: "search", Args: map[string]any{"q": fmt.Sprintf("page %d", n)}}
	}
}

// Config is what a stand-in bills at and answers.
type Config struct {
	// Price is what each call is billed at.
	Price pricing.Price
	// Clock is the run's clock: cache entries expire on it.
	Clock *Clock
	// Answers gives the reply to the nth call (from 1).
	Answers func(n int) Answer
	// PauseAfter, when set, moves Clock on by Pause after that call.
	PauseAfter int
	Pause      time.Duration
	// NoCache makes the stand-in cache nothing, as a provider without a
	// prompt cache: OpenAI caches whether asked or not, so this is how a
	// bench prices a run without caching.
	NoCache bool
	// Rewrite, when set, changes each request's body before it is read:
	// a test's way to send a context in another order.
	Rewrite func(n int, body []byte) []byte
}

// Call is what a stand-in billed for one call: input neither read from nor
// written to the cache, input written, input read, output; Marks is the
// number of cache breakpoints the call carried (Anthropic).
type Call struct {
	Input, Write, Read, Output uint64
	Marks                      int
}

// Cached is the share of the call's input read from the cache.
func (c Call) Cached() float64 {
	all := c.Input + c.Write + c.Read
	if all == 0 {
		return 0
	}
	return float64(c.Read) / float64(all)
}

// ledger is what both stand-ins share: the cache, by a prefix's hash, and
// the calls billed.
type ledger struct {
	cfg   Config
	mu    sync.Mutex
	cache map[string]time.Time
	calls []Call
	bill  float64
}

func newLedger(cfg Config) *ledger {
	if cfg.Answers == nil {
		cfg.Answers = Searches(1)
	}
	if cfg.Clock == nil {
		cfg.Clock = NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	}
	return &ledger{cfg: cfg, cache: map[string]time.Time{}}
}

// Calls are the calls billed so far, in order.
func (l *ledger) Calls() []Call {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Call(nil), l.calls...)
}

// Bill is the USD billed so far.
func (l *ledger) Bill() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.bill
}

// cachedLocked says whether the prefix hashed h is in the cache at now.
func (l *ledger) cachedLocked(h string, now time.Time) bool {
	if l.cfg.NoCache {
		return false
	}
	exp, ok := l.cache[h]
	return ok && now.Before(exp)
}

// chargeLocked records call c, billed at writePrice for its cache writes,
// and answers the call: the nth. It moves the clock on after the call
// PauseAfter.
func (l *ledger) chargeLocked(c Call, writePrice float64) (n int, a Answer) {
	p := l.cfg.Price
	n = len(l.calls) + 1
	a = l.cfg.Answers(n)
	c.Output = a.Output
	if c.Output == 0 {
		c.Output = 10
	}
	l.calls = append(l.calls, c)
	l.bill += (float64(c.Input)*p.InputPerMTok + float64(c.Write)*writePrice +
		float64(c.Read)*p.CacheReadPerMTok + float64(c.Output)*p.OutputPerMTok) / 1e6
	if n == l.cfg.PauseAfter {
		l.cfg.Clock.Advance(l.cfg.Pause)
	}
	return n, a
}

// hasher hashes a growing prefix.
type hasher struct{ h hash.Hash }

func newHasher(ns string) *hasher {
	h := sha256.New()
	h.Write([]byte(ns + "\x00"))
	return &hasher{h: h}
}

// add appends b to the prefix and returns the prefix's hash.
func (h *hasher) add(b []byte) string {
	h.h.Write(b)
	return hex.EncodeToString(h.h.Sum(nil))
}

// tokens is the stand-ins' token count of n bytes.
func tokens(n int) uint64 { return uint64(n+3) / 4 }

func writeJSON(w http.ResponseWriter, body string) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(body))
}

// wireName is the name a request offers tool under: itself, or its
// sanitised form (model.ToolNames).
func wireName(tool string, offered []string) string {
	for _, o := range offered {
		if o == tool {
			return o
		}
	}
	for _, o := range offered {
		if o == model.Sanitize(tool) {
			return o
		}
	}
	return tool
}

// jsonText is s as a JSON string.
func jsonText(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
