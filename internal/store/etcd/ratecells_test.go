package etcd

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
)

// TestRateBucketShared: many updates at once from two Stores on one
// prefix each count once: none is lost to another's.
func TestRateBucketShared(t *testing.T) {
	prefix := prefixOf(t.TempDir())
	a, b := openShared(t, prefix), openShared(t, prefix)
	t.Cleanup(func() { a.Close(); b.Close() })
	incr := func(old []byte) ([]byte, error) {
		n, _ := strconv.Atoi(string(old))
		return []byte(strconv.Itoa(n + 1)), nil
	}
	var wg sync.WaitGroup
	for i := range 40 {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Go(func() {
			if err := s.UpdateRateBucket(context.Background(), "model/x/requests", incr); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	var got []byte
	if err := a.UpdateRateBucket(context.Background(), "model/x/requests", func(old []byte) ([]byte, error) { got = old; return old, nil }); err != nil {
		t.Fatal(err)
	}
	if string(got) != "40" {
		t.Fatalf("after 40 increments the bucket holds %q, want 40", got)
	}
	// The twin: an update whose function fails stores nothing.
	refused := errors.New("refused")
	if err := b.UpdateRateBucket(context.Background(), "model/x/requests", func([]byte) ([]byte, error) { return []byte("0"), refused }); !errors.Is(err, refused) {
		t.Fatalf("a refused update: %v", err)
	}
	if err := a.UpdateRateBucket(context.Background(), "model/x/requests", func(old []byte) ([]byte, error) { got = old; return old, nil }); err != nil || string(got) != "40" {
		t.Fatalf("after a refused update the bucket holds %q (%v), want 40", got, err)
	}
}
