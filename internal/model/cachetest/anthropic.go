package cachetest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// anthropicMinTokens is the shortest prefix Anthropic caches (Claude
// Sonnet's and Opus' minimum): a breakpoint before it is sent but caches
// nothing.
const anthropicMinTokens = 1024

// Anthropic is a stand-in for Anthropic's Messages API that caches as the
// real one does: by exact prefix (the tools, the system text, then each
// message's blocks, in that order), written at the blocks marked
// cache_control for the TTL they ask, and found again at any block
// boundary up to the last mark, a prefix of 1,024 tokens or more. Usage reports uncached input, cache writes
// and reads apart. count_tokens is free and touches no cache.
type Anthropic struct{ *ledger }

// NewAnthropic is a stand-in Anthropic; serve it with httptest.NewServer.
func NewAnthropic(cfg Config) *Anthropic { return &Anthropic{newLedger(cfg)} }

// block is one block of a request in cache order, its cache_control left
// out; ttl > 0 marks a breakpoint.
type block struct {
	data []byte
	ttl  time.Duration
}

func (f *Anthropic) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	var req struct {
		Tools    []map[string]any `json:"tools"`
		System   []map[string]any `json:"system"`
		Messages []struct {
			Role    string           `json:"role"`
			Content []map[string]any `json:"content"`
		} `json:"messages"`
	}
	counting := strings.HasSuffix(r.URL.Path, "/count_tokens")
	f.mu.Lock()
	defer f.mu.Unlock()
	if rw := f.cfg.Rewrite; rw != nil && !counting {
		raw = rw(len(f.calls)+1, raw)
	}
	if err := json.Unmarshal(raw, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var blocks []block
	var offered []string
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
		if name, ok := t["name"].(string); ok {
			offered = append(offered, name)
		}
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
	now := f.cfg.Clock.read()
	h := newHasher("")
	hashes := make([]string, len(blocks))
	upTo := make([]uint64, len(blocks)) // tokens up to and with each block
	var total uint64
	lastMark, marks := -1, 0
	for i, b := range blocks {
		hashes[i] = h.add(b.data)
		total += tokens(len(b.data))
		upTo[i] = total
		if b.ttl > 0 {
			marks++
			if total >= anthropicMinTokens {
				lastMark = i
			}
		}
	}
	if counting {
		writeJSON(w, fmt.Sprintf(`{"input_tokens":%d}`, total))
		return
	}
	var read, write uint64
	hit := -1
	for i := lastMark; i >= 0; i-- {
		if f.cachedLocked(hashes[i], now) {
			hit, read = i, upTo[i]
			break
		}
	}
	if lastMark > hit {
		write = upTo[lastMark] - read
	}
	// Each breakpoint at or before the last is written (or, read, has its
	// TTL refreshed).
	for i, b := range blocks {
		if b.ttl > 0 && i <= lastMark && upTo[i] >= anthropicMinTokens {
			f.cache[hashes[i]] = now.Add(b.ttl)
		}
	}
	writePrice := f.cfg.Price.CacheWritePerMTok
	if lastMark >= 0 && blocks[lastMark].ttl == time.Hour {
		writePrice = f.cfg.Price.CacheWrite1hPerMTok
	}
	c := Call{Input: total - read - write, Write: write, Read: read, Marks: marks}
	n, a := f.chargeLocked(c, writePrice)
	c = f.calls[n-1]
	content, stop := fmt.Sprintf(`[{"type":"text","text":%s}]`, jsonText(a.Text)), "end_turn"
	if a.Tool != "" {
		args, _ := json.Marshal(a.Args)
		content = fmt.Sprintf(`[{"type":"tool_use","id":"toolu_%d","name":%q,"input":%s}]`, n, wireName(a.Tool, offered), args)
		stop = "tool_use"
	}
	writeJSON(w, fmt.Sprintf(`{"id":"msg_%d","type":"message","role":"assistant","model":"claude-test","content":%s,"stop_reason":%q,`+
		`"usage":{"input_tokens":%d,"cache_creation_input_tokens":%d,"cache_read_input_tokens":%d,"output_tokens":%d}}`,
		n, content, stop, c.Input, c.Write, c.Read, c.Output))
}
