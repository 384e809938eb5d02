package replica_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/model"
	etcdstore "github.com/reinhq/rein/internal/store/etcd"
)

// TestRunNoServerTookIsFound: a run created on the shared store that no
// server ever took (its server died right after creating it) is found by
// a replica's look at the runs no server took, within about a TTL, and
// carried to its end; the index of such runs is empty then.
func TestRunNoServerTookIsFound(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	prefix := fmt.Sprintf("/untaken-%s-%d/", t.Name(), time.Now().UnixNano())
	b := join(t, prefix, "replica-b", scripted)
	st, err := etcdstore.Open(ctx, shared, prefix, etcdstore.Options{}) // a server with no lease, gone once it created the run
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	c := contract()
	c.Budget = &reinv1.Budget{MaxSteps: 10, MaxTokens: 10000, MaxToolCalls: 10, Timeout: durationpb.New(time.Hour)}
	if _, _, err := st.Create(ctx, &reinv1.Event{RunId: "run-untaken", Sequence: 1, RecordedAt: timestamppb.New(now), Actor: "principal:alice",
		Payload: &reinv1.Event_RunStarted{RunStarted: &reinv1.RunStarted{Contract: c, Principal: "alice", Tenant: "default",
			Deadline: timestamppb.New(now.Add(time.Hour))}}}); err != nil {
		t.Fatal(err)
	}
	created := time.Now()
	evs, err := follow(ctx, b, "run-untaken")
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(created)
	if last := evs[len(evs)-1].GetStatusChanged(); last.GetTo() != reinv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Fatalf("the run no server took ended %v, want completed", last.GetTo())
	}
	if took > ttl+3*time.Second {
		t.Fatalf("B took %v to carry on the run no server took; want about a TTL (%v)", took, ttl)
	}
	if left, _, err := b.store.Unowned(ctx, 0, "", 0); err != nil || len(left) != 0 {
		t.Fatalf("the runs no server took, after B carried it on: %v, %v; want none", left, err)
	}
}

// TestPausedRunStaysWithItsHolder: a run paused on A for a person's
// answer stays A's, look after look by B (B does not take a paused run a
// live replica holds); once A's lease ends, B takes it, so that one live
// replica keeps its deadlines, and an answer through B carries it on.
func TestPausedRunStaysWithItsHolder(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	prefix := fmt.Sprintf("/paused-%s-%d/", t.Name(), time.Now().UnixNano())
	asking := func(*reinv1.ModelSpec) (model.Model, error) {
		return model.NewScript([]*reinv1.ScriptedReply{
			{Reply: &reinv1.ScriptedReply_Decision{Decision: &reinv1.Decision{Action: &reinv1.Decision_AskHuman{AskHuman: &reinv1.AskHuman{Question: "which quarter?"}}}}, Usage: &reinv1.Usage{InputTokens: 1, OutputTokens: 1}},
			{Reply: &reinv1.ScriptedReply_Decision{Decision: &reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: "Q3"}}}}, Usage: &reinv1.Usage{InputTokens: 1, OutputTokens: 1}},
		}), nil
	}
	a := join(t, prefix, "replica-a", asking)
	resp, err := a.client.StartRun(ctx, &reinv1.StartRunRequest{RequestId: "r1", Contract: contract()})
	if err != nil {
		t.Fatal(err)
	}
	runID := resp.GetRun().GetRunId()
	if err := pausedOn(ctx, a, runID); err != nil {
		t.Fatal(err)
	}
	looked := make(chan struct{}, 8)
	b := joinWith(t, prefix, "replica-b", asking, 0, func(string, time.Duration) {
		select {
		case looked <- struct{}{}:
		default:
		}
	})
	for range 3 {
		select {
		case <-looked:
		case <-ctx.Done():
			t.Fatal("B never looked for runs to take")
		}
	}
	if got := ownerOf(t, prefix, runID); got != "replica-a" {
		t.Fatalf("after B's looks, the run paused on A is held by %q; want replica-a", got)
	}
	a.die(t)
	deadline := time.After(ttl + 5*time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for ownerOf(t, prefix, runID) != "replica-b" {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("B did not take the paused run within the TTL and 5s of A's lease ending (held by %q)", ownerOf(t, prefix, runID))
		}
	}
	if _, err := b.client.ProvideInput(ctx, &reinv1.ProvideInputRequest{RunId: runID, Text: "Q3"}); err != nil {
		t.Fatal(err)
	}
	evs, err := follow(ctx, b, runID)
	if err != nil {
		t.Fatal(err)
	}
	if last := evs[len(evs)-1].GetStatusChanged(); last.GetTo() != reinv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Fatalf("the answered run ended %v, want completed", last.GetTo())
	}
}

// pausedOn waits until runID, watched on m, pauses for a person's answer.
func pausedOn(ctx context.Context, m *member, runID string) error {
	stream, err := m.client.WatchRun(ctx, &reinv1.WatchRunRequest{RunId: runID})
	if err != nil {
		return err
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return fmt.Errorf("watch on %s before the run paused: %w", m.name, err)
		}
		if resp.GetEvent().GetStatusChanged().GetTo() == reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT {
			return nil
		}
	}
}
