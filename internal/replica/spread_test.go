package replica_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/model"
)

// TestOrphansGoToTheLeastLoaded: when a server holding six paused runs
// dies, the two that survive both see its runs, but the one that drives
// nothing takes them first: the one driving six runs of its cap of eight
// waits before each take. The twin: the loaded one takes at most one.
func TestOrphansGoToTheLeastLoaded(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	prefix := fmt.Sprintf("/spread-%s-%d/", t.Name(), time.Now().UnixNano())
	asking := func(*reinv1.ModelSpec) (model.Model, error) {
		return model.NewScript([]*reinv1.ScriptedReply{
			{Reply: &reinv1.ScriptedReply_Decision{Decision: &reinv1.Decision{Action: &reinv1.Decision_AskHuman{AskHuman: &reinv1.AskHuman{Question: "which quarter?"}}}}, Usage: &reinv1.Usage{InputTokens: 1, OutputTokens: 1}},
		}), nil
	}
	d := join(t, prefix, "replica-d", asking)
	var paused []string
	for i := range 6 {
		resp, err := d.client.StartRun(ctx, &reinv1.StartRunRequest{RequestId: fmt.Sprint("p", i), Contract: contract()})
		if err != nil {
			t.Fatal(err)
		}
		if err := pausedOn(ctx, d, resp.GetRun().GetRunId()); err != nil {
			t.Fatal(err)
		}
		paused = append(paused, resp.GetRun().GetRunId())
	}
	called := make(chan struct{}, 16)
	loaded := joinCapped(t, prefix, "replica-loaded", hangingModels(called), 8)
	for i := range 6 {
		if _, err := loaded.client.StartRun(ctx, &reinv1.StartRunRequest{RequestId: fmt.Sprint("h", i), Contract: contract()}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-called: // driven, its model call hanging
		case <-ctx.Done():
			t.Fatal("the loaded server never drove its runs")
		}
	}
	join(t, prefix, "replica-cold", asking)
	d.die(t)
	owners := map[string]int{}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		clear(owners)
		for _, id := range paused {
			owners[ownerOf(t, prefix, id)]++
		}
		if owners["replica-loaded"]+owners["replica-cold"] == len(paused) {
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("the dead server's paused runs were not all taken: owners %v", owners)
		}
	}
	if owners["replica-loaded"] > 1 {
		t.Fatalf("the dead server's six paused runs went %v; want the cold server to take at least five", owners)
	}
}
