package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeHTTPAGUI: rein serve --http --http-agui --tokens serves the
// AG-UI face under /agui/ behind the tokens: no token is 401, a token and
// a run that does not exist 404. The twins: without --http-agui, /agui/ is
// not the face; --http-agui without --http is a usage error.
func TestServeHTTPAGUI(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "lookup.json"), []byte(`{"name": "lookup", "description": "Look.", "goal": "look"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tokens := writeFile(t, "tokens.json", `{"principals": [{"id": "ops", "tenant": "acme", "roles": ["operator"], "token_sha256": "`+hashOf("ops-token")+`"}]}`)
	web := freeAddr(t)
	serveInProcess(t, newDB(t), "--http", web, "--http-agui", "--tokens", tokens, "--tasks", dir)
	get := func(addr, token string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/agui/runs/run_nope", nil)
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
	if code, body := get(web, ""); code != http.StatusUnauthorized {
		t.Errorf("no token: %d %s, want 401", code, body)
	}
	if code, body := get(web, "ops-token"); code != http.StatusNotFound || !strings.Contains(body, "run_nope") {
		t.Errorf("a run that does not exist: %d %s, want 404 naming it", code, body)
	}

	plain := freeAddr(t)
	serveInProcess(t, newDB(t), "--http", plain, "--tokens", tokens)
	if code, _ := get(plain, ""); code == http.StatusUnauthorized {
		t.Errorf("without --http-agui, /agui/ answered as the AG-UI face")
	}
	db := newDB(t)
	r := cli(t, "serve", "--db", db, "--listen", "127.0.0.1:0", "--http-agui").mustExit(t, exitUsage)
	mustContain(t, "--http-agui", r.stderr, "--http-agui is for the HTTP face")
}
