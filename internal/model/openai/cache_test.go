package openai_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/reinhq/rein/internal/model"
)

// A call that asks for caching sends the run tree's key as
// prompt_cache_key, and the cached tokens the API reports are taken out of
// the input into cache_read_input_tokens, as each is billed.
func TestCacheKeyAndCachedTokens(t *testing.T) {
	m, f := serve(t, &fake{body: `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-test","choices":[{"index":0,"finish_reason":"stop",` +
		`"message":{"role":"assistant","content":"done"}}],"usage":{"prompt_tokens":2000,"completion_tokens":30,"total_tokens":2030,"prompt_tokens_details":{"cached_tokens":1792}}}`})
	req := request()
	req.Cache = &model.Cache{TTL: 5 * time.Minute, Key: "run-root"}
	r, err := m.Next(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if u := r.Usage; u.GetInputTokens() != 208 || u.GetCacheReadInputTokens() != 1792 || u.GetCacheWriteInputTokens() != 0 || u.GetOutputTokens() != 30 {
		t.Fatalf("usage %v, want 208 uncached, 1792 read from the cache, 30 out", u)
	}
	var body map[string]any
	if err := json.Unmarshal(f.bodies[0], &body); err != nil {
		t.Fatal(err)
	}
	if body["prompt_cache_key"] != "run-root" {
		t.Fatalf("prompt_cache_key %v, want the root run's ID", body["prompt_cache_key"])
	}

	// The twin: a call that asks for no caching sends no key.
	if _, err := m.Next(context.Background(), request()); err != nil {
		t.Fatal(err)
	}
	body = nil
	_ = json.Unmarshal(f.bodies[1], &body)
	if _, ok := body["prompt_cache_key"]; ok {
		t.Fatalf("a call with caching off sent prompt_cache_key %v", body["prompt_cache_key"])
	}
}
