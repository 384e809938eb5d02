package anthropic_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/reinhq/rein/internal/model"
)

// A call that asks for caching marks three breakpoints, with the TTL
// asked: the last tool, the first message (the goal and inputs) and the
// transcript's last block; one that does not marks none.
func TestCacheBreakpoints(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cache *model.Cache
		marks int
		ttl   string
	}{
		{"5m", &model.Cache{TTL: 5 * time.Minute}, 3, "5m"},
		{"1h", &model.Cache{TTL: time.Hour}, 3, "1h"},
		{"off", nil, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, f := serve(t, &fake{body: message("end_turn", `{"type":"text","text":"done"}`)}, nil)
			req := request()
			req.Cache = tc.cache
			if _, err := m.Next(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			var body struct {
				Tools    []map[string]any `json:"tools"`
				Messages []struct {
					Content []map[string]any `json:"content"`
				} `json:"messages"`
			}
			if err := json.Unmarshal(f.request().body, &body); err != nil {
				t.Fatal(err)
			}
			var at []string
			check := func(where string, b map[string]any) {
				if cc, ok := b["cache_control"].(map[string]any); ok {
					at = append(at, where)
					if cc["ttl"] != tc.ttl {
						t.Errorf("%s: cache_control %v, want ttl %s", where, cc, tc.ttl)
					}
				}
			}
			for _, tl := range body.Tools {
				check("tool "+tl["name"].(string), tl)
			}
			for i, msg := range body.Messages {
				for j, b := range msg.Content {
					check(jsonIndex(i, j), b)
				}
			}
			if len(at) != tc.marks {
				t.Fatalf("breakpoints at %v, want %d", at, tc.marks)
			}
			if tc.marks > 0 {
				last := body.Messages[len(body.Messages)-1]
				if at[0] != "tool search" || at[1] != "message 0 block 0" || at[2] != jsonIndex(len(body.Messages)-1, len(last.Content)-1) {
					t.Fatalf("breakpoints at %v, want the last tool, the first message and the last block", at)
				}
			}
		})
	}
}

func jsonIndex(i, j int) string { return fmt.Sprintf("message %d block %d", i, j) }
