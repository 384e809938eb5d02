package replay

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// withTiming gives every timed event of a recording a duration no replay
// measures (hours), as a live run's log holds its own figures.
func withTiming(evs []*reinv1.Event) int {
	n := 0
	for i, ev := range evs {
		d := durationpb.New(time.Duration(i+1) * time.Hour)
		switch p := ev.GetPayload().(type) {
		case *reinv1.Event_ModelReturned:
			p.ModelReturned.Duration = d
		case *reinv1.Event_ToolReturned:
			p.ToolReturned.Duration = d
		case *reinv1.Event_WriteCommitted:
			p.WriteCommitted.Duration = d
		case *reinv1.Event_ChecksCompleted:
			p.ChecksCompleted.Duration = d
		default:
			continue
		}
		n++
	}
	return n
}

// TestReplayKeepsRecordedTiming: the durations a run measured are data the
// recording holds, so a replay, which measures its own, still matches
// event for event, and its log holds the recorded figures.
func TestReplayKeepsRecordedTiming(t *testing.T) {
	for _, name := range []string{"approve.rein", "retried.rein", "compacted.rein"} {
		t.Run(name, func(t *testing.T) {
			x := readExport(t, filepath.Join(recordings, name))
			if withTiming(x.GetEvents()) == 0 {
				t.Fatalf("%s has no timed event", name)
			}
			res, err := Run(context.Background(), x.GetEvents(), Options{Blobs: x.GetBlobs()})
			if err != nil {
				t.Fatal(err)
			}
			if res.Divergence != nil {
				t.Fatalf("replay of %s with recorded durations: %v", name, res.Divergence)
			}
		})
	}
}

// The twin: only the durations are recorded data. A figure the harness
// computes beside them (model_returned's cost) that the recording does not
// hold still parts the runs, at that event.
func TestReplayComparesAllButTiming(t *testing.T) {
	x := readExport(t, filepath.Join(recordings, "approve.rein"))
	withTiming(x.GetEvents())
	var want uint64
	for _, ev := range x.GetEvents() {
		if mr := ev.GetModelReturned(); mr != nil {
			mr.CostUsd += 1
			want = ev.GetSequence()
			break
		}
	}
	res, err := Run(context.Background(), x.GetEvents(), Options{Blobs: x.GetBlobs()})
	if err != nil {
		t.Fatal(err)
	}
	if d := res.Divergence; d == nil || d.Sequence != want || d.Field != "model_returned.cost_usd" {
		t.Fatalf("divergence %v, want one at sequence %d on model_returned.cost_usd", d, want)
	}
}
