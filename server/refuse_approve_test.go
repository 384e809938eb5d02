package server

// Tests of an approval a server cannot carry out (issue 13 §2), on the
// wire: FailedPrecondition, and the run's log unchanged.

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/engine"
	"github.com/reinhq/rein/internal/tools"
)

// openAt opens a node on the bbolt file at path with executor, and a client
// of it over bufconn; closing it closes the node and the file.
func openAt(t *testing.T, path string, executor tools.Executor) (*Node, reinv1.RunServiceClient, func()) {
	t.Helper()
	node, err := Open(context.Background(), Config{Store: boltAt(t, path), Tools: executor})
	if err != nil {
		t.Fatal(err)
	}
	lis := bufconn.Listen(1 << 20)
	go func() { _ = node.GRPC.Serve(lis) }()
	cc, err := grpc.NewClient("passthrough:///test",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		node.Close()
		t.Fatal(err)
	}
	var closed bool
	closeIt := func() {
		if !closed {
			closed = true
			_ = cc.Close()
			node.Close()
		}
	}
	t.Cleanup(closeIt)
	return node, reinv1.NewRunServiceClient(cc), closeIt
}

// TestApprovalTheServerCannotSendIsRefused: a server started without the
// write's tool refuses its approval with FailedPrecondition naming the tool
// and the flags, and the run's log is unchanged; a server with the tool
// then takes the same approval. Today the approval was recorded,
// dispatched, and left with an unknown outcome.
func TestApprovalTheServerCannotSendIsRefused(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "rein.db")
	node, _, closeIt := openAt(t, path, newWriteTools(t))
	st, _, err := node.Engine.Start(ctx, engine.StartRequest{RequestID: "r", Contract: writeContract(refundCall(), final("refunded")), Principal: "local", Tenant: "default"})
	if err != nil {
		t.Fatal(err)
	}
	if err := node.Engine.Wait(ctx, st.RunID); err != nil {
		t.Fatal(err)
	}
	closeIt()

	_, c, closeIt := openAt(t, path, fixtures()) // "lookup" only: no "refund"
	run, err := c.GetRun(ctx, &reinv1.GetRunRequest{RunId: st.RunID})
	if err != nil || run.GetRun().GetStatus() != stNeedsApproval {
		t.Fatalf("GetRun = %v, %v; want needs_approval", run, err)
	}
	p := run.GetRun().GetPending().GetProposal()
	approve := &reinv1.DecideApprovalRequest{RunId: st.RunID, ProposalId: p.GetProposalId(), ProposalHash: p.GetHash(), Verdict: approveVerdict}
	before, err := c.ListEvents(ctx, &reinv1.ListEventsRequest{RunId: st.RunID})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.DecideApproval(ctx, approve)
	refused := wantCode(t, err, codes.FailedPrecondition)
	for _, w := range []string{`"refund"`, "--tools", "--workspace", "--tool-server", "--mcp"} {
		if !strings.Contains(refused.Message(), w) {
			t.Errorf("DecideApproval: %q does not say %q", refused.Message(), w)
		}
	}
	after, err := c.ListEvents(ctx, &reinv1.ListEventsRequest{RunId: st.RunID})
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(before, after) {
		t.Fatalf("the refused approval changed the log:\nbefore %s\nafter  %s", payloadNames(before.GetEvents()), payloadNames(after.GetEvents()))
	}
	again, err := c.GetRun(ctx, &reinv1.GetRunRequest{RunId: st.RunID})
	if err != nil || !proto.Equal(again.GetRun(), run.GetRun()) {
		t.Fatalf("the refused approval changed the run: %v → %v (%v)", run.GetRun(), again.GetRun(), err)
	}
	closeIt()

	// The twin: a server with the tool takes the same approval.
	_, c, _ = openAt(t, path, newWriteTools(t))
	resp, err := c.DecideApproval(ctx, approve)
	if err != nil {
		t.Fatalf("DecideApproval with the tool: %v", err)
	}
	if resp.GetRun().GetStatus() != stRunning {
		t.Fatalf("after the approval the run is %v, want running", resp.GetRun().GetStatus())
	}
}
