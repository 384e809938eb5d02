package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/reinhq/rein/internal/store"
)

// conflicts is a try that conflicts n times, then returns last.
func conflicts(n int, last error) (try func() error, calls *int) {
	calls = new(int)
	return func() error {
		*calls++
		if *calls <= n {
			return fmt.Errorf("append to run r at version %d: %w", *calls, store.ErrConflict)
		}
		return last
	}, calls
}

func TestRetryOnConflictSucceedsAfterConflicts(t *testing.T) {
	for _, n := range []int{0, 1, 3, store.ConflictRetries} {
		try, calls := conflicts(n, nil)
		if err := store.RetryOnConflict(context.Background(), "r", "cancel", try); err != nil {
			t.Errorf("after %d conflicts: %v, want nil", n, err)
		}
		if *calls != n+1 {
			t.Errorf("after %d conflicts: %d tries, want %d", n, *calls, n+1)
		}
	}
}

func TestRetryOnConflictGivesUpAfterTheBound(t *testing.T) {
	try, calls := conflicts(store.ConflictRetries+1, nil)
	err := store.RetryOnConflict(context.Background(), "r", "cancel", try)
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("err = %v, want one wrapping ErrConflict", err)
	}
	if *calls != store.ConflictRetries+1 {
		t.Errorf("%d tries, want %d", *calls, store.ConflictRetries+1)
	}
	for _, want := range []string{"cancel run r", "try again"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("err = %q, want it to say %q", err, want)
		}
	}
}

func TestRetryOnConflictReturnsOtherErrorsAtOnce(t *testing.T) {
	for _, n := range []int{0, 2} {
		try, calls := conflicts(n, store.ErrFenced)
		err := store.RetryOnConflict(context.Background(), "r", "steer", try)
		if !errors.Is(err, store.ErrFenced) || errors.Is(err, store.ErrConflict) {
			t.Errorf("after %d conflicts: %v, want ErrFenced as it is", n, err)
		}
		if *calls != n+1 {
			t.Errorf("after %d conflicts: %d tries, want %d", n, *calls, n+1)
		}
	}
}

func TestRetryOnConflictStopsWhenCtxIsDone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	err := store.RetryOnConflict(ctx, "r", "steer", func() error {
		calls++
		cancel()
		return store.ErrConflict
	})
	if !errors.Is(err, store.ErrConflict) || calls != 1 {
		t.Errorf("err = %v after %d tries, want the conflict after 1", err, calls)
	}
}
