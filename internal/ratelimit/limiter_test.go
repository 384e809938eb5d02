package ratelimit

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock is a clock a test moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

var key = Key{Provider: "openai", Model: "gpt-test", Tenant: "acme"}

func limiter(models map[string]ModelLimit, tenant ModelLimit) (*Limiter, *fakeClock) {
	c := &fakeClock{now: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	return New(&Memory{}, Limits{Models: models, Tenant: func(string) ModelLimit { return tenant }}, c.Now), c
}

// TestRequestsBucket: a minute's worth of requests go at once; the next
// waits its turn at the refill rate, each one a turn later; after a
// minute's wait the bucket is full again.
func TestRequestsBucket(t *testing.T) {
	l, clock := limiter(map[string]ModelLimit{"openai/gpt-test": {RequestsPerMinute: 60}}, ModelLimit{})
	ctx := context.Background()
	for i := range 60 {
		if w, _, err := l.Take(ctx, key, 0); err != nil || w != 0 {
			t.Fatalf("request %d: wait %v, %v; want none", i+1, w, err)
		}
	}
	for i := 1; i <= 3; i++ {
		w, bucket, err := l.Take(ctx, key, 0)
		if err != nil || w != time.Duration(i)*time.Second || bucket != "model/openai/gpt-test/requests" {
			t.Fatalf("request %d past the minute's worth: wait %v for %q, %v; want %ds for the model's requests", 60+i, w, bucket, err, i)
		}
	}
	clock.add(2 * time.Minute)
	if w, _, _ := l.Take(ctx, key, 0); w != 0 {
		t.Errorf("after two minutes: wait %v, want none", w)
	}
}

// TestTokensSettleAndTenant: tokens are reserved and settled with what a
// call used; a tenant's bucket limits across models; a model with no
// limit of its own and a tenant with none never wait.
func TestTokensSettleAndTenant(t *testing.T) {
	l, _ := limiter(nil, ModelLimit{TokensPerMinute: 6000})
	ctx := context.Background()
	if w, _, _ := l.Take(ctx, key, 5000); w != 0 {
		t.Fatalf("5000 of 6000 tokens: wait %v", w)
	}
	// The call used 1000: 4000 go back.
	if err := l.Settle(ctx, key, 1000-5000, false); err != nil {
		t.Fatal(err)
	}
	if w, _, _ := l.Take(ctx, key, 5000); w != 0 {
		t.Fatalf("after settling: wait %v, want none (5000 of 5000 left)", w)
	}
	w, bucket, _ := l.Take(ctx, Key{Provider: "anthropic", Model: "other", Tenant: "acme"}, 1000)
	if w != 10*time.Second || bucket != "tenant/acme/tokens" {
		t.Fatalf("another model of the tenant: wait %v for %q, want 10s for the tenant's tokens", w, bucket)
	}
	free, _ := limiter(nil, ModelLimit{})
	if w, b, _ := free.Take(ctx, key, 1e9); w != 0 || b != "" {
		t.Errorf("no limits: wait %v for %q", w, b)
	}
}

// TestHold: a provider's retry-after holds every call of the model until
// then, even with tokens in hand; other models are not held.
func TestHold(t *testing.T) {
	l, clock := limiter(map[string]ModelLimit{"openai/*": {RequestsPerMinute: 600}}, ModelLimit{})
	ctx := context.Background()
	if err := l.Hold(ctx, key, clock.Now().Add(30*time.Second)); err != nil {
		t.Fatal(err)
	}
	if w, b, _ := l.Take(ctx, key, 0); w != 30*time.Second || b != "model/openai/gpt-test/hold" {
		t.Fatalf("a held model: wait %v for %q, want 30s for its hold", w, b)
	}
	// A model with no limit of its own is held too.
	free, fc := limiter(nil, ModelLimit{})
	if err := free.Hold(ctx, key, fc.Now().Add(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if w, _, _ := free.Take(ctx, key, 0); w != 10*time.Second {
		t.Fatalf("a held model with no limit: wait %v, want 10s", w)
	}
	if w, _, _ := l.Take(ctx, Key{Provider: "openai", Model: "other"}, 0); w != 0 {
		t.Errorf("another model: wait %v, want none", w)
	}
	clock.add(31 * time.Second)
	if w, _, _ := l.Take(ctx, key, 0); w != 0 {
		t.Errorf("after the hold: wait %v", w)
	}
}

// TestParseModelLimit: the flag's form, and what it refuses.
func TestParseModelLimit(t *testing.T) {
	k, m, err := ParseModelLimit("openai/gpt-4o=requests:500,tokens:300000")
	if err != nil || k != "openai/gpt-4o" || m.RequestsPerMinute != 500 || m.TokensPerMinute != 300000 {
		t.Fatalf("got %q %+v %v", k, m, err)
	}
	for _, bad := range []string{"openai=requests:1", "openai/gpt=requests:0", "openai/gpt=calls:5", "openai/gpt=", "openai/gpt=requests:x"} {
		if _, _, err := ParseModelLimit(bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("%q: %v, want refused naming it", bad, err)
		}
	}
}
