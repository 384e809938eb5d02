package engine

// Tests of how ResumeAll settles the writes a stopped server left.

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/tools"
)

// barrierLookup answers a lookup only once want lookups are in at once (or
// its ctx ends, the tool timeout): lookups made one after another never
// meet.
type barrierLookup struct {
	*countingTools
	want int32
	in   atomic.Int32
	all  chan struct{}
}

func (b *barrierLookup) Lookup(ctx context.Context, _ tools.Call, _ string) (*structpb.Value, bool, error) {
	if b.in.Add(1) == b.want {
		close(b.all)
	}
	select {
	case <-b.all:
		return structpb.NewStringValue("found by lookup"), true, nil
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
}

// TestResumeAllSettlesWritesAtOnce: the dispatched writes a stopped server
// left are settled concurrently at start: two whose lookups each answer
// only when the other is asked too are both settled, each committed once,
// within the tool timeout. One after another, the first would wait out the
// tool timeout alone and fail.
func TestResumeAllSettlesWritesAtOnce(t *testing.T) {
	ctx := testCtx(t)
	s, _ := openStore(t)
	first := newEngine(t, Config{Store: s, Tools: searchTools(t)})
	var ids []string
	for _, req := range []string{"w1", "w2"} {
		st, _, err := first.Start(ctx, StartRequest{RequestID: req, Contract: testContract(callReply("send_email", "call-1", nil), finalReply("sent")), Principal: "alice", Tenant: "acme"})
		if err != nil {
			t.Fatal(err)
		}
		waitRun(t, first, st.RunID)
		writing, _ := stored(t, s, st.RunID)
		p := pendingProposal(t, writing)
		if _, err := first.commit(ctx, writing, "principal:bob", []*reinv1.Event{
			decidedEvent(Verdict{ProposalID: p.GetProposalId(), Approve: true}),
			{Payload: &reinv1.Event_WriteDispatched{WriteDispatched: &reinv1.WriteDispatched{ProposalId: p.GetProposalId(), OperationId: "op_" + p.GetProposalId()}}},
		}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, st.RunID)
	}
	first.Close()

	lookups := &barrierLookup{countingTools: searchTools(t), want: 2, all: make(chan struct{})}
	second := newEngine(t, Config{Store: s, Tools: lookups, ToolTimeout: 5 * time.Second})
	if err := second.ResumeAll(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		waitRun(t, second, id)
		_, evs := stored(t, s, id)
		wantCount(t, evs, "write_committed", 1)
	}
	lookups.wantCalls(t, 0, 0, 0)
}
