package cachetest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// OpenAI caching, as its API documents it: a prompt of at least
// openAIMinTokens tokens has its prefix cached in steps of openAIStep
// tokens, for openAITTL after its last use, under the request's
// prompt_cache_key.
const (
	openAIMinTokens = 1024
	openAIStep      = 128
	openAITTL       = 5 * time.Minute
)

// OpenAI is a stand-in for OpenAI's Chat Completions API that caches as the
// real one does, with no breakpoints: every prefix of a prompt (the tools,
// then the messages, in order) of at least 1,024 tokens, in steps of 128,
// under the request's prompt_cache_key; the next call reads the longest
// such prefix it shares. Usage reports prompt_tokens with the cached part
// in prompt_tokens_details.cached_tokens; cached input is billed at the
// cache-read price and writing costs nothing more than the input price.
type OpenAI struct{ *ledger }

// NewOpenAI is a stand-in OpenAI; serve it with httptest.NewServer.
func NewOpenAI(cfg Config) *OpenAI { return &OpenAI{newLedger(cfg)} }

func (f *OpenAI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	var req struct {
		Model    string           `json:"model"`
		Key      string           `json:"prompt_cache_key"`
		Tools    []map[string]any `json:"tools"`
		Messages []map[string]any `json:"messages"`
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if rw := f.cfg.Rewrite; rw != nil {
		raw = rw(len(f.calls)+1, raw)
	}
	if err := json.Unmarshal(raw, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var prompt []byte
	var offered []string
	for _, t := range req.Tools {
		if fn, ok := t["function"].(map[string]any); ok {
			if name, ok := fn["name"].(string); ok {
				offered = append(offered, name)
			}
		}
		data, _ := json.Marshal(t)
		prompt = append(append(prompt, "tool:"...), data...)
	}
	for _, m := range req.Messages {
		data, _ := json.Marshal(m)
		prompt = append(append(prompt, "message:"...), data...)
	}
	now := f.cfg.Clock.read()
	total := tokens(len(prompt))
	h := newHasher(req.Model + "\x00" + req.Key)
	var read uint64
	var seen []string
	from := 0
	for k := uint64(openAIMinTokens); k*4 <= uint64(len(prompt)); k += openAIStep {
		hash := h.add(prompt[from : k*4])
		from = int(k * 4)
		if f.cachedLocked(hash, now) {
			read = k
		}
		seen = append(seen, hash)
	}
	for _, hash := range seen {
		f.cache[hash] = now.Add(openAITTL)
	}
	c := Call{Input: total - read, Read: read}
	n, a := f.chargeLocked(c, 0)
	c = f.calls[n-1]
	msg, finish := fmt.Sprintf(`{"role":"assistant","content":%s}`, jsonText(a.Text)), "stop"
	if a.Tool != "" {
		args, _ := json.Marshal(a.Args)
		msg = fmt.Sprintf(`{"role":"assistant","content":null,"tool_calls":[{"id":"call_%d","type":"function","function":{"name":%s,"arguments":%s}}]}`,
			n, jsonText(wireName(a.Tool, offered)), jsonText(string(args)))
		finish = "tool_calls"
	}
	writeJSON(w, fmt.Sprintf(`{"id":"chatcmpl-%d","object":"chat.completion","created":1,"model":%s,"choices":[{"index":0,"finish_reason":%q,"message":%s}],`+
		`"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d}}}`,
		n, jsonText(req.Model), finish, msg, total, c.Output, total+c.Output, c.Read))
}
