package pricing

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCostAndAffordable(t *testing.T) {
	p := Price{InputPerMTok: 3, OutputPerMTok: 15}
	if got := p.Cost(1_000_000, 100_000); math.Abs(got-4.5) > 1e-12 {
		t.Fatalf("Cost = %v, want 4.5", got)
	}
	// $1 after 100k input tokens ($0.30) leaves $0.70: 46,666 output tokens.
	if got := p.Affordable(1, 100_000); got != 46_666 {
		t.Fatalf("Affordable = %d, want 46666", got)
	}
	if got := p.Affordable(0.10, 100_000); got != 0 {
		t.Fatalf("Affordable when the input alone is over = %d, want 0", got)
	}
	if got := (Price{InputPerMTok: 1}).Affordable(1, 10); got != math.MaxUint64 {
		t.Fatalf("free output affordable = %d, want unlimited", got)
	}
}

func TestLookupFallsBackToPattern(t *testing.T) {
	tb := Default()
	if p, ok := tb.Lookup("openai", "gpt-4o"); !ok || p.OutputPerMTok != 10 {
		t.Fatalf("openai/gpt-4o = %v, %v", p, ok)
	}
	if p, ok := tb.Lookup("script", "anything"); !ok || p != (Price{}) {
		t.Fatalf("script/anything = %v, %v; want free via script/*", p, ok)
	}
	if _, ok := tb.Lookup("openai", "no-such-model"); ok {
		t.Fatal("an unknown model has a price")
	}
	var nilTable *Table
	if _, ok := nilTable.Lookup("openai", "gpt-4o"); ok {
		t.Fatal("a nil table has a price")
	}
}

func write(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "prices.json")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadOverridesAndAdds(t *testing.T) {
	tb, err := Load(write(t, `{"openai/gpt-4o": {"input_per_mtok": 1, "output_per_mtok": 2},
		"local/llama*": {"input_per_mtok": 0, "output_per_mtok": 0.5}}`))
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := tb.Lookup("openai", "gpt-4o"); p.OutputPerMTok != 2 {
		t.Fatalf("override not applied: %v", p)
	}
	if p, ok := tb.Lookup("local", "llama-3.1-8b"); !ok || p.OutputPerMTok != 0.5 {
		t.Fatalf("pattern entry: %v, %v", p, ok)
	}
	if _, ok := tb.Lookup("anthropic", "claude-haiku-4-5"); !ok {
		t.Fatal("the defaults are lost when a file is loaded")
	}
}

func TestLoadRefusesBadFiles(t *testing.T) {
	for name, tc := range map[string]struct{ body, want string }{
		"not json":      {`nope`, "not a JSON object"},
		"no slash":      {`{"gpt-4o": {"input_per_mtok": 1, "output_per_mtok": 1}}`, `"provider/name"`},
		"typo field":    {`{"openai/x": {"input_per_mtok": 1, "ouput_per_mtok": 1}}`, "ouput_per_mtok"},
		"missing price": {`{"openai/x": {"input_per_mtok": 1}}`, "set both"},
		"negative":      {`{"openai/x": {"input_per_mtok": -1, "output_per_mtok": 1}}`, "0 or more"},
		"empty":         {`{}`, "no prices"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Load(write(t, tc.body))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Fatal("a missing file loaded")
	}
}

func TestBillChargesTheCacheAtItsPrices(t *testing.T) {
	p, _ := Default().Lookup("anthropic", "claude-sonnet-4-5")
	// 1M uncached at $3, 1M written at $3.75, 1M read at $0.30, 1M out at $15.
	if got := p.Bill(1e6, 1e6, 1e6, 1e6); math.Abs(got-22.05) > 1e-9 {
		t.Fatalf("Bill = %v, want 22.05", got)
	}
	// The failure twin: the same tokens all at the input price cost more
	// for reads and less for writes; Bill is not Cost.
	if all := p.Cost(3e6, 1e6); math.Abs(all-24) > 1e-9 || all == p.Bill(1e6, 1e6, 1e6, 1e6) {
		t.Fatalf("Cost of all input = %v", all)
	}
	p.CacheTTL = TTL1h
	if got := p.WritePerMTok(); got != 6 {
		t.Fatalf("1h write price = %v, want 6 (2x input)", got)
	}
	o, _ := Default().Lookup("openai", "gpt-4.1")
	if o.CacheReadPerMTok != 0.5 || o.CacheWritePerMTok != o.InputPerMTok {
		t.Fatalf("openai/gpt-4.1 cache prices = %+v", o)
	}
}

func TestLoadCacheFields(t *testing.T) {
	tb, err := Load(write(t, `{"anthropic/x": {"input_per_mtok": 2, "output_per_mtok": 4, "cache_read_per_mtok": 0.2, "prompt_cache": "1h", "cache_write_1h_per_mtok": 4},
		"openai/y": {"input_per_mtok": 1, "output_per_mtok": 1, "prompt_cache": "off"}}`))
	if err != nil {
		t.Fatal(err)
	}
	x, _ := tb.Lookup("anthropic", "x")
	if x.TTL() != TTL1h || x.WritePerMTok() != 4 || x.CacheReadPerMTok != 0.2 {
		t.Fatalf("anthropic/x = %+v", x)
	}
	y, _ := tb.Lookup("openai", "y")
	if y.TTL() != 0 || y.ReadPerMTok() != 1 || y.WritePerMTok() != 1 {
		t.Fatalf("openai/y = %+v: caching off, cache prices unset read as the input price", y)
	}
	if _, err := Load(write(t, `{"openai/z": {"input_per_mtok": 1, "output_per_mtok": 1, "prompt_cache": "2h"}}`)); err == nil || !strings.Contains(err.Error(), "prompt_cache") {
		t.Fatalf("a bad prompt_cache loaded: %v", err)
	}
}
