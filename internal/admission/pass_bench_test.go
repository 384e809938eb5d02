package admission_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/store/bolt"
	"github.com/reinhq/rein/internal/store/mem"
)

// BenchmarkPass times an admission pass with queued runs waiting under
// --max-running 4, on a bbolt store and on the in-memory one: before each
// pass one running run ends and one more run is queued (not timed), so
// each pass starts one run and the queue keeps its length. queued=10 is
// the baseline to read queued=10000 against.
func BenchmarkPass(b *testing.B) {
	for _, kind := range []string{"bolt", "mem"} {
		for _, n := range []int{10, 10_000} {
			b.Run(fmt.Sprintf("store=%s/queued=%d", kind, n), func(b *testing.B) {
				var st store.Store = mem.New()
				if kind == "bolt" {
					db, err := bolt.Open(filepath.Join(b.TempDir(), "rein.db"), bolt.Options{NoSync: true})
					if err != nil {
						b.Fatal(err)
					}
					st = db
				}
				defer st.Close()
				benchPass(b, st, n)
			})
		}
	}
}

func benchPass(b *testing.B, st store.Store, n int) {
	h := newQueueHarnessOn(b, st)
	h.created = n // the fill's runs take the first n submission times
	var g errgroup.Group
	g.SetLimit(16)
	for i := range n {
		g.Go(func() error {
			h.queueAt(fmt.Sprintf("run-%07d", i), i+1)
			return nil
		})
	}
	_ = g.Wait()
	c := h.controller(4)
	running := h.pass(c)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		h.change(running[0], reinv1.RunStatus_RUN_STATUS_COMPLETED)
		h.queue(fmt.Sprintf("more-%07d", i), "acme", 0, time.Time{})
		b.StartTimer()
		started := h.pass(c)
		if len(started) != 1 {
			b.Fatalf("pass %d started %v, want one run", i, started)
		}
		running = append(running[1:], started...)
	}
}
