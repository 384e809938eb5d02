package replica_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/replica"
	etcdstore "github.com/reinhq/rein/internal/store/etcd"
)

// TestLeaveHandsOver: a replica that leaves ends its lease at once: its
// name key is gone as Leave returns (the others, watching the name keys,
// take its runs then, not a TTL later), the runs it held are still indexed
// under its name for them, and its log says how many it handed over. The
// twin: until it leaves, its name key is there under its lease.
func TestLeaveHandsOver(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	prefix := fmt.Sprintf("/leave-%d/", time.Now().UnixNano())
	st, err := etcdstore.Open(ctx, shared, prefix, etcdstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var log syncBuffer
	rep, err := replica.Join(ctx, replica.Config{Client: shared, Store: st, Name: "replica-a", TTL: ttl, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, id := range []string{"run-1", "run-2"} {
		if _, _, err := st.Create(ctx, &reinv1.Event{RunId: id, Sequence: 1, RecordedAt: timestamppb.New(now), Actor: "principal:alice",
			Payload: &reinv1.Event_RunStarted{RunStarted: &reinv1.RunStarted{Contract: contract(), Principal: "alice", Tenant: "default"}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Acquire(ctx, id, "replica-a"); err != nil {
			t.Fatal(err)
		}
	}
	nameKey := prefix + "replica/replica-a"
	if resp, err := shared.Get(ctx, nameKey); err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease == 0 {
		t.Fatalf("before Leave, the name key %s: %v, %v; want it under the replica's lease", nameKey, resp, err)
	}
	rep.Leave(ctx)
	if resp, err := shared.Get(ctx, nameKey); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("after Leave, the name key %s: %v, %v; want it gone at once", nameKey, resp, err)
	}
	if held, err := st.Held(ctx, "replica-a", "", 0); err != nil || len(held) != 2 {
		t.Fatalf("after Leave, the runs indexed under its name: %v, %v; want both, for the others to take", held, err)
	}
	if out := log.String(); !strings.Contains(out, "this server leaves") || !strings.Contains(out, "runs_handed_over=2") {
		t.Fatalf("Leave's log does not say it handed two runs over:\n%s", out)
	}
}
