package etcd

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
)

// TestConflictOverAHugeSnapshot: a stale server's append to a run whose
// snapshot is larger than gRPC's default receive limit (4 MiB) is still a
// conflict. The failed Txn's Else branch reads the snapshot back, and the
// store's raw writes take any response size, as the etcd client's own
// calls do; the stale server then reloads and appends.
func TestConflictOverAHugeSnapshot(t *testing.T) {
	ctx := t.Context()
	prefix, a, b := twoServers(t)
	if _, err := b.Append(ctx, "run-1", 1, []*reinv1.Event{step("run-1", 2)}); err != nil {
		t.Fatal(err)
	}
	// a brings the snapshot over 4 MiB: a tool's error and an open call's
	// arguments, 2.1 MiB each, in two appends (each within etcd's limit).
	big := strings.Repeat("x", 2100<<10)
	at := func(seq uint64) *timestamppb.Timestamp {
		return timestamppb.New(t0.Add(time.Duration(seq) * time.Second))
	}
	failed := &reinv1.Event{RunId: "run-1", Sequence: 3, RecordedAt: at(3), Actor: "harness",
		Payload: &reinv1.Event_ToolReturned{ToolReturned: &reinv1.ToolReturned{Tool: "read_file", CallId: "c1", Error: big}}}
	args := &structpb.Struct{Fields: map[string]*structpb.Value{"path": structpb.NewStringValue(big)}}
	open := &reinv1.Event{RunId: "run-1", Sequence: 4, RecordedAt: at(4), Actor: "harness",
		Payload: &reinv1.Event_ToolRequested{ToolRequested: &reinv1.ToolRequested{Tool: "read_file", CallId: "c2", Arguments: args}}}
	for i, ev := range []*reinv1.Event{failed, open} {
		if _, err := a.Append(ctx, "run-1", uint64(2+i), []*reinv1.Event{ev}); err != nil {
			t.Fatalf("a's append of %d: %v", ev.GetSequence(), err)
		}
	}
	st, err := a.Load(ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(st.LastError) + len(st.OpenCall.GetArguments().GetFields()["path"].GetStringValue()); n < 4<<20 {
		t.Fatalf("the snapshot holds %d bytes of text, want over 4 MiB", n)
	}

	// b still holds the run at version 2.
	before := dump(t, shared, prefix)
	_, err = b.Append(ctx, "run-1", 2, []*reinv1.Event{step("run-1", 3)})
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("b's stale append over a %d-byte snapshot: %v; want ErrConflict", 2*len(big), err)
	}
	assertUnchanged(t, "a stale append", before, dump(t, shared, prefix))
	ret := &reinv1.Event{RunId: "run-1", Sequence: 5, RecordedAt: at(5), Actor: "harness",
		Payload: &reinv1.Event_ToolReturned{ToolReturned: &reinv1.ToolReturned{Tool: "read_file", CallId: "c2"}}}
	if _, err := b.Append(ctx, "run-1", 4, []*reinv1.Event{ret}); err != nil {
		t.Fatalf("b's append after the conflict, at the version it names: %v", err)
	}
}
