package replay

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/reinhq/rein/internal/engine"
	"github.com/reinhq/rein/internal/export"
	"github.com/reinhq/rein/internal/store/mem"
	"github.com/reinhq/rein/internal/tools"
)

// TestReplayLargeProposal: a run whose proposal's preview and arguments
// were stored apart (blobs) replays event for event when given the run's
// blobs (an export's), the approved write included; the twin, without the
// blobs, is refused as unsupported rather than reported as a divergence.
func TestReplayLargeProposal(t *testing.T) {
	ctx := context.Background()
	big := strings.Repeat("+a long line of the new file\n", 64<<10)
	// Arguments over the inline bound, under the bound of a decision rein
	// records at all.
	note := strings.Repeat("+a long line of the new file\n", 16<<10)
	fixtures := tools.NewFixtures(map[string][]tools.FixtureResult{
		"get":    {{Output: structpb.NewStringValue("invoice INV-42")}},
		"refund": {{Preview: structpb.NewStringValue(big), Receipt: structpb.NewStringValue("re_1")}},
		"void":   {{Preview: structpb.NewStringValue("void INV-42")}},
	})
	clock := &fakeClock{now: time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)}
	st := mem.New()
	defer st.Close()
	e := engine.New(engine.Config{Store: st, Tools: fixtures, Clock: clock.Now, NoTimers: true, Workers: 1,
		Wait: func(context.Context, time.Duration) error { return nil }})
	defer e.Close()
	run, _, err := e.Start(ctx, engine.StartRequest{RequestID: "large", Principal: "alice", Tenant: "acme",
		Contract: contract(nil, call("refund", "w1", map[string]any{"note": note}), final("refunded"))})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Wait(ctx, run.RunID); err != nil {
		t.Fatal(err)
	}
	cur, err := st.Load(ctx, run.RunID)
	if err != nil {
		t.Fatal(err)
	}
	p := cur.Pending.GetProposal()
	if p.GetPreviewBlob() == "" || p.GetArgumentsBlob() == "" {
		t.Fatalf("the proposal is not stored apart: %v", p.GetPreviewBlob())
	}
	if _, err := e.DecideApproval(ctx, engine.Verdict{RunID: run.RunID, ProposalID: p.GetProposalId(), ProposalHash: p.GetHash(), Approve: true, Principal: "bob"}); err != nil {
		t.Fatal(err)
	}
	if err := e.Wait(ctx, run.RunID); err != nil {
		t.Fatal(err)
	}
	evs, err := st.Events(ctx, run.RunID, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	x, err := export.New(ctx, run.RunID, evs, st)
	if err != nil {
		t.Fatal(err)
	}
	if len(x.GetBlobs()) < 2 {
		t.Fatalf("the export carries %d blobs, want the proposal's two at least", len(x.GetBlobs()))
	}

	res, err := Run(ctx, evs, Options{Blobs: x.GetBlobs()})
	if err != nil {
		t.Fatal(err)
	}
	if res.Divergence != nil {
		t.Fatalf("replay with the blobs: %v", res.Divergence)
	}
	if _, err := Run(ctx, evs, Options{}); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("replay without the blobs = %v, want ErrUnsupported", err)
	}
}
