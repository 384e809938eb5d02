package console

import (
	"io"
	"net/http"
	"testing"
)

// TestMountsUnderAPath: a mount whose path ends in "/" serves every path
// under it (the AG-UI face's /agui/), an exact mount only its own path,
// and a path under neither is the console's; the Host check comes first.
func TestMountsUnderAPath(t *testing.T) {
	named := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, name) })
	}
	srv, _ := newConsoleWith(t, Options{Mounts: map[string]http.Handler{"/agui/": named("agui"), "/mcp": named("mcp")}})
	for path, want := range map[string]string{
		"/agui/runs/run_1": "agui",
		"/agui/":           "agui",
		"/mcp":             "mcp",
		"/mcp/x":           "",
		"/aguix/runs":      "",
		"/agui":            "",
	} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if got := string(body); (want != "" && got != want) || (want == "" && (got == "agui" || got == "mcp")) {
			t.Errorf("GET %s: %q, want %q", path, got, want)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/agui/runs/run_1", nil)
	req.Host = "evil.example.com"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a foreign Host under a mount: %d, want 403", resp.StatusCode)
	}
}
