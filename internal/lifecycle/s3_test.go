package lifecycle_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/reinhq/rein/internal/lifecycle"
	"github.com/reinhq/rein/internal/s3test"
	"github.com/reinhq/rein/internal/store"
)

// TestS3ArchiveSurvivesTheServersDeath: the archive killed between two
// sweeps loses nothing: the run that could not go stays whole in the live
// store, and goes once the archive is back.
func TestS3ArchiveSurvivesTheServersDeath(t *testing.T) {
	ctx := context.Background()
	srv := s3test.Start(t)
	srv.Setenv(t)
	f := newFixtureAt(t, srv.URL())
	f.policy = lifecycle.Policy{ArchiveOn: true}
	f.run("run-1", "", true)
	if got := f.sweep(); got.Archived != 1 {
		t.Fatalf("first sweep: %+v", got)
	}
	srv.Kill()
	f.run("run-2", "", true)
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	got, err := f.k.Sweep(sctx)
	if err != nil || got.Archived != 0 || got.Failed != 1 {
		t.Fatalf("sweep with the archive dead: %+v, %v", got, err)
	}
	if st, err := f.db.Load(ctx, "run-2"); err != nil || st.Archive != nil || st.Result.GetText() == "" {
		t.Fatalf("run-2 after a failed archive: %+v, %v", st, err)
	}
	// An archived run cannot be read meanwhile: Unavailable, not lost.
	if _, err := f.s.Load(sctx, "run-1"); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("reading an archived run with the archive dead: %v, want ErrUnavailable", err)
	}
	srv.Restart(t)
	f.now = f.now.Add(time.Minute) // past the backoff
	if got := f.sweep(); got.Archived != 1 {
		t.Fatalf("sweep after the archive came back: %+v", got)
	}
	for _, id := range []string{"run-1", "run-2"} {
		st, err := f.s.Load(ctx, id)
		if err != nil || st.Archive == nil || st.Result.GetText() == "" {
			t.Fatalf("%s: %+v, %v", id, st, err)
		}
	}
	// Retention deletes the objects too.
	f.policy = lifecycle.Policy{RetainOn: true}
	if got := f.sweep(); got.Deleted != 2 {
		t.Fatalf("retention: %+v", got)
	}
	var left []string
	_ = filepath.WalkDir(filepath.Join(srv.Dir, srv.Bucket), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			left = append(left, p)
		}
		return nil
	})
	if len(left) != 0 {
		t.Fatalf("the bucket still holds %v", left)
	}
}
