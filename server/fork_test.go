package server

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/tools"
)

// forkServer serves a read tool and a write tool that counts its commits.
func forkServer(t *testing.T) (*testServer, *countingCommits) {
	t.Helper()
	c := &countingCommits{Fixtures: tools.NewFixtures(map[string][]tools.FixtureResult{
		"lookup": {{Output: structpb.NewStringValue("found")}},
		"pay":    {{Preview: structpb.NewStringValue("pay 10"), Receipt: structpb.NewStringValue("paid")}},
	})}
	return newTestServer(t, c), c
}

type countingCommits struct {
	*tools.Fixtures
	n int
}

func (c *countingCommits) Commit(ctx context.Context, call tools.Call, op string) (*structpb.Value, error) {
	c.n++
	return c.Fixtures.Commit(ctx, call, op)
}

func payContract(replies ...*reinv1.ScriptedReply) *reinv1.TaskContract {
	c := contract(nil, replies...)
	c.Tools = append(c.Tools, &reinv1.ToolGrant{Name: "pay", Tier: reinv1.ToolTier_TOOL_TIER_WRITE})
	return c
}

func seqOf(t *testing.T, evs []*reinv1.Event, pred func(*reinv1.Event) bool) uint64 {
	t.Helper()
	for _, ev := range evs {
		if pred(ev) {
			return ev.GetSequence()
		}
	}
	t.Fatal("no such event")
	return 0
}

func (s *testServer) allEvents(t *testing.T, runID string) []*reinv1.Event {
	t.Helper()
	var out []*reinv1.Event
	for token := ""; ; {
		resp, err := s.client.ListEvents(context.Background(), &reinv1.ListEventsRequest{RunId: runID, PageSize: 1000, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, resp.GetEvents()...)
		if token = resp.GetNextPageToken(); token == "" {
			return out
		}
	}
}

// TestForkCarriesTheLogOver: a fork after a committed write carries the
// receipt over and goes on from there: no model call or tool result before
// the fork point is made again, and the write is never committed twice.
func TestForkCarriesTheLogOver(t *testing.T) {
	s, commits := forkServer(t)
	ctx := context.Background()
	run := s.start(t, "parent", payContract(readCall("lookup"), readCall("pay"), final("done")))
	p := run.GetPending().GetProposal()
	if _, err := s.client.DecideApproval(ctx, &reinv1.DecideApprovalRequest{RunId: run.GetRunId(), ProposalId: p.GetProposalId(),
		ProposalHash: p.GetHash(), Verdict: reinv1.ApprovalVerdict_APPROVAL_VERDICT_APPROVE}); err != nil {
		t.Fatal(err)
	}
	parentEvs := s.watchToEnd(t, run.GetRunId())
	at := seqOf(t, parentEvs, func(ev *reinv1.Event) bool { return ev.GetStatusChanged().GetReason() == "write_committed" })

	resp, err := s.client.ForkRun(ctx, &reinv1.ForkRunRequest{RunId: run.GetRunId(), AtSequence: at, RequestId: "fork-1"})
	if err != nil {
		t.Fatal(err)
	}
	fork := resp.GetRun()
	evs := s.watchToEnd(t, fork.GetRunId())
	rs := evs[0].GetRunStarted()
	if rs.GetParentRunId() != run.GetRunId() || rs.GetParentSequence() != at {
		t.Fatalf("run_started names parent %q at %d, want %q at %d", rs.GetParentRunId(), rs.GetParentSequence(), run.GetRunId(), at)
	}
	for i := 1; i < int(at); i++ {
		if runPayload(evs[i]) != runPayload(parentEvs[i]) {
			t.Fatalf("event %d: fork has %s, parent %s", i+1, runPayload(evs[i]), runPayload(parentEvs[i]))
		}
	}
	if commits.n != 1 {
		t.Fatalf("the write was committed %d times, want once (the fork carries its receipt)", commits.n)
	}
	got, err := s.client.GetRun(ctx, &reinv1.GetRunRequest{RunId: fork.GetRunId()})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetRun().GetStatus() != reinv1.RunStatus_RUN_STATUS_COMPLETED || got.GetRun().GetSteps() != 3 {
		t.Fatalf("fork: %v after %d steps, want completed after 3 (2 carried, 1 new)", got.GetRun().GetStatus(), got.GetRun().GetSteps())
	}
	// The same request ID returns the same fork.
	again, err := s.client.ForkRun(ctx, &reinv1.ForkRunRequest{RunId: run.GetRunId(), AtSequence: at, RequestId: "fork-1"})
	if err != nil || again.GetCreated() || again.GetRun().GetRunId() != fork.GetRunId() {
		t.Fatalf("second ForkRun: %v created=%v, want the first fork", err, again.GetCreated())
	}
}

// TestForkAtAPendingWriteReproposes: a fork at a run paused for approval
// proposes the write again, as a new proposal.
func TestForkAtAPendingWriteReproposes(t *testing.T) {
	s, commits := forkServer(t)
	run := s.start(t, "parent", payContract(readCall("pay")))
	resp, err := s.client.ForkRun(context.Background(), &reinv1.ForkRunRequest{RunId: run.GetRunId(), AtSequence: run.GetVersion(), RequestId: "f"})
	if err != nil {
		t.Fatal(err)
	}
	evs := s.watchUntilPause(t, resp.GetRun().GetRunId())
	got, err := s.client.GetRun(context.Background(), &reinv1.GetRunRequest{RunId: resp.GetRun().GetRunId()})
	if err != nil {
		t.Fatal(err)
	}
	p := got.GetRun().GetPending().GetProposal()
	if got.GetRun().GetStatus() != reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL || p == nil ||
		p.GetProposalId() == run.GetPending().GetProposal().GetProposalId() {
		t.Fatalf("fork: %v with proposal %v, want a new proposal pending (log %d events)", got.GetRun().GetStatus(), p, len(evs))
	}
	if commits.n != 0 {
		t.Fatalf("%d commits, want none", commits.n)
	}
}

func TestForkRefusals(t *testing.T) {
	s, _ := forkServer(t)
	ctx := context.Background()
	done := s.start(t, "done", payContract(readCall("lookup"), final("ok")))
	evs := s.allEvents(t, done.GetRunId())
	returned := seqOf(t, evs, func(ev *reinv1.Event) bool { return ev.GetModelReturned() != nil })
	for _, tc := range []struct {
		name string
		req  *reinv1.ForkRunRequest
		code codes.Code
	}{
		{"at 0", &reinv1.ForkRunRequest{RunId: done.GetRunId(), AtSequence: 0, RequestId: "a"}, codes.InvalidArgument},
		{"beyond the head", &reinv1.ForkRunRequest{RunId: done.GetRunId(), AtSequence: done.GetVersion() + 1, RequestId: "b"}, codes.InvalidArgument},
		{"at the end", &reinv1.ForkRunRequest{RunId: done.GetRunId(), AtSequence: done.GetVersion(), RequestId: "c"}, codes.InvalidArgument},
		{"mid-step", &reinv1.ForkRunRequest{RunId: done.GetRunId(), AtSequence: returned, RequestId: "d"}, codes.InvalidArgument},
		{"missing run", &reinv1.ForkRunRequest{RunId: "run_missing", AtSequence: 1, RequestId: "e"}, codes.NotFound},
		{"no request id", &reinv1.ForkRunRequest{RunId: done.GetRunId(), AtSequence: 1}, codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.client.ForkRun(ctx, tc.req)
			wantCode(t, err, tc.code)
		})
	}
	list, err := s.client.ListRuns(ctx, &reinv1.ListRunsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.GetRuns()) != 1 {
		t.Fatalf("refused forks stored runs: %d runs", len(list.GetRuns()))
	}
}

// watchToEnd follows a run until its stream ends (the run is terminal) and
// returns every event.
func (s *testServer) watchToEnd(t *testing.T, runID string) []*reinv1.Event {
	t.Helper()
	return s.watchWhile(t, runID, func(*reinv1.Event) bool { return true })
}

// watchUntilPause follows a run until it pauses or ends.
func (s *testServer) watchUntilPause(t *testing.T, runID string) []*reinv1.Event {
	t.Helper()
	return s.watchWhile(t, runID, func(ev *reinv1.Event) bool {
		sc := ev.GetStatusChanged()
		return sc == nil || sc.GetTo() == reinv1.RunStatus_RUN_STATUS_RUNNING
	})
}

func (s *testServer) watchWhile(t *testing.T, runID string, more func(*reinv1.Event) bool) []*reinv1.Event {
	t.Helper()
	stream, err := s.client.WatchRun(context.Background(), &reinv1.WatchRunRequest{RunId: runID})
	if err != nil {
		t.Fatal(err)
	}
	var evs []*reinv1.Event
	for {
		resp, err := stream.Recv()
		if err != nil {
			return evs
		}
		evs = append(evs, resp.GetEvent())
		if !more(resp.GetEvent()) {
			return evs
		}
	}
}

func runPayload(ev *reinv1.Event) string {
	return ev.GetActor() + " " + ev.GetRecordedAt().AsTime().String() + " " + ev.ProtoReflect().WhichOneof(ev.ProtoReflect().Descriptor().Oneofs().ByName("payload")).TextName()
}
