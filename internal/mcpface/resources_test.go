package mcpface_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestProgressAndResources: a start with a progress token gets progress
// notifications; the run's resources read its state and transcript; a
// subscriber hears of the run moving when it is approved. The twin: a
// resource of no run is an error.
func TestProgressAndResources(t *testing.T) {
	f := startFace(t)
	progress := make(chan *mcp.ProgressNotificationParams, 64)
	updated := make(chan string, 64)
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) { progress <- r.Params },
		ResourceUpdatedHandler:      func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) { updated <- r.Params.URI },
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: f.url, HTTPClient: &http.Client{Transport: bearer{"starter-token", http.DefaultTransport}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	params := &mcp.CallToolParams{Name: "start_refund", Arguments: map[string]any{"invoice_id": "INV-42"}}
	params.SetProgressToken("p1")
	res, err := cs.CallTool(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	started := decodeStart(t, res)
	select {
	case p := <-progress:
		if p.ProgressToken != "p1" || !strings.Contains(p.Message, started.RunID) {
			t.Errorf("progress %+v", p)
		}
	case <-ctx.Done():
		t.Fatal("no progress notification")
	}
	uri := "rein://runs/" + started.RunID
	state, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
	if err != nil || !strings.Contains(state.Contents[0].Text, "RUN_STATUS_NEEDS_APPROVAL") {
		t.Fatalf("the run's resource: %v %v", state, err)
	}
	transcript, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri + "/transcript"})
	if err != nil || !strings.Contains(transcript.Contents[0].Text, "approval_requested") {
		t.Fatalf("the transcript: %v %v", transcript, err)
	}
	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	if res := call(t, cs, "approve", map[string]any{"run_id": started.RunID, "proposal_id": started.Pending.Proposal.ProposalID, "proposal_hash": started.Pending.Proposal.Hash}); res.IsError {
		t.Fatalf("approve: %s", resultText(res))
	}
	select {
	case got := <-updated:
		if got != uri {
			t.Errorf("updated %q, want %q", got, uri)
		}
	case <-ctx.Done():
		t.Fatal("no resource update after the approval")
	}
	if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "rein://runs/none"}); err == nil {
		t.Error("a resource of no run was read")
	}
}
