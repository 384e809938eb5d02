package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeHTTPA2A: rein serve --http --http-a2a --tokens serves the
// agent card with a skill per open task and bearer as its scheme, and
// the JSON-RPC binding behind the tokens: no token is 401, a token and a
// task that does not exist a JSON-RPC error. The twins: without
// --http-a2a there is no card; --http-a2a without --http is a usage
// error.
func TestServeHTTPA2A(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "lookup.json"), []byte(`{"name": "lookup", "description": "Look.", "goal": "look"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tokens := writeFile(t, "tokens.json", `{"principals": [{"id": "ops", "tenant": "acme", "roles": ["operator"], "token_sha256": "`+hashOf("ops-token")+`"}]}`)
	web := freeAddr(t)
	serveInProcess(t, newDB(t), "--http", web, "--http-a2a", "--tokens", tokens, "--tasks", dir)
	do := func(method, url, token, body string) (int, string) {
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := do(http.MethodGet, "http://"+web+"/.well-known/agent-card.json", "", "")
	var card struct {
		Skills          []struct{ ID string }
		SecuritySchemes map[string]any
	}
	if err := json.Unmarshal([]byte(body), &card); code != http.StatusOK || err != nil || len(card.Skills) != 1 || card.Skills[0].ID != "lookup" || card.SecuritySchemes["bearer"] == nil {
		t.Errorf("the card: %d %s, want the lookup skill and bearer", code, body)
	}
	get := `{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"run_nope"}}`
	if code, body := do(http.MethodPost, "http://"+web+"/a2a", "", get); code != http.StatusUnauthorized {
		t.Errorf("no token: %d %s, want 401", code, body)
	}
	if code, body := do(http.MethodPost, "http://"+web+"/a2a", "ops-token", get); code != http.StatusOK || !strings.Contains(body, `"error"`) || !strings.Contains(body, "run_nope") {
		t.Errorf("a task that does not exist: %d %s, want a JSON-RPC error naming it", code, body)
	}

	plain := freeAddr(t)
	serveInProcess(t, newDB(t), "--http", plain, "--tokens", tokens)
	if code, body := do(http.MethodGet, "http://"+plain+"/.well-known/agent-card.json", "", ""); code == http.StatusOK && strings.Contains(body, "skills") {
		t.Errorf("without --http-a2a the card was served")
	}
	r := cli(t, "serve", "--db", newDB(t), "--listen", "127.0.0.1:0", "--http-a2a").mustExit(t, exitUsage)
	mustContain(t, "--http-a2a", r.stderr, "--http-a2a is for the HTTP face")
}
