package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/reinhq/rein/internal/auth"
)

// TestMCPOverStdio: rein mcp, launched as a subprocess by the Go SDK's
// client over stdio, offers the catalog's task as a tool, starts the
// refund example, and approves its write by the approve tool; the run
// completes.
func TestMCPOverStdio(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var script []json.RawMessage
	model, err := os.ReadFile(example("refund", "model.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(model)), "\n") {
		script = append(script, json.RawMessage(line))
	}
	modelJSON, _ := json.Marshal(map[string]any{"provider": "script", "script": script})
	task := `{"name": "refund", "description": "Refund a duplicate charge.",
  "input_schema": {"type": "object", "properties": {"invoice_id": {"type": "string"}}, "required": ["invoice_id"]},
  "goal": "Refund the duplicate charge.",
  "tools": [{"name": "invoices.get", "tier": "TOOL_TIER_READ"}, {"name": "refunds.create", "tier": "TOOL_TIER_WRITE"}],
  "model": ` + string(modelJSON) + `}`
	if err := os.WriteFile(filepath.Join(dir, "refund.json"), []byte(task), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "mcp", "--db", newDB(t), "--tasks", dir, "--tools", "fixture:"+example("refund", "tools.json"))
	cmd.Env = append(os.Environ(), cliEnv+"=1")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	if !strings.Contains(strings.Join(names, ","), "start_refund") {
		t.Fatalf("tools %v lack start_refund", names)
	}
	// Arguments that break the schema: an error, and no run.
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "start_refund", Arguments: map[string]any{"invoice_id": 42}})
	if err != nil || !res.IsError || !strings.Contains(text(res), "inputs.invoice_id") {
		t.Fatalf("a start that breaks the schema: %v, %s", err, text(res))
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "start_refund", Arguments: map[string]any{"invoice_id": "INV-42"}})
	if err != nil || res.IsError {
		t.Fatalf("start: %v, %s", err, text(res))
	}
	var started struct {
		RunID   string `json:"run_id"`
		Status  string `json:"status"`
		Pending struct {
			Proposal struct {
				ProposalID string `json:"proposal_id"`
				Hash       string `json:"hash"`
			} `json:"proposal"`
		} `json:"pending"`
	}
	if err := json.Unmarshal([]byte(text(res)), &started); err != nil || started.Status != "RUN_STATUS_NEEDS_APPROVAL" {
		t.Fatalf("start answered %s (%v)", text(res), err)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "approve", Arguments: map[string]any{
		"run_id": started.RunID, "proposal_id": started.Pending.Proposal.ProposalID, "proposal_hash": started.Pending.Proposal.Hash}})
	if err != nil || res.IsError {
		t.Fatalf("approve: %v, %s", err, text(res))
	}
	for {
		res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "get_run", Arguments: map[string]any{"run_id": started.RunID}})
		if err != nil || res.IsError {
			t.Fatalf("get_run: %v, %s", err, text(res))
		}
		if strings.Contains(text(res), "RUN_STATUS_COMPLETED") {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the run did not complete: %s", text(res))
		}
		// The run goes on in the subprocess: read it again through its
		// resource, which waits on nothing but the call.
		if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "rein://runs/" + started.RunID + "/transcript"}); err != nil {
			t.Fatal(err)
		}
	}
}

func text(res *mcp.CallToolResult) string {
	if res == nil {
		return ""
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// TestServeHTTPMCP: rein serve --http --http-mcp --tokens serves the MCP
// face at /mcp: a request without a token is 401 naming the resource
// metadata, which is served; the Go SDK's client with a token lists the
// catalog's task; a foreign Host is refused by the console's guard. The
// twin: without --http-mcp, /mcp is not the face.
func TestServeHTTPMCP(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "lookup.json"), []byte(`{"name": "lookup", "description": "Look.", "goal": "look"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tokens := writeFile(t, "tokens.json", `{"principals": [{"id": "ops", "tenant": "acme", "roles": ["operator"], "token_sha256": "`+hashOf("ops-token")+`"}]}`)
	web := freeAddr(t)
	serveInProcess(t, newDB(t), "--http", web, "--http-mcp", "--tokens", tokens, "--tasks", dir)
	resp, err := http.Post("http://"+web+"/mcp", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") != `Bearer resource_metadata="http://`+web+`/.well-known/oauth-protected-resource"` {
		t.Fatalf("no token: %d, WWW-Authenticate %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	meta, err := http.Get("http://" + web + "/.well-known/oauth-protected-resource")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(meta.Body)
	meta.Body.Close()
	if meta.StatusCode != http.StatusOK || !strings.Contains(string(body), `"resource":"http://`+web+`/mcp"`) {
		t.Fatalf("metadata: %d %s", meta.StatusCode, body)
	}
	req, _ := http.NewRequest(http.MethodPost, "http://"+web+"/mcp", strings.NewReader(`{}`))
	req.Host = "evil.example"
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a foreign Host: %v %v", resp, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: "http://" + web + "/mcp", HTTPClient: &http.Client{Transport: tokenTransport("ops-token")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, tool := range tools.Tools {
		found = found || tool.Name == "start_lookup"
	}
	if !found {
		t.Errorf("the catalog's task is not a tool: %v", tools.Tools)
	}

	plain := freeAddr(t)
	serveInProcess(t, newDB(t), "--http", plain, "--tokens", tokens)
	resp, err = http.Post("http://"+plain+"/mcp", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusUnauthorized {
		t.Errorf("without --http-mcp, /mcp answered as the MCP face")
	}
}

type tokenTransport string

func (tt tokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(tt))
	return http.DefaultTransport.RoundTrip(r)
}

func hashOf(token string) string { return auth.HashToken(token) }
