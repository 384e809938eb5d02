//go:build reinbench

package bench

import (
	"testing"
)

// The cache-cost scenario runs every task through the engine on both
// stand-ins, each run billed as the stand-in bills (CacheCost fails
// otherwise): the 30-step task costs under half with caching, on each
// provider, while the examples, whose prompts are under the providers'
// 1,024-token minimum, cost the same either way.
func TestCacheCost(t *testing.T) {
	r, err := CacheCost(t.Context(), Options{Backend: boltBackend(), Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Met || r.Runs != 12 {
		t.Fatalf("cache-cost: ratio %.2f (target %.2f), %d runs; want met, 12 runs", r.Ratio, r.Target, r.Runs)
	}
	for _, run := range CacheCostRuns() {
		on, off := r.Extra[run+"/on/usd"], r.Extra[run+"/off/usd"]
		if off <= 0 || r.Extra[run+"/off/cache_read"] != 0 {
			t.Errorf("%s without caching: $%.4f, %v read from the cache; want a cost and no read", run, off, r.Extra[run+"/off/cache_read"])
		}
		synthetic := run == "anthropic/synthetic-30" || run == "openai/synthetic-30"
		if synthetic && on > off/2 {
			t.Errorf("%s: $%.4f with caching, $%.4f without; want under half", run, on, off)
		}
		if !synthetic && on != off {
			t.Errorf("%s: $%.4f with caching, $%.4f without; a prompt under 1,024 tokens caches nothing", run, on, off)
		}
	}
}
