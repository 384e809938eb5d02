package server

// Tests of tenant isolation: a principal lists and watches only its
// tenant's runs.

import (
	"context"
	"slices"
	"testing"
	"time"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// TestListRunsTenantIsolation: a tenant lists, and finds by request ID, only
// its own runs.
func TestListRunsTenantIsolation(t *testing.T) {
	s := newTCPServer(t, Config{Directory: testDirectory(t)})
	ctx := context.Background()
	list := func(who string) []string {
		t.Helper()
		resp, err := s.client.ListRuns(ctx, &reinv1.ListRunsRequest{}, as(who))
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, r := range resp.GetRuns() {
			if r.GetTenant() != tenantOf(who) {
				t.Errorf("%s listed run %s of tenant %q", who, r.GetRunId(), r.GetTenant())
			}
			ids = append(ids, r.GetRunId())
		}
		return ids
	}
	a1 := s.startAs(t, "a-operator", contract(nil, final("done"))).GetRunId()
	a2 := s.startAs(t, "a-admin", contract(nil, ask("which?"))).GetRunId()
	if got := list("b-viewer"); len(got) != 0 {
		t.Fatalf("globex lists acme's runs: %v", got)
	}
	b1 := s.startAs(t, "b-operator", contract(nil, final("done"))).GetRunId()
	if got := list("b-admin"); !slices.Equal(got, []string{b1}) {
		t.Fatalf("globex lists %v, want only its run %s", got, b1)
	}
	if got := list("a-viewer"); !slices.Equal(got, []string{a2, a1}) {
		t.Fatalf("acme lists %v, want its runs %v", got, []string{a2, a1})
	}

	// A request ID is the tenant's: the other tenant's same key starts a
	// new run of its own rather than returning acme's.
	first, err := s.client.StartRun(ctx, &reinv1.StartRunRequest{RequestId: "shared-key", Contract: contract(nil, final("done"))}, as("a-operator"))
	if err != nil {
		t.Fatal(err)
	}
	second, err := s.client.StartRun(ctx, &reinv1.StartRunRequest{RequestId: "shared-key", Contract: contract(nil, final("done"))}, as("b-operator"))
	if err != nil {
		t.Fatal(err)
	}
	if !second.GetCreated() || second.GetRun().GetRunId() == first.GetRun().GetRunId() || second.GetRun().GetTenant() != "globex" {
		t.Fatalf("globex's StartRun with acme's request ID: created %v, run %s (acme's %s), tenant %q",
			second.GetCreated(), second.GetRun().GetRunId(), first.GetRun().GetRunId(), second.GetRun().GetTenant())
	}
	// The twin: the same tenant's same key is the same run.
	again, err := s.client.StartRun(ctx, &reinv1.StartRunRequest{RequestId: "shared-key", Contract: contract(nil, final("done"))}, as("a-admin"))
	if err != nil {
		t.Fatal(err)
	}
	if again.GetCreated() || again.GetRun().GetRunId() != first.GetRun().GetRunId() {
		t.Fatalf("acme's second StartRun with its key: created %v, run %s, want %s", again.GetCreated(), again.GetRun().GetRunId(), first.GetRun().GetRunId())
	}
}

// TestWatchRunsTenantIsolation: a tenant's WatchRuns skips every other
// tenant's change, even those committed before its own.
func TestWatchRunsTenantIsolation(t *testing.T) {
	s := newTCPServer(t, Config{Directory: testDirectory(t)})
	a := s.startAs(t, "a-operator", contract(nil, final("done")))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := s.client.WatchRuns(ctx, &reinv1.WatchRunsRequest{}, as("b-viewer"))
	if err != nil {
		t.Fatal(err)
	}
	b := s.startAs(t, "b-operator", contract(nil, final("done")))
	for {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("globex's watch ended before its run completed: %v", err)
		}
		switch id := resp.GetChange().GetRunId(); id {
		case a.GetRunId():
			t.Fatalf("globex's watch streamed acme's run %s: %v", id, resp.GetChange())
		case b.GetRunId():
		default:
			t.Fatalf("globex's watch streamed an unknown run %s", id)
		}
		if resp.GetChange().GetStatus() == reinv1.RunStatus_RUN_STATUS_COMPLETED {
			break
		}
	}
	// The twin: acme's watch from the start has acme's run first.
	aStream, err := s.client.WatchRuns(ctx, &reinv1.WatchRunsRequest{}, as("a-viewer"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := aStream.Recv()
	if err != nil || resp.GetChange().GetRunId() != a.GetRunId() {
		t.Fatalf("acme's watch: %v, %v; want its run %s", resp, err, a.GetRunId())
	}
}
