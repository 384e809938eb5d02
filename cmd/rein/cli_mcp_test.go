package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// mcpServer serves one MCP tool, "lookup", over streamable HTTP, and counts
// its calls.
func mcpServer(t *testing.T) (url string, calls *atomic.Int32) {
	t.Helper()
	calls = &atomic.Int32{}
	srv := sdk.NewServer(&sdk.Implementation{Name: "records", Version: "v1"}, nil)
	srv.AddTool(&sdk.Tool{Name: "lookup", Description: "Look a record up.", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			calls.Add(1)
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "invoice 42: total 1,234.00 EUR"}}}, nil
		})
	hs := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	return hs.URL + "/mcp", calls
}

// TestMCPOnTheEmbeddedDefault: rein run --mcp NAME=URL grants the server's
// tools as NAME.TOOL; a granted one runs, and the same tool under a name the
// contract does not grant never does.
func TestMCPOnTheEmbeddedDefault(t *testing.T) {
	url, calls := mcpServer(t)
	task := writeFile(t, "task.json", `{"goal": "find the total", "tools": [{"name": "records.lookup", "tier": "TOOL_TIER_READ"}]}`)
	script := writeFile(t, "model.jsonl", `{"decision": {"tool_call": {"tool": "records.lookup", "arguments": {"id": "42"}, "call_id": "c1"}}}
{"decision": {"final_answer": {"text": "1,234.00 EUR"}}}
`)
	db := newDB(t)
	out := decodeOne(t, cli(t, "run", task, "--model", "script:"+script, "--mcp", "records="+url, "--db", db, "--json").mustExit(t, exitOK).stdout)
	if calls.Load() != 1 {
		t.Fatalf("the MCP tool ran %d times, want 1", calls.Load())
	}
	evs := events(t, db, out["run_id"].(string))
	mustContain(t, "events", eventTypes(evs), "tool_requested,tool_returned")

	// The twin: the contract grants nothing of the server's.
	ungranted := writeFile(t, "task.json", `{"goal": "find the total"}`)
	out = decodeOne(t, cli(t, "run", ungranted, "--model", "script:"+script, "--mcp", "records="+url, "--db", db, "--json").mustExit(t, exitOK).stdout)
	if calls.Load() != 1 {
		t.Fatalf("an ungranted MCP tool ran (%d calls)", calls.Load())
	}
	mustContain(t, "events", eventTypes(events(t, db, out["run_id"].(string))), "tool_refused")
}

func TestMCPUnreachableRefusedAtStart(t *testing.T) {
	db := newDB(t)
	r := cli(t, "run", writeFile(t, "task.json", `{"goal": "x"}`), "--model", "script:"+writeFile(t, "m.jsonl", `{"decision": {"final_answer": {"text": "x"}}}`+"\n"),
		"--mcp", "records=http://127.0.0.1:1/mcp", "--db", db).mustExit(t, exitUnavailable)
	mustContain(t, "stderr", r.stderr, "--mcp records=http://127.0.0.1:1/mcp")
}
