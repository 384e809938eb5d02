// Package pricing turns a model call's tokens into US dollars. A Table maps
// "provider/name" to a price per million input, output, cache-write and
// cache-read tokens, and to the model's prompt caching (on, with its TTL, or
// off); rein ships defaults for well-known models, and a models file
// (rein serve --prices) adds models or overrides them. docs/models.md says
// how the prices are used.
package pricing

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"time"
)

// PricesDate is when the default prices were read from the providers'
// published price lists.
const PricesDate = "2025-09-01"

// Prompt cache TTLs a models file may name.
const (
	TTL5m = 5 * time.Minute
	TTL1h = time.Hour
)

// Price is what one model charges, in US dollars per million tokens, and
// how its calls ask for prompt caching.
type Price struct {
	InputPerMTok  float64
	OutputPerMTok float64
	// CacheWritePerMTok is the price of input written to the prompt cache
	// with a 5-minute TTL, CacheWrite1hPerMTok with a 1-hour one (0: the
	// 5-minute price), CacheReadPerMTok of input read from it. A cache
	// price of 0 is the input price (WritePerMTok, ReadPerMTok): a price
	// that names none charges cached input as it did before caching.
	CacheWritePerMTok   float64
	CacheWrite1hPerMTok float64
	CacheReadPerMTok    float64
	// CacheOff switches the model's prompt caching off: no breakpoints,
	// no cache key. CacheTTL is how long a cached prefix is asked to live
	// (0: TTL5m).
	CacheOff bool
	CacheTTL time.Duration
}

// TTL is how long the model's calls ask the provider to keep their cached
// prefix; 0 when caching is off.
func (p Price) TTL() time.Duration {
	switch {
	case p.CacheOff:
		return 0
	case p.CacheTTL > 0:
		return p.CacheTTL
	}
	return TTL5m
}

// WritePerMTok is the cache-write price at the model's TTL; a price
// with no cache-write price (0) charges writes at the input price.
func (p Price) WritePerMTok() float64 {
	switch {
	case p.TTL() == TTL1h && p.CacheWrite1hPerMTok > 0:
		return p.CacheWrite1hPerMTok
	case p.CacheWritePerMTok > 0:
		return p.CacheWritePerMTok
	}
	return p.InputPerMTok
}

// ReadPerMTok is the cache-read price; a price with none (0) charges
// reads at the input price.
func (p Price) ReadPerMTok() float64 {
	if p.CacheReadPerMTok > 0 {
		return p.CacheReadPerMTok
	}
	return p.InputPerMTok
}

// Cost is the price of uncached input and output tokens.
func (p Price) Cost(input, output uint64) float64 {
	return (float64(input)*p.InputPerMTok + float64(output)*p.OutputPerMTok) / 1e6
}

// Bill is what the provider charges for a call's tokens: uncached input,
// input written to and read from the prompt cache (at WritePerMTok and
// CacheReadPerMTok), and output.
func (p Price) Bill(input, cacheWrite, cacheRead, output uint64) float64 {
	return (float64(input)*p.InputPerMTok + float64(cacheWrite)*p.WritePerMTok() +
		float64(cacheRead)*p.ReadPerMTok() + float64(output)*p.OutputPerMTok) / 1e6
}

// Affordable is how many output tokens usd buys after input tokens are paid
// for; 0 when the input alone costs more. A model whose output is free can
// afford any number (math.MaxUint64).
func (p Price) Affordable(usd float64, input uint64) uint64 {
	return p.AffordableAfter(usd, p.Cost(input, 0))
}

// AffordableAfter is how many output tokens usd buys after inputCost
// dollars of input are paid for; as Affordable.
func (p Price) AffordableAfter(usd, inputCost float64) uint64 {
	left := usd - inputCost
	if left <= 0 {
		return 0
	}
	if p.OutputPerMTok <= 0 {
		return math.MaxUint64
	}
	n := left * 1e6 / p.OutputPerMTok
	if n >= math.MaxUint64 {
		return math.MaxUint64
	}
	return uint64(n)
}

// Table holds prices by "provider/name". Lookups fall back from the full
// name to a prefix entry ending in "*" ("script/*"), longest first.
type Table struct {
	prices map[string]Price
}

// Defaults are the prices rein knows without a models file, as the
// providers published them on PricesDate (US dollars per million tokens).
// They date; a models file overrides them. Anthropic charges 1.25 times
// the input price to write the cache for 5 minutes, 2 times for an hour,
// and a tenth to read it (Anthropic); OpenAI caches for free and charges its
// cached input price, per model, to read. The scripted model is free.
var Defaults = map[string]Price{
	"openai/gpt-4o":               openAI(2.50, 10.00, 1.25),
	"openai/gpt-4o-mini":          openAI(0.15, 0.60, 0.075),
	"openai/gpt-4.1":              openAI(2.00, 8.00, 0.50),
	"openai/gpt-4.1-mini":         openAI(0.40, 1.60, 0.10),
	"openai/gpt-4.1-nano":         openAI(0.10, 0.40, 0.025),
	"openai/o4-mini":              openAI(1.10, 4.40, 0.275),
	"anthropic/claude-opus-4-1":   anthropic(15.00, 75.00),
	"anthropic/claude-sonnet-4-5": anthropic(3.00, 15.00),
	"anthropic/claude-haiku-4-5":  anthropic(1.00, 5.00),
	"script/*":                    {},
}

// anthropic is an Anthropic model's price from its input and output
// prices, with the cache's multipliers.
func anthropic(in, out float64) Price {
	return Price{InputPerMTok: in, OutputPerMTok: out, CacheWritePerMTok: in * 1.25, CacheWrite1hPerMTok: in * 2, CacheReadPerMTok: in / 10}
}

// openAI is an OpenAI model's price: writing the cache costs what input
// does, reading it the model's cached-input price.
func openAI(in, out, cached float64) Price {
	return Price{InputPerMTok: in, OutputPerMTok: out, CacheWritePerMTok: in, CacheReadPerMTok: cached}
}

// New returns a table of exactly these prices (nil: none).
func New(prices map[string]Price) *Table {
	t := &Table{prices: make(map[string]Price, len(prices))}
	for k, v := range prices {
		t.prices[k] = v
	}
	return t
}

// Default returns a table of the default prices.
func Default() *Table { return New(Defaults) }

// Lookup returns the price of provider/name and whether the table has one.
func (t *Table) Lookup(provider, name string) (Price, bool) {
	if t == nil {
		return Price{}, false
	}
	key := provider + "/" + name
	if p, ok := t.prices[key]; ok {
		return p, true
	}
	best, found := "", false
	for k := range t.prices {
		prefix, ok := strings.CutSuffix(k, "*")
		if ok && strings.HasPrefix(key, prefix) && len(prefix) >= len(best) {
			best, found = prefix, true
		}
	}
	if !found {
		return Price{}, false
	}
	return t.prices[best+"*"], true
}

// Models lists the table's keys, sorted, for error messages.
func (t *Table) Models() []string {
	if t == nil {
		return nil
	}
	keys := make([]string, 0, len(t.prices))
	for k := range t.prices {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Load reads a models file over the defaults: a JSON object mapping
// "provider/name" (or a "provider/prefix*" pattern) to
// {"input_per_mtok": N, "output_per_mtok": N}, and optionally
// "cache_write_per_mtok", "cache_write_1h_per_mtok", "cache_read_per_mtok"
// (unset or 0: the input price, which is no discount) and "prompt_cache" ("5m",
// the default, "1h" or "off"). Unknown fields, negative or missing prices,
// and malformed keys are errors that name the entry.
func Load(path string) (*Table, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the price file: %w", err)
	}
	t := Default()
	if err := t.merge(raw); err != nil {
		return nil, fmt.Errorf("price file %s: %w", path, err)
	}
	return t, nil
}

func (t *Table) merge(raw []byte) error {
	var entries map[string]json.RawMessage
	if err := json.Unmarshal(raw, &entries); err != nil {
		return fmt.Errorf("not a JSON object of prices: %w", err)
	}
	for key, body := range entries {
		provider, name, ok := strings.Cut(key, "/")
		if !ok || provider == "" || name == "" {
			return fmt.Errorf("%q: name a model as \"provider/name\", such as \"openai/gpt-4o\"", key)
		}
		var fields struct {
			In      *float64 `json:"input_per_mtok"`
			Out     *float64 `json:"output_per_mtok"`
			Write   *float64 `json:"cache_write_per_mtok"`
			Write1h *float64 `json:"cache_write_1h_per_mtok"`
			Read    *float64 `json:"cache_read_per_mtok"`
			Cache   string   `json:"prompt_cache"`
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&fields); err != nil {
			return fmt.Errorf("%q: %w (the fields are input_per_mtok, output_per_mtok, cache_write_per_mtok, cache_write_1h_per_mtok, cache_read_per_mtok and prompt_cache)", key, err)
		}
		if fields.In == nil || fields.Out == nil {
			return fmt.Errorf("%q: set both input_per_mtok and output_per_mtok (US dollars per million tokens)", key)
		}
		p := Price{InputPerMTok: *fields.In, OutputPerMTok: *fields.Out}
		for _, f := range []struct {
			v   *float64
			dst *float64
		}{{fields.Write, &p.CacheWritePerMTok}, {fields.Write1h, &p.CacheWrite1hPerMTok}, {fields.Read, &p.CacheReadPerMTok}} {
			if f.v != nil {
				*f.dst = *f.v
			}
		}
		for _, v := range []float64{p.InputPerMTok, p.OutputPerMTok, p.CacheWritePerMTok, p.CacheWrite1hPerMTok, p.CacheReadPerMTok} {
			if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
				return fmt.Errorf("%q: a price must be a finite number of dollars, 0 or more", key)
			}
		}
		switch fields.Cache {
		case "", "5m":
		case "1h":
			p.CacheTTL = TTL1h
		case "off":
			p.CacheOff = true
		default:
			return fmt.Errorf("%q: prompt_cache %q is not one of \"5m\" (the default), \"1h\" or \"off\"", key, fields.Cache)
		}
		t.prices[key] = p
	}
	if len(entries) == 0 {
		return errors.New("the file lists no prices")
	}
	return nil
}
