package lifecycle_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/archive"
	"github.com/reinhq/rein/internal/lifecycle"
	"github.com/reinhq/rein/internal/store/bolt"
)

// BenchmarkSweepStubs times a sweep under archive_after with no retention
// (Soonest as rein serve gives it) over a bbolt store that holds stubs
// archived runs, every one archived already: what the sweep finds to do is
// nothing. stubs=0 is the baseline to read the others against.
func BenchmarkSweepStubs(b *testing.B) {
	for _, n := range []int{0, 100_000} {
		b.Run(fmt.Sprintf("stubs=%d", n), func(b *testing.B) {
			ctx := context.Background()
			dir := b.TempDir()
			db, err := bolt.Open(filepath.Join(dir, "rein.db"), bolt.Options{NoSync: true})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			a, err := archive.Open(ctx, "file://"+filepath.ToSlash(filepath.Join(dir, "archive")))
			if err != nil {
				b.Fatal(err)
			}
			defer a.Close()
			if err := fillStubs(ctx, db, n); err != nil {
				b.Fatal(err)
			}
			policy := lifecycle.Policy{ArchiveOn: true, ArchiveAfter: time.Minute}
			now := t0.Add(time.Hour)
			k := &lifecycle.Keeper{Store: lifecycle.NewStore(db, a), Policy: func(string) lifecycle.Policy { return policy },
				Soonest: func() (time.Duration, bool) { return time.Minute, true }, Clock: func() time.Time { return now }}
			if _, err := k.Sweep(ctx); err != nil { // what a server's first sweep reads once
				b.Fatal(err)
			}
			for b.Loop() {
				if got, err := k.Sweep(ctx); err != nil || got != (lifecycle.Swept{}) {
					b.Fatalf("sweep: %+v, %v", got, err)
				}
			}
		})
	}
}

// fillStubs stores n runs that ended, each replaced by its stub (the
// archive record names no object: nothing reads it).
func fillStubs(ctx context.Context, db *bolt.Store, n int) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i := range n {
		g.Go(func() error {
			id := fmt.Sprintf("run-%06d", i)
			start := ev(id, 1)
			start.Payload = &reinv1.Event_RunStarted{RunStarted: &reinv1.RunStarted{
				Contract: &reinv1.TaskContract{Goal: "goal"}, Principal: "alice", Tenant: "acme", RequestId: "req-" + id,
			}}
			if _, _, err := db.Create(ctx, start); err != nil {
				return err
			}
			done := ev(id, 2)
			done.Payload = &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{
				From: reinv1.RunStatus_RUN_STATUS_RUNNING, To: reinv1.RunStatus_RUN_STATUS_COMPLETED, Reason: "final_answer",
				Result: &reinv1.FinalAnswer{Text: "answer"},
			}}
			if _, err := db.Append(ctx, id, 1, []*reinv1.Event{done}); err != nil {
				return err
			}
			_, err := db.Archive(ctx, id, 2, &reinv1.RunArchive{Key: "acme/" + id, Sha256: fmt.Sprintf("%064x", i)})
			return err
		})
	}
	return g.Wait()
}
