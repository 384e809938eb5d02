package etcd

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestLockShared: two Stores on one prefix share a lock: while one holds
// it the other waits (and gives up when its context ends); once it is
// released, or its holder's Store closes, the other takes it.
func TestLockShared(t *testing.T) {
	prefix := prefixOf(t.TempDir())
	a, b := openShared(t, prefix), openShared(t, prefix)
	t.Cleanup(func() { a.Close(); b.Close() })
	unlock, err := a.Lock(t.Context(), "admission")
	if err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	_, err = b.Lock(waitCtx, "admission")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("b took a lock a holds: %v", err)
	}
	// Another name is another lock.
	other, err := b.Lock(t.Context(), "other")
	if err != nil {
		t.Fatal(err)
	}
	other()
	unlock()
	unlockB, err := b.Lock(t.Context(), "admission")
	if err != nil {
		t.Fatalf("b after a released: %v", err)
	}
	// b's Store closes while it holds the lock: its session ends, and a
	// takes the lock.
	_ = unlockB
	b.Close()
	got := make(chan error, 1)
	go func() {
		u, err := a.Lock(t.Context(), "admission")
		if err == nil {
			u()
		}
		got <- err
	}()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a did not take the lock of a closed Store")
	}
}
