// Package pricing turns a model call's tokens into US dollars. A Table maps
// "provider/name" to a price per million input and output tokens; rein ships
// defaults for well-known models, and a price file (rein serve --prices)
// adds models or overrides them.
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
)

// Price is what one model charges, in US dollars per million tokens.
type Price struct {
	InputPerMTok  float64 `json:"input_per_mtok"`
	OutputPerMTok float64 `json:"output_per_mtok"`
}

// Cost is the price of input and output tokens.
func (p Price) Cost(input, output uint64) float64 {
	return (float64(input)*p.InputPerMTok + float64(output)*p.OutputPerMTok) / 1e6
}

// Affordable is how many output tokens usd buys after input tokens are paid
// for; 0 when the input alone costs more. A model whose output is free can
// afford any number (math.MaxUint64).
func (p Price) Affordable(usd float64, input uint64) uint64 {
	left := usd - float64(input)*p.InputPerMTok/1e6
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

// Defaults are the prices rein knows without a price file, as published by
// the providers (US dollars per million tokens). They date; a price file
// overrides them. The scripted model is free.
var Defaults = map[string]Price{
	"openai/gpt-4o":               {InputPerMTok: 2.50, OutputPerMTok: 10.00},
	"openai/gpt-4o-mini":          {InputPerMTok: 0.15, OutputPerMTok: 0.60},
	"openai/gpt-4.1":              {InputPerMTok: 2.00, OutputPerMTok: 8.00},
	"openai/gpt-4.1-mini":         {InputPerMTok: 0.40, OutputPerMTok: 1.60},
	"openai/gpt-4.1-nano":         {InputPerMTok: 0.10, OutputPerMTok: 0.40},
	"openai/o4-mini":              {InputPerMTok: 1.10, OutputPerMTok: 4.40},
	"anthropic/claude-opus-4-1":   {InputPerMTok: 15.00, OutputPerMTok: 75.00},
	"anthropic/claude-sonnet-4-5": {InputPerMTok: 3.00, OutputPerMTok: 15.00},
	"anthropic/claude-haiku-4-5":  {InputPerMTok: 1.00, OutputPerMTok: 5.00},
	"script/*":                    {},
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

// Load reads a price file over the defaults: a JSON object mapping
// "provider/name" (or a "provider/prefix*" pattern) to
// {"input_per_mtok": N, "output_per_mtok": N}. Unknown fields, negative or
// missing prices, and malformed keys are errors that name the entry.
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
			In  *float64 `json:"input_per_mtok"`
			Out *float64 `json:"output_per_mtok"`
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&fields); err != nil {
			return fmt.Errorf("%q: %w (the fields are input_per_mtok and output_per_mtok)", key, err)
		}
		if fields.In == nil || fields.Out == nil {
			return fmt.Errorf("%q: set both input_per_mtok and output_per_mtok (US dollars per million tokens)", key)
		}
		for _, v := range []float64{*fields.In, *fields.Out} {
			if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
				return fmt.Errorf("%q: a price must be a finite number of dollars, 0 or more", key)
			}
		}
		t.prices[key] = Price{InputPerMTok: *fields.In, OutputPerMTok: *fields.Out}
	}
	if len(entries) == 0 {
		return errors.New("the file lists no prices")
	}
	return nil
}
