package mcpface_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// post sends one raw JSON-RPC body as who, in session sid ("" for none),
// and returns the status and body.
func (f *face) post(t *testing.T, who, sid, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, f.url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+who+"-token")
	req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}

// runCount is how many runs the store holds, for every principal.
func (f *face) runCount(t *testing.T) int {
	t.Helper()
	resp, err := f.runs.ListRuns(withToken(context.Background(), "starter"), &reinv1.ListRunsRequest{PageSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return len(resp.GetRuns())
}

// TestHostileInput: each of these is a JSON-RPC error, a tool error or an
// HTTP 4xx, and no run is started.
func TestHostileInput(t *testing.T) {
	f := startFace(t)
	cs := f.connect(t, "starter", nil)
	ctx := context.Background()

	_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "no_such_tool", Arguments: map[string]any{}})
	if jerr := (*jsonrpc.Error)(nil); !errors.As(err, &jerr) || jerr.Code != jsonrpc.CodeInvalidParams || !strings.Contains(jerr.Message, `unknown tool "no_such_tool"`) {
		t.Errorf("an unknown tool: %v, want JSON-RPC %d naming the tool", err, jsonrpc.CodeInvalidParams)
	}
	for name, args := range map[string]any{
		"schema":       map[string]any{"invoice_id": "not an invoice"},
		"extra":        map[string]any{"invoice_id": "INV-1", "x": 1},
		"not a string": map[string]any{"invoice_id": []any{1, 2}},
	} {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "start_refund", Arguments: args})
		if err != nil || !res.IsError || !strings.HasPrefix(resultText(res), "InvalidArgument: inputs") {
			t.Errorf("%s: a start that breaks the schema answered %v %s, want a tool error InvalidArgument: inputs…", name, err, resultText(res))
		}
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "get_run", Arguments: map[string]any{"run_id": "r", "bogus": true}})
	if err != nil || !res.IsError || !strings.Contains(resultText(res), `unknown argument "bogus"`) {
		t.Errorf("an unknown argument: %v %s", err, resultText(res))
	}

	// 4 MiB of arguments: over the body limit.
	big := `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"start_refund","arguments":{"invoice_id":"` + strings.Repeat("A", 4<<20) + `"}}}`
	if code, _ := f.post(t, "starter", cs.ID(), big); code != http.StatusRequestEntityTooLarge {
		t.Errorf("4 MiB of arguments: HTTP %d, want 413", code)
	}

	// A batch of 10,000 calls.
	calls := make([]string, 10000)
	for i := range calls {
		calls[i] = `{"jsonrpc":"2.0","id":` + strconv.Itoa(i) + `,"method":"tools/call","params":{"name":"start_refund","arguments":{"invoice_id":"INV-1"}}}`
	}
	code, body := f.post(t, "starter", cs.ID(), "["+strings.Join(calls, ",")+"]")
	if code != http.StatusBadRequest || !strings.Contains(body, "batching is not supported") {
		t.Errorf("a batch of 10,000 calls: HTTP %d %.200s, want 400, batching not supported", code, body)
	}

	// An unknown protocol version.
	code, body = f.post(t, "starter", "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"1999-01-01","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`)
	// The protocol's answer: the server offers a version it speaks.
	if code != http.StatusOK || strings.Contains(body, `"protocolVersion":"1999-01-01"`) || !strings.Contains(body, `"protocolVersion":"2025-`) {
		t.Errorf("an unknown protocol version: HTTP %d %.300s, want 200 offering a version the server speaks", code, body)
	}

	// The session ID of another principal.
	if code, body := f.post(t, "operator", cs.ID(), `{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}`); code != http.StatusForbidden {
		t.Errorf("another principal's session: HTTP %d %.200s, want 403", code, body)
	}

	if n := f.runCount(t); n != 0 {
		t.Errorf("hostile input started %d runs", n)
	}
}
