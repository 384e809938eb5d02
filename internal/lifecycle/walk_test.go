package lifecycle_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/lifecycle"
	"github.com/reinhq/rein/internal/store"
)

// countedEnded is a backend that counts the rows of the ended index it is
// asked for.
type countedEnded struct {
	lifecycle.Backend
	rows atomic.Int64
}

func (c *countedEnded) Ended(ctx context.Context, after string, limit int) ([]store.Ended, error) {
	out, err := c.Backend.Ended(ctx, after, limit)
	c.rows.Add(int64(len(out)))
	return out, err
}

// counted has f's keeper read the store through a counting backend.
func (f *fixture) counted() *countedEnded {
	c := &countedEnded{Backend: f.db}
	f.s = lifecycle.NewStore(c, f.arch)
	f.k = &lifecycle.Keeper{Store: f.s, Policy: func(string) lifecycle.Policy { return f.policy }, Clock: func() time.Time { return f.now },
		Soonest: func() (time.Duration, bool) { return f.policy.ArchiveAfter, f.policy.ArchiveOn || f.policy.RetainOn }}
	return c
}

// endedAt completes a run just started (at version 1) at the time at.
func (f *fixture) endedAt(id string, at time.Time) {
	f.t.Helper()
	f.run(id, "", false)
	done := ev(id, 2)
	done.RecordedAt = timestamppb.New(at)
	done.Payload = &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{
		From: reinv1.RunStatus_RUN_STATUS_RUNNING, To: reinv1.RunStatus_RUN_STATUS_COMPLETED, Reason: "final_answer",
		Result: &reinv1.FinalAnswer{Text: "answer " + marker},
	}}
	if _, err := f.db.Append(context.Background(), id, 1, []*reinv1.Event{done}); err != nil {
		f.t.Fatal(err)
	}
}

// TestSweepReadsStubsOnce: with archive_after and no retention, the runs a
// sweep archived are not read again by the sweeps after it: the index rows
// they read are what ended since, not every stub.
func TestSweepReadsStubsOnce(t *testing.T) {
	f := newFixture(t)
	c := f.counted()
	const n = 40
	for i := range n {
		f.endedAt(fmt.Sprintf("run-%02d", i), t0.Add(time.Duration(i)*time.Second))
	}
	f.policy = lifecycle.Policy{ArchiveOn: true, ArchiveAfter: time.Minute}
	if got := f.sweep(); got.Archived != n {
		t.Fatalf("the first sweep archived %d runs, want %d", got.Archived, n)
	}
	for i := range 3 {
		c.rows.Store(0)
		f.now = f.now.Add(time.Second)
		if got := f.sweep(); got.Archived != 0 || got.Failed != 0 {
			t.Fatalf("sweep %d after all were archived: %+v", i, got)
		}
		if c.rows.Load() != 0 {
			t.Fatalf("sweep %d after all were archived read %d rows of the ended index, want none", i, c.rows.Load())
		}
	}
}

// TestSweepStillFindsWhatIsDue: the twins of TestSweepReadsStubsOnce. A
// run that ends after the walk passed the stubs is archived once due; one
// that is stored ending before the walk's cursor (an import, another
// server's slower clock) is archived too; and a policy that starts
// retaining deletes the stubs the walk had passed.
func TestSweepStillFindsWhatIsDue(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	c := f.counted()
	for i := range 10 {
		f.endedAt(fmt.Sprintf("run-%02d", i), t0.Add(time.Duration(10+i)*time.Second))
	}
	f.policy = lifecycle.Policy{ArchiveOn: true, ArchiveAfter: time.Minute}
	if got := f.sweep(); got.Archived != 10 {
		t.Fatalf("first sweep: %+v", got)
	}
	f.sweep() // the walk passes the stubs

	// Ends after them: not due at once, due a minute later.
	f.endedAt("late", f.now)
	if got := f.sweep(); got.Archived != 0 {
		t.Fatalf("a run that just ended was archived: %+v", got)
	}
	f.now = f.now.Add(time.Minute)
	if got := f.sweep(); got.Archived != 1 {
		t.Fatalf("a run that became due: %+v, want it archived", got)
	}
	if st, err := f.db.Load(ctx, "late"); err != nil || st.Archive == nil {
		t.Fatalf("late: %+v, %v; want it archived", st.Archive, err)
	}

	// Ends before the walk's cursor.
	f.endedAt("behind", t0.Add(time.Second))
	if got := f.sweep(); got.Archived != 1 {
		t.Fatalf("a run stored ending before the stubs: %+v, want it archived", got)
	}
	c.rows.Store(0)
	f.sweep()
	if c.rows.Load() != 0 {
		t.Fatalf("the sweep after the walk started over read %d rows, want none", c.rows.Load())
	}

	// Retention from now on: the stubs the walk passed go.
	f.policy = lifecycle.Policy{ArchiveOn: true, ArchiveAfter: time.Minute, RetainOn: true, Retain: time.Minute}
	if got := f.sweep(); got.Deleted != 12 {
		t.Fatalf("retention after the walk passed the stubs: %+v, want 12 deleted", got)
	}
}

// TestSweepForgetsARunDeletedWhileHeld: a run the walk passed before it
// was due, then deleted on request, is forgotten when it falls due: no
// failure, nothing archived. The twin: a run held the same way and not
// deleted is archived when due.
func TestSweepForgetsARunDeletedWhileHeld(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.counted()
	f.k.Soonest = func() (time.Duration, bool) { return 0, true } // another tenant's policy acts at once
	f.policy = lifecycle.Policy{ArchiveOn: true, ArchiveAfter: 2 * time.Hour}
	f.endedAt("erased", t0)
	f.endedAt("kept", t0)
	if got := f.sweep(); got != (lifecycle.Swept{}) {
		t.Fatalf("a sweep before archive_after: %+v", got)
	}
	if _, err := f.k.Erase(ctx, "erased", "principal:bob", "test", false); err != nil {
		t.Fatal(err)
	}
	f.now = f.now.Add(2 * time.Hour)
	if got := f.sweep(); got != (lifecycle.Swept{Archived: 1}) {
		t.Fatalf("the sweep once due: %+v, want the kept run archived and no failure", got)
	}
}
