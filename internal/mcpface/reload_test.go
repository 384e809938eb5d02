package mcpface_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// startTools are the start_ tools a session is offered.
func startTools(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tool := range res.Tools {
		if len(tool.Name) > 6 && tool.Name[:6] == "start_" {
			got = append(got, tool.Name)
		}
	}
	slices.Sort(got)
	return got
}

// TestCatalogReloadChangesOpenSessions: a reloaded catalog reaches open
// sessions: each is told its tool list changed and is offered the tasks
// its principal may now start (a task for approvers only reaches the
// starter, not the operator); a task removed is no longer offered. A
// reload that fails changes nothing.
func TestCatalogReloadChangesOpenSessions(t *testing.T) {
	f := startFace(t)
	changed := map[string]chan struct{}{}
	sessions := map[string]*mcp.ClientSession{}
	for _, who := range []string{"starter", "operator"} {
		ch := make(chan struct{}, 8)
		changed[who] = ch
		c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, &mcp.ClientOptions{
			ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { ch <- struct{}{} },
		})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: f.url, HTTPClient: &http.Client{Transport: bearer{who + "-token", http.DefaultTransport}}}, nil)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cs.Close() })
		sessions[who] = cs
	}
	reload := func() {
		t.Helper()
		if _, err := f.tasks.Reload(); err != nil {
			t.Fatal(err)
		}
		f.face.Refresh(context.Background())
	}
	wait := func(who string) {
		t.Helper()
		select {
		case <-changed[who]:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s was not told its tools changed", who)
		}
	}
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(f.dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	write("lookup.json", `{"name": "lookup", "description": "Look an invoice up.", "goal": "look", "roles": ["approver"]}`)
	reload()
	wait("starter")
	if got := startTools(t, sessions["starter"]); !slices.Equal(got, []string{"start_lookup", "start_refund"}) {
		t.Errorf("the starter is offered %v after the reload", got)
	}
	if got := startTools(t, sessions["operator"]); !slices.Equal(got, []string{"start_refund"}) {
		t.Errorf("the operator is offered %v after the reload", got)
	}

	// A bad file: the reload is refused, the tools stay.
	write("bad.json", `{"name": `)
	if _, err := f.tasks.Reload(); err == nil {
		t.Fatal("a bad catalog was loaded")
	}
	f.face.Refresh(context.Background())
	if got := startTools(t, sessions["starter"]); !slices.Equal(got, []string{"start_lookup", "start_refund"}) {
		t.Errorf("after a refused reload the starter is offered %v", got)
	}
	if err := os.Remove(filepath.Join(f.dir, "bad.json")); err != nil {
		t.Fatal(err)
	}

	if err := os.Remove(filepath.Join(f.dir, "refund.json")); err != nil {
		t.Fatal(err)
	}
	reload()
	wait("operator")
	if got := startTools(t, sessions["operator"]); len(got) != 0 {
		t.Errorf("the operator is offered %v after refund was removed", got)
	}
	wait("starter")
	if got := startTools(t, sessions["starter"]); !slices.Equal(got, []string{"start_lookup"}) {
		t.Errorf("the starter is offered %v after refund was removed", got)
	}
	res, err := sessions["operator"].CallTool(context.Background(), &mcp.CallToolParams{Name: "start_refund", Arguments: map[string]any{"invoice_id": "INV-1"}})
	if err == nil && !res.IsError {
		t.Errorf("a removed task was started")
	}
}
